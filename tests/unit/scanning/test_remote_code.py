"""Remote code in repositories (auto_map, Python files) and chat templates in tokenizer configs."""

from __future__ import annotations

import json

import pytest

from registry.scanning import remote_code
from tests.support.format_samples import (
    LLAMA_CONFIG,
    MALICIOUS_CHAT_TEMPLATES,
    ORDINARY_CHAT_TEMPLATES,
    keras_lambda_layer,
    keras_sequential_config,
    mutations,
    rules,
    scan_bytes,
    tokenizer_config,
    verdict,
)


def _scan(doc: object, path: str, **ctx: object) -> list:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return scan_bytes(remote_code.scan, data, path, **ctx)


def test_ordinary_llama_config_has_no_findings():
    assert _scan(LLAMA_CONFIG, "config.json") == []


@pytest.mark.parametrize("name", sorted(ORDINARY_CHAT_TEMPLATES))
def test_ordinary_tokenizer_config_with_realistic_template_has_no_findings(name):
    assert _scan(tokenizer_config(ORDINARY_CHAT_TEMPLATES[name]), "tokenizer_config.json") == []


def test_named_chat_template_list_is_checked_item_by_item():
    templates = [
        {"name": "default", "template": ORDINARY_CHAT_TEMPLATES["chatml_qwen"]},
        {"name": "tool_use", "template": ORDINARY_CHAT_TEMPLATES["tools_macros"]},
    ]
    assert _scan(tokenizer_config(templates), "tokenizer_config.json") == []
    templates.append({"name": "rag", "template": MALICIOUS_CHAT_TEMPLATES["chat_template_joiner_globals_item"]})
    findings = _scan(tokenizer_config(templates), "tokenizer_config.json")
    assert {f.location for f in findings} == {"tokenizer_config.json$.chat_template[2](rag)"}
    assert verdict(findings) == "unsafe"


@pytest.mark.parametrize("name", sorted(MALICIOUS_CHAT_TEMPLATES))
def test_tokenizer_config_chat_template_gadgets_are_unsafe(name):
    findings = _scan(tokenizer_config(MALICIOUS_CHAT_TEMPLATES[name]), "tokenizer_config.json")
    assert "remote-code.chat-template.gadget" in rules(findings)
    assert verdict(findings) == "unsafe"


def test_chat_template_jinja_and_json_files_are_checked():
    evil = MALICIOUS_CHAT_TEMPLATES["gguf_chat_template_cycler_globals_ssti"]
    assert "remote-code.chat-template.gadget" in rules(_scan(evil.encode(), "chat_template.jinja"))
    assert "remote-code.chat-template.gadget" in rules(
        _scan(evil.encode(), "additional_chat_templates/tool_use.jinja")
    )
    assert "remote-code.chat-template.gadget" in rules(_scan({"chat_template": evil}, "chat_template.json"))
    assert _scan(ORDINARY_CHAT_TEMPLATES["gemma"].encode(), "chat_template.jinja") == []


def test_python_file_is_suspicious():
    findings = _scan(b"import os\nos.system('id')\n", "modeling_evil.py")
    assert rules(findings) == {"remote-code.python-file"}
    assert verdict(findings) == "suspicious"
    assert rules(_scan(b"", "archive.zip!pkg/__init__.py")) == {"remote-code.python-file"}
    assert rules(_scan(b"\x7fELF", "kernels/ops.so")) == {"remote-code.compiled-code"}


def test_auto_map_lists_the_modules_it_would_import():
    config = dict(LLAMA_CONFIG,
                  auto_map={"AutoConfig": "configuration_x.XConfig", "AutoModelForCausalLM": "modeling_x.XForCausalLM"})
    findings = _scan(config, "config.json")
    assert rules(findings) == {"remote-code.auto-map"}
    assert "configuration_x.py" in findings[0].message and "modeling_x.py" in findings[0].message
    assert verdict(findings) == "suspicious"


def test_auto_map_to_another_repository_is_flagged_separately():
    config = dict(LLAMA_CONFIG,
                  auto_map={"AutoModel": "attacker/payload--modeling_x.XModel", "AutoConfig": "configuration_x.C"})
    findings = _scan(config, "config.json")
    assert rules(findings) == {"remote-code.auto-map", "remote-code.auto-map.external-repo"}
    external = next(f for f in findings if f.rule_id == "remote-code.auto-map.external-repo")
    assert "attacker/payload" in external.message
    assert external.location == "config.json$.auto_map.AutoModel"


