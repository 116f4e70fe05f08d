"""Red-team round on the non-pickle formats: bypasses found, the ordinary files beside them.

Each attack is built here as inert bytes and asserted by rule id; nothing is loaded or rendered.
The last tests run the whole engine over one directory of everything, where sniffing decides
which validator sees each file.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from registry.scanning import gguf, jinja_check, keras, onnx, remote_code, safetensors, scan_directory, scan_stream
from tests.support.format_samples import (
    CHAT_TEMPLATE_LLAMA3,
    HF_CONFIGS,
    KEY_ASSEMBLY_CHAT_TEMPLATES,
    MALICIOUS_CHAT_TEMPLATES,
    MORE_ORDINARY_CHAT_TEMPLATES,
    ORDINARY_CHAT_TEMPLATES,
    gguf_kv_string,
    gguf_llama_realistic,
    gguf_raw,
    gguf_tensor_info,
    gguf_vocab_only,
    keras_archive,
    keras_lambda_layer,
    keras_legacy_h5_config,
    keras_sequential_config,
    onnx_fields_reordered,
    onnx_model,
    onnx_save_with_external_data,
    onnx_with_contrib_ops,
    rules,
    safetensors_raw,
    safetensors_torch_all_dtypes,
    scan_bytes,
    tokenizer_config,
    verdict,
)

ALL_ORDINARY_TEMPLATES = {**ORDINARY_CHAT_TEMPLATES, **MORE_ORDINARY_CHAT_TEMPLATES}
_CYCLER_SSTI = MALICIOUS_CHAT_TEMPLATES["gguf_chat_template_cycler_globals_ssti"]


def _engine(data: bytes, name: str):
    return scan_stream(name, io.BytesIO(data), len(data))


# --- chat templates: keys assembled at render time ------------------------------------------------


@pytest.mark.parametrize("name", sorted(KEY_ASSEMBLY_CHAT_TEMPLATES))
def test_subscript_key_assembled_through_bindings_is_a_gadget(name):
    issues = jinja_check.check_template(KEY_ASSEMBLY_CHAT_TEMPLATES[name])
    assert any(i.kind == "gadget" and i.severity.value == "unsafe" for i in issues), issues


@pytest.mark.parametrize("name", sorted(ALL_ORDINARY_TEMPLATES))
def test_ordinary_templates_stay_clean(name):
    assert jinja_check.check_template(ALL_ORDINARY_TEMPLATES[name]) == []


def test_index_arithmetic_and_data_keys_are_not_assembled_names():
    template = (
        "{% set ns = namespace(i=0) %}{% for m in messages %}{% set ns.i = ns.i + 1 %}{% endfor %}"
        "{{ messages[ns.i - 1]['content'] }}{{ roles[messages[0].role] }}{{ messages[messages|length - 1] }}"
        "{% macro show(m) %}{{ m['content'] }}{% endmacro %}{{ show(messages[0]) }}"
    )
    assert jinja_check.check_template(template) == []


def test_key_built_from_data_without_underscores_is_only_suspicious():
    issues = jinja_check.check_template("{{ prefixes[message.role ~ 'prefix'] }}")
    assert {(i.kind, i.severity.value) for i in issues} == {("dynamic-attribute", "suspicious")}


def test_macro_named_like_a_flask_global_is_local():
    assert jinja_check.check_template("{% macro g(x) %}{{ x }}{% endmacro %}{{ g(messages[0].content) }}") == []


@pytest.mark.parametrize("name", sorted(KEY_ASSEMBLY_CHAT_TEMPLATES)[:3])
def test_key_assembly_is_unsafe_in_every_carrier(tmp_path, name):
    template = KEY_ASSEMBLY_CHAT_TEMPLATES[name]
    path = gguf_llama_realistic(tmp_path / "m.gguf", chat_template=template)
    assert "gguf.chat-template.gadget" in rules(scan_bytes(gguf.scan, path.read_bytes(), "m.gguf"))
    raw = json.dumps(tokenizer_config(template)).encode()
    assert "remote-code.chat-template.gadget" in rules(scan_bytes(remote_code.scan, raw, "tokenizer_config.json"))
    found = scan_bytes(remote_code.scan, template.encode(), "additional_chat_templates/tool_use.jinja")
    assert verdict(found) == "unsafe"


# --- GGUF ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("big_endian", [False, True])
@pytest.mark.parametrize("name", sorted(ALL_ORDINARY_TEMPLATES))
def test_realistic_llama_gguf_is_safe(tmp_path, name, big_endian):
    path = gguf_llama_realistic(
        tmp_path / "m.gguf",
        chat_template=ALL_ORDINARY_TEMPLATES[name],
        big_endian=big_endian,
        named_templates={"tool_use": MORE_ORDINARY_CHAT_TEMPLATES["hermes_command_r_tools"],
                         "rag": CHAT_TEMPLATE_LLAMA3},
    )
    assert scan_bytes(gguf.scan, path.read_bytes(), "m.gguf") == []


def test_vocab_only_gguf_is_safe(tmp_path):
    assert scan_bytes(gguf.scan, gguf_vocab_only(tmp_path / "ggml-vocab-llama.gguf").read_bytes(), "v.gguf") == []


def test_gguf_chat_template_key_cut_at_nul_is_checked():
    # llama-cpp-python reads keys as C strings: ``tokenizer.chat_template\0x`` is the chat template.
    data = gguf_raw([gguf_kv_string("general.architecture", "llama"),
                     gguf_kv_string("tokenizer.chat_template\0x", _CYCLER_SSTI)], [])
    found = scan_bytes(gguf.scan, data, "m.gguf")
    assert {"gguf.chat-template.gadget", "gguf.metadata.key-nul"} <= rules(found)
    assert verdict(found) == "unsafe"


def test_gguf_tensorless_file_with_trailing_payload_is_flagged(tmp_path):
    vocab = gguf_vocab_only(tmp_path / "v.gguf").read_bytes()
    found = scan_bytes(gguf.scan, vocab + b"\x80\x04\x95" + bytes(200) + b".", "v.gguf")
    assert rules(found) == {"gguf.data.trailing-bytes"}


def test_gguf_alignment_padding_with_bytes_is_flagged():
    kvs, infos = [gguf_kv_string("general.architecture", "llama")], [gguf_tensor_info("t", [8], 0, 0)]
    data = gguf_raw(kvs, infos, data=bytes(32))
    header_end = len(gguf_raw(kvs, infos, alignment=1))
    assert header_end < len(data) - 32, "the sample needs some padding to fill"
    tampered = data[:header_end] + b"X" * (len(data) - 32 - header_end) + data[-32:]
    assert scan_bytes(gguf.scan, data, "m.gguf") == []
    assert rules(scan_bytes(gguf.scan, tampered, "m.gguf")) == {"gguf.padding.invalid"}


# --- ONNX ---------------------------------------------------------------------------------------------


def test_onnx_with_contrib_and_ml_ops_and_loop_body_is_safe():
    assert scan_bytes(onnx.scan, onnx_with_contrib_ops(), "model.onnx") == []


def test_onnx_ort_memory_address_tag_is_unsafe():
    found = scan_bytes(onnx.scan, onnx_model(external="*/_ORT_MEM_ADDR_/*"), "model.onnx")
    assert rules(found) == {"onnx.external-data.memory-address"}
    assert verdict(found) == "unsafe"


def test_onnx_saved_with_external_data_is_safe_in_its_directory(tmp_path):
    onnx_save_with_external_data(tmp_path / "onnx")
    scans = {s.path: s for s in scan_directory(tmp_path)}
    assert scans["onnx/model.onnx"].format == "onnx"
    assert {p: s.verdict.value for p, s in scans.items()} == {"onnx/model.onnx": "safe", "onnx/model.onnx_data": "safe"}


def test_onnx_validator_sees_traversal_whatever_the_field_order():
    found = scan_bytes(onnx.scan, onnx_fields_reordered(onnx_model(external="../../etc/passwd")), "model.onnx")
    assert "onnx.external-data.escape" in rules(found)


def test_engine_routes_reordered_onnx_to_the_validator():
    scan = _engine(onnx_fields_reordered(onnx_model(external="../../etc/passwd")), "model.onnx")
    assert scan.verdict.value == "unsafe"


# --- Keras --------------------------------------------------------------------------------------------


def _seq(layer):
    cfg = keras_sequential_config()
    cfg["config"]["layers"].append(layer)
    return cfg


@pytest.mark.parametrize(
    ("layer", "rule"),
    [
        # CVE-2025-8747 shape: keras's own downloader, named by implementation module.
        ({"module": "keras.src.utils.file_utils", "class_name": "get_file",
          "config": {"origin": "http://x/p", "fname": "/tmp/p"}}, "keras.module.gadget"),
        # CVE-2025-9906 shape: the safe-mode switch as a config object.
        ({"module": "keras.src.saving.serialization_lib", "class_name": "enable_unsafe_deserialization", "config": {}},
         "keras.module.gadget"),
        ({"module": "keras.src.legacy.saving.legacy_h5_format", "class_name": "load_model_from_hdf5", "config": {}},
         "keras.module.gadget"),
        ({"module": "keras.layers", "class_name": "Dense", "registered_name": "Lambda", "config": {}},
         "keras.layer.lambda"),
        ({"class_name": "keras.layers.Lambda", "config": {}}, "keras.layer.lambda"),
    ],
)
def test_keras_src_gadgets_are_unsafe(layer, rule):
    found = keras.check_config(_seq(layer), "config.json")
    assert rule in rules(found)
    assert verdict(found) == "unsafe"


def test_keras_src_ops_and_layers_are_ordinary():
    layer = {"module": "keras.src.ops.numpy", "class_name": "Add", "config": {"name": "add"}, "registered_name": None}
    dense = {"module": "keras.src.layers.core.dense", "class_name": "Dense", "config": {"name": "d", "units": 2},
             "registered_name": None}
    assert keras.check_config(_seq(layer), "config.json") == []
    assert keras.check_config(_seq(dense), "config.json") == []


def test_engine_finds_keras_h5_behind_a_user_block(tmp_path):
    import h5py

    path = tmp_path / "model.h5"
    with h5py.File(path, "w", userblock_size=512) as f:
        f.attrs["model_config"] = json.dumps(keras_legacy_h5_config(keras_lambda_layer(None)))
    assert scan_stream("model.h5", io.BytesIO(path.read_bytes()), path.stat().st_size).verdict.value == "unsafe"


@pytest.mark.parametrize("block", [512, 4096, 131072])
def test_keras_h5_behind_a_pickle_or_json_user_block_is_unsafe(tmp_path, block):
    """The user block may hold another format entirely; the HDF5 behind it is still read by h5py."""
    import pickle

    import h5py

    path = tmp_path / "model.h5"
    with h5py.File(path, "w", userblock_size=block) as f:
        f.attrs["model_config"] = json.dumps(keras_legacy_h5_config(keras_lambda_layer(None)))
    data = bytearray(path.read_bytes())
    front = pickle.dumps({"harmless": [1, 2, 3]}, protocol=2) if block == 512 else b'{"a": 1}'
    data[: len(front)] = front
    scan = scan_stream("weights.bin", io.BytesIO(bytes(data)), len(data))
    found = {f.rule_id for f in scan.findings}
    assert scan.verdict.value == "unsafe" and "keras.layer.lambda" in found
    if block > 65536:
        # Past the sniffed prefix the file is JSON first: the HDF5 behind it is reported as a polyglot.
        assert "polyglot.hdf5" in found


def test_random_bytes_are_not_taken_for_onnx():
    import random

    from registry.scanning.sniff import sniff

    rng = random.Random(7)
    for _ in range(3000):
        blob = bytes(rng.getrandbits(8) for _ in range(256))
        assert sniff(blob, len(blob)) != "onnx"
    # Starting with a graph field key (the likeliest random hit) is not enough either.
    for _ in range(3000):
        blob = b"\x3a" + bytes(rng.getrandbits(8) for _ in range(255))
        assert sniff(blob, len(blob)) != "onnx"


def test_keras_validator_reads_h5_behind_a_user_block(tmp_path):
    import h5py

    path = tmp_path / "model.h5"
    with h5py.File(path, "w", userblock_size=512) as f:
        f.attrs["model_config"] = json.dumps(keras_legacy_h5_config(keras_lambda_layer(None)))
    assert "keras.layer.lambda" in rules(scan_bytes(keras.scan, path.read_bytes(), "model.h5"))


# --- safetensors --------------------------------------------------------------------------------------


def test_safetensors_torch_every_dtype_is_safe():
    assert scan_bytes(safetensors.scan, safetensors_torch_all_dtypes(), "model.safetensors") == []


@pytest.mark.parametrize("escaped", ['"w\\ud800"', '"__metadata__"'])
def test_safetensors_lone_surrogate_escape_is_unsafe(escaped):
    # Python's json accepts ``\ud800``; the Rust reference refuses the header: two readers, two files.
    entry = '{"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}'
    header = (f'{{{escaped}: {entry}}}' if escaped != '"__metadata__"'
              else f'{{"w": {entry}, "__metadata__": {{"k": "\\udc80"}}}}')
    found = scan_bytes(safetensors.scan, safetensors_raw(header.encode(), bytes(4)), "m.safetensors")
    assert rules(found) == {"safetensors.header.encoding"}


def test_safetensors_hiding_a_keras_zip_in_a_tensor_is_not_safe():
    # Keras' load_model opens a file zipfile.is_zipfile accepts: the central directory at the end.
    inner = keras_archive(_seq(keras_lambda_layer()))
    data = safetensors_raw({"w": {"dtype": "U8", "shape": [len(inner)], "data_offsets": [0, len(inner)]}}, inner)
    assert zipfile.is_zipfile(io.BytesIO(data))
    assert scan_bytes(safetensors.scan, data, "model.safetensors") == []  # structurally valid...
    scan = _engine(data, "model.keras")
    # ...but the engine opens the zip that zip readers see, and judges the Keras model in it.
    assert scan.verdict.value == "unsafe" and "keras.layer.lambda" in {f.rule_id for f in scan.findings}


# --- HF configs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_hf_configs_are_safe(name):
    raw = json.dumps(HF_CONFIGS[name], indent=2).encode()
    assert _engine(raw, name).verdict.value == "safe"


@pytest.mark.parametrize("name", sorted(ALL_ORDINARY_TEMPLATES))
def test_tokenizer_configs_with_ordinary_templates_are_safe(name):
    cfg = tokenizer_config([{"name": "default", "template": ALL_ORDINARY_TEMPLATES[name]},
                            {"name": "tool_use", "template": CHAT_TEMPLATE_LLAMA3}])
    raw = json.dumps(cfg, ensure_ascii=False, indent=2).encode()
    assert _engine(raw, "tokenizer_config.json").verdict.value == "safe"


# --- the whole engine over one directory --------------------------------------------------------------


def _write(root: Path, name: str, data: bytes) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_engine_verdicts_over_a_directory_of_ordinary_files_and_attacks(tmp_path):
    ordinary, attacks = tmp_path / "ordinary", tmp_path / "attacks"
    ordinary.mkdir()
    attacks.mkdir()
    for name, template in ALL_ORDINARY_TEMPLATES.items():
        gguf_llama_realistic(ordinary / f"{name}.gguf", chat_template=template, big_endian=name == "phi3")
        _write(ordinary, f"{name}/tokenizer_config.json", json.dumps(tokenizer_config(template)).encode())
        _write(ordinary, f"{name}/chat_template.jinja", template.encode())
    gguf_vocab_only(ordinary / "ggml-vocab.gguf")
    _write(ordinary, "model.safetensors", safetensors_torch_all_dtypes())
    _write(ordinary, "contrib/model.onnx", onnx_with_contrib_ops())
    onnx_save_with_external_data(ordinary / "onnx")
    for name, cfg in HF_CONFIGS.items():
        _write(ordinary, name, json.dumps(cfg).encode())

    for name, template in KEY_ASSEMBLY_CHAT_TEMPLATES.items():
        gguf_llama_realistic(attacks / f"{name}.gguf", chat_template=template)
        _write(attacks, f"{name}/tokenizer_config.json", json.dumps(tokenizer_config(template)).encode())
        _write(attacks, f"{name}/chat_template.jinja", template.encode())
    _write(attacks, "nul_key.gguf", gguf_raw([gguf_kv_string("tokenizer.chat_template\0", _CYCLER_SSTI)], []))
    _write(attacks, "ort_mem/model.onnx", onnx_model(external="*/_ORT_MEM_ADDR_/*"))
    _write(attacks, "keras_get_file.keras",
           keras_archive(_seq({"module": "keras.src.utils.file_utils", "class_name": "get_file", "config": {}})))

    for scan in scan_directory(ordinary):
        assert scan.verdict.value == "safe", (scan.path, scan.format, [f.as_dict() for f in scan.findings])
    scans = scan_directory(attacks)
    assert len(scans) == 3 * len(KEY_ASSEMBLY_CHAT_TEMPLATES) + 3
    for scan in scans:
        assert scan.verdict.value == "unsafe", (scan.path, scan.format, [f.as_dict() for f in scan.findings])


@pytest.mark.parametrize(("name", "doc", "rule"), [
    ("adapter_config.json", {"peft_type": "LORA", "auto_mapping": {"base_model_class": "Evil",
                                                                   "parent_library": "evil_pkg.models"}},
     "remote-code.peft-auto-mapping"),
    ("sentence_bert_config.json", {"max_seq_length": 256, "model_args": {"trust_remote_code": True}},
     "remote-code.trust-remote-code"),
    ("config_sentence_transformers.json", {"trust_remote_code": True}, "remote-code.trust-remote-code"),
])
def test_other_remote_code_switches_are_flagged(name, doc, rule):
    data = json.dumps(doc).encode()
    scan = scan_stream(name, io.BytesIO(data), len(data))
    assert rule in {f.rule_id for f in scan.findings} and scan.verdict.value == "suspicious"


def test_ordinary_peft_and_sentence_transformers_configs_are_safe():
    for name, doc in [
        ("adapter_config.json", {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "auto_mapping": None,
                                 "target_modules": ["q_proj", "v_proj"], "base_model_name_or_path": "org/base"}),
        ("sentence_bert_config.json", {"max_seq_length": 256, "do_lower_case": False}),
        ("config_sentence_transformers.json", {"__version__": {"sentence_transformers": "3.0.1"},
                                               "prompts": {}, "similarity_fn_name": "cosine"}),
    ]:
        data = json.dumps(doc).encode()
        assert scan_stream(name, io.BytesIO(data), len(data)).verdict.value == "safe"