@pytest.mark.parametrize("ref", ["../../evil.Cls", "/abs/modeling.Cls", "modeling_x", 42, "a..b.C"])
def test_auto_map_invalid_reference_is_unsafe(ref):
    findings = _scan(dict(LLAMA_CONFIG, auto_map={"AutoModel": ref}), "config.json")
    assert "remote-code.auto-map.invalid-reference" in rules(findings)
    assert verdict(findings) == "unsafe"


def test_auto_map_module_missing_from_the_version():
    siblings = frozenset({"sub/config.json", "sub/modeling_x.py"})
    config = dict(LLAMA_CONFIG, auto_map={"AutoModel": "modeling_x.M", "AutoConfig": "configuration_x.C"})
    findings = _scan(config, "sub/config.json", siblings=siblings)
    missing = [f for f in findings if f.rule_id == "remote-code.auto-map.missing-module"]
    assert [f.location for f in missing] == ["sub/config.json$.auto_map.AutoConfig"]


def test_tokenizer_auto_map_pair_with_null_fast_class():
    doc = tokenizer_config(auto_map={"AutoTokenizer": ["tokenization_x.XTokenizer", None]},
                           tokenizer_class="XTokenizer")
    findings = _scan(doc, "tokenizer_config.json")
    assert rules(findings) == {"remote-code.auto-map"}
    assert "tokenization_x.py" in findings[0].message


def test_auto_map_in_processor_config_and_custom_pipelines():
    assert rules(_scan({"auto_map": {"AutoProcessor": "processing_x.P"}}, "preprocessor_config.json")) == {
        "remote-code.auto-map"}
    config = dict(LLAMA_CONFIG, custom_pipelines={"text-generation": {"impl": "pipeline_x.P", "pt": []}})
    assert rules(_scan(config, "config.json")) == {"remote-code.custom-pipeline"}


def test_duplicate_auto_map_key_is_a_parser_differential():
    raw = b'{"model_type": "llama", "auto_map": {"AutoModel": "modeling_x.M"}, "auto_map": {}}'
    findings = _scan(raw, "config.json")
    assert "remote-code.json.duplicate-key" in rules(findings)
    assert verdict(findings) == "unsafe"


def test_unparseable_and_oversized_config():
    findings = _scan(b'{"model_type": "llama",', "config.json")
    assert rules(findings) == {"remote-code.config-unparseable"}
    assert verdict(findings) == "error"
    big = b'{"pad": "' + b" " * (17 << 20) + b'"}'
    findings = _scan(big, "config.json")
    assert rules(findings) == {"remote-code.config-too-large"}
    assert verdict(findings) == "suspicious"


def test_sentence_transformers_modules_json_custom_type():
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    assert _scan(modules, "modules.json") == []
    modules.append({"idx": 2, "name": "2", "path": "", "type": "os.system"})
    modules.append({"idx": 3, "name": "3", "path": "", "type": "my_pkg.Layer"})
    findings = _scan(modules, "modules.json")
    assert [(f.location, f.severity.value) for f in findings] == [
        ("modules.json$[2].type", "unsafe"),
        ("modules.json$[3].type", "suspicious"),
    ]


def test_keras_directory_config_json_is_walked():
    assert _scan(keras_sequential_config(), "config.json") == []
    config = keras_sequential_config()
    config["config"]["layers"].append(keras_lambda_layer())
    assert "keras.layer.lambda" in rules(_scan(config, "config.json"))


def test_other_files_are_not_judged():
    assert _scan(b"not json at all", "vocab.json") == []
    assert _scan(b"\x00\x01", "model.safetensors") == []
    assert remote_code.handles("tokenizer_config.json") and remote_code.handles("x/modeling.py")
    assert not remote_code.handles("tokenizer.json")


def test_fuzzed_configs_never_raise():
    doc = json.dumps(tokenizer_config(auto_map={"AutoTokenizer": ["tokenization_x.T", None]})).encode()
    for _, mutated in mutations(doc, seed=5, count=300):
        _scan(mutated, "tokenizer_config.json")
    for _, mutated in mutations(ORDINARY_CHAT_TEMPLATES["llama3"].encode(), seed=6, count=200):
        _scan(mutated, "chat_template.jinja")
