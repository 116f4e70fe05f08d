"""The facts readers on tiny models written by the real libraries, and on hostile files.

Numbers are worked out by hand from the shapes in ``tests/support/tiny_model.py``.
"""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest

from registry.facts import read_model_facts
from registry.facts.weights import GGUF_FILE_TYPES, MAX_SAFETENSORS_HEADER
from tests.support.tiny_model import (
    GGUF_CHAT_TEMPLATE,
    tiny_bf16_safetensors,
    tiny_gguf,
    tiny_model_files,
)

# embed 32x16 + lm_head 32x16 + norm 16 + 2 layers x (4 x 16x16 attention + 3 x 32x16 mlp + 2 x 16 norms)
TINY_PARAMETERS = 512 + 512 + 16 + 2 * (4 * 256 + 3 * 512 + 2 * 16)


class Reads:
    """``read_range`` over in-memory files, recording every range asked for."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.ranges: list[tuple[str, int, int]] = []

    def __call__(self, path: str, start: int, end: int) -> bytes:
        self.ranges.append((path, start, end))
        return self.files[path][start:end]

    def facts(self, **kwargs):
        return read_model_facts({p: len(b) for p, b in self.files.items()}, self, **kwargs)


def _facts(files: dict[str, bytes], **kwargs):
    return Reads(files).facts(**kwargs)


def _json(obj) -> bytes:
    return json.dumps(obj).encode()


def _value(cell):
    assert "unknown" not in cell, cell
    return cell["value"]


def test_sharded_safetensors_llama_shape_config_and_tokenizer():
    files = tiny_model_files(0)
    facts = _facts(files)
    w, a, t = facts["weights"], facts["architecture"], facts["tokenizer"]
    assert TINY_PARAMETERS == 6224
    assert _value(w["parameters"]) == 6224 and _value(w["tensor_bytes"]) == 6224 * 4
    assert _value(w["dtypes"]) == {"F32": 6224} and _value(w["formats"]) == ["safetensors"]
    assert w["sets"][0]["index"] == "model.safetensors.index.json" and len(w["sets"][0]["files"]) == 2
    assert {k: _value(a[k]) for k in ("model_type", "num_hidden_layers", "hidden_size", "num_attention_heads",
                                      "num_key_value_heads", "vocab_size", "max_position_embeddings",
                                      "torch_dtype", "tie_word_embeddings", "rope_scaling")} == {
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 16, "num_attention_heads": 2,
        "num_key_value_heads": 2, "vocab_size": 32, "max_position_embeddings": 64, "torch_dtype": "float32",
        "tie_word_embeddings": False, "rope_scaling": None}
    assert _value(a["architectures"]) == ["LlamaForCausalLM"]
    assert a["head_dim"] == {"value": 8, "source": "config.json hidden_size, num_attention_heads",
                             "derived": "hidden_size / num_attention_heads"}
    template = json.loads(files["tokenizer_config.json"])["chat_template"]
    assert _value(t["chat_template_sha256"]) == hashlib.sha256(template.encode()).hexdigest()
    assert _value(t["class"]) == "PreTrainedTokenizerFast"
    assert (_value(t["bos_token"]), _value(t["eos_token"]), _value(t["unk_token"]), _value(t["pad_token"])) == (
        "<s>", "</s>", "<unk>", None)
    assert _value(facts["quantization"]["method"]) is None
    assert json.loads(json.dumps(facts)) == facts  # storable as JSON as it is


def test_only_headers_are_read():
    files = tiny_model_files(0)
    # A shard whose data section is 4 MiB: none of it may be read.
    big = files["model-00001-of-00002.safetensors"]
    n = struct.unpack("<Q", big[:8])[0]
    reads = Reads(files)
    reads.facts()
    for path, start, end in reads.ranges:
        if path.endswith(".safetensors"):
            header_end = 8 + struct.unpack("<Q", files[path][:8])[0]
            assert end <= header_end, (path, start, end)
    assert n < len(big)
    weights_read = sum(e - s for p, s, e in reads.ranges if p.endswith(".safetensors"))
    assert weights_read == sum(8 + struct.unpack("<Q", files[p][:8])[0] for p in files if p.endswith(".safetensors"))


def test_torch_bf16_single_file_without_index():
    facts = _facts({"model.safetensors": tiny_bf16_safetensors(), "config.json": _json({"model_type": "x"})})
    w = facts["weights"]
    assert _value(w["dtypes"]) == {"BF16": 32 * 16 + 16 * 16, "F32": 16}
    assert _value(w["parameters"]) == 784 and _value(w["tensor_bytes"]) == 768 * 2 + 16 * 4


def test_gguf_with_file_type_chat_template_and_architecture_from_its_metadata():
    facts = _facts({"tiny-Q8_0.gguf": tiny_gguf(file_type=7)})
    w, a, q, t = facts["weights"], facts["architecture"], facts["quantization"], facts["tokenizer"]
    # token_embd 32x64 F32 + output_norm 64 F16 + 2 x attn_q 64x64 Q8_0 (34 bytes per 32 elements)
    assert _value(w["parameters"]) == 2048 + 64 + 2 * 4096
    assert _value(w["tensor_bytes"]) == 2048 * 4 + 64 * 2 + 2 * 4096 // 32 * 34
    assert _value(w["dtypes"]) == {"F32": 2048, "F16": 64, "Q8_0": 8192}
    assert _value(q["gguf_file_type"]) == {"tiny-Q8_0.gguf": "MOSTLY_Q8_0"}
    assert {k: _value(a[k]) for k in ("model_type", "num_hidden_layers", "hidden_size", "num_attention_heads",
                                      "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings",
                                      "rope_scaling")} == {
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 32, "max_position_embeddings": 4096,
        "rope_scaling": {"type": "linear", "factor": 2.0}}
    assert "no config.json" in a["architectures"]["unknown"]
    assert _value(t["chat_template_sha256"]) == hashlib.sha256(GGUF_CHAT_TEMPLATE.encode()).hexdigest()
    assert _value(t["class"]) == "llama"
    assert "token id 1" in t["bos_token"]["unknown"]


def test_gguf_named_templates_and_variants():
    named = [{"name": "default", "template": "A"}, {"name": "tool_use", "template": "B"}]
    facts = _facts({"m-Q8_0.gguf": tiny_gguf(file_type=7, chat_template=named),
                    "m-F16.gguf": tiny_gguf(file_type=1, chat_template=named)})
    t, w, q = facts["tokenizer"], facts["weights"], facts["quantization"]
    sha = lambda s: hashlib.sha256(s.encode()).hexdigest()  # noqa: E731
    assert _value(t["chat_templates"]) == {"default": sha("A"), "tool_use": sha("B")}
    assert _value(t["chat_template_sha256"]) == sha("A")
    # Two variants of one model: the same parameters, but which bytes are served is for the caller to pick.
    assert _value(w["parameters"]) == 10304
    assert "2 weight sets" in w["tensor_bytes"]["unknown"]
    assert _value(q["gguf_file_type"]) == {"m-F16.gguf": "MOSTLY_F16", "m-Q8_0.gguf": "MOSTLY_Q8_0"}


def test_split_gguf_is_one_weight_set():
    part = tiny_gguf()
    facts = _facts({"m-00001-of-00002.gguf": part, "m-00002-of-00002.gguf": part})
    assert len(facts["weights"]["sets"]) == 1
    assert _value(facts["weights"]["parameters"]) == 2 * 10304


def test_gguf_file_type_names_are_gguf_py_s():
    from gguf import LlamaFileType

    assert GGUF_FILE_TYPES == {t.value: t.name for t in LlamaFileType if t.name != "GUESSED"}


AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False,
        "meta": {"quantizer": ["gptqmodel:1.7.0"]}}
BNB4 = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
CT = {"quant_method": "compressed-tensors", "format": "pack-quantized",
      "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 128, "type": "int"},
                                    "targets": ["Linear"]}}}
FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


@pytest.mark.parametrize("qc,expected", [
    (AWQ, ("awq", 4, 128, "autoawq", True)),
    (GPTQ, ("gptq", 4, 128, ["gptqmodel:1.7.0"], True)),
    (BNB4, ("bitsandbytes", 4, None, "bitsandbytes", True)),
    (CT, ("compressed-tensors", 4, 128, "compressed-tensors", True)),
    (FP8, ("fp8", 8, [128, 128], "fp8", False)),
])
def test_quantization_config(qc, expected):
    files = tiny_model_files(0)
    config = json.loads(files["config.json"])
    files["config.json"] = _json({**config, "quantization_config": qc})
    facts = _facts(files)
    q = facts["quantization"]
    method, bits, group, tool, packed = expected
    assert (_value(q["method"]), _value(q["bits"]), _value(q["group_size"]), _value(q["tool"])) == (
        method, bits, group, tool)
    if packed:
        # A packed int32 qweight holds 8 weights: its element count is no parameter count.
        assert "packed" in facts["weights"]["parameters"]["unknown"]
        assert facts["weights"]["sets"][0]["tensor_elements"] == 6224
    else:
        assert _value(facts["weights"]["parameters"]) == 6224


def test_autogptq_quantize_config_file():
    files = tiny_model_files(0)
    files["quantize_config.json"] = _json({"bits": 8, "group_size": -1, "desc_act": True})
    q = _facts(files)["quantization"]
    assert (_value(q["method"]), _value(q["bits"]), _value(q["group_size"])) == ("gptq", 8, -1)
    assert q["method"]["source"] == "quantize_config.json"


def test_multimodal_text_config_and_special_tokens_map():
    files = tiny_model_files(0)
    files["config.json"] = _json({
        "model_type": "llava", "architectures": ["LlavaForConditionalGeneration"],
        "text_config": {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
                        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32064,
                        "max_position_embeddings": 4096, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
        "vision_config": {"hidden_size": 1024, "num_hidden_layers": 24}})
    files["special_tokens_map.json"] = _json({"bos_token": {"content": "<|begin|>", "lstrip": False},
                                              "pad_token": "<pad>"})
    facts = _facts(files)
    a, t = facts["architecture"], facts["tokenizer"]
    assert _value(a["model_type"]) == "llava"
    assert a["num_hidden_layers"] == {"value": 32, "source": "config.json text_config.num_hidden_layers"}
    assert _value(a["head_dim"]) == 128 and _value(a["num_key_value_heads"]) == 8
    assert _value(a["rope_scaling"]) == {"rope_type": "llama3", "factor": 8.0}
    assert t["bos_token"]["value"] == "<|begin|>" and t["bos_token"]["source"] == "special_tokens_map.json bos_token"
    assert t["bos_token"]["disagrees"] == {"tokenizer_config.json bos_token": "<s>"}
    assert _value(t["pad_token"]) == "<pad>"


def test_chat_template_jinja_file_wins_and_named_list_without_default():
    files = tiny_model_files(0)
    files["chat_template.jinja"] = b"{{ messages }}"
    t = _facts(files)["tokenizer"]
    assert t["chat_template_sha256"] == {"value": hashlib.sha256(b"{{ messages }}").hexdigest(),
                                         "source": "chat_template.jinja"}
    files = tiny_model_files(0)
    cfg = json.loads(files["tokenizer_config.json"])
    files["tokenizer_config.json"] = _json({**cfg, "chat_template": [{"name": "rag", "template": "R"}]})
    t = _facts(files)["tokenizer"]
    assert "none named 'default'" in t["chat_template_sha256"]["unknown"]
    assert _value(t["chat_templates"]) == {"rag": hashlib.sha256(b"R").hexdigest()}


# --- hostile files -----------------------------------------------------------------------------------


def test_missing_config_every_architecture_fact_unknown_with_reason():
    files = tiny_model_files(0)
    del files["config.json"]
    facts = _facts(files)
    assert all(cell == {"value": None, "unknown": "no config.json"} for cell in facts["architecture"].values())
    assert facts["quantization"]["method"] == {"value": None, "unknown": "no config.json"}
    assert _value(facts["weights"]["parameters"]) == 6224


@pytest.mark.parametrize("field,value,reason", [
    ("num_hidden_layers", "32", "'32' (str), not a positive integer"),
    ("num_hidden_layers", True, "True (bool), not a positive integer"),
    ("num_hidden_layers", -1, "-1 (int), not a positive integer"),
    ("num_hidden_layers", 2.0, "2.0 (float), not a positive integer"),
    ("num_hidden_layers", 10**30, "not a positive integer"),
    ("hidden_size", [16], "[16] (list), not a positive integer"),
    ("rope_scaling", "linear", "is 'linear' (str), not an object"),
    ("tie_word_embeddings", "yes", "not a boolean"),
    ("architectures", "LlamaForCausalLM", "not a list of class names"),
])
def test_wrong_json_types_in_config_are_unknown_with_reason(field, value, reason):
    files = tiny_model_files(0)
    files["config.json"] = _json({**json.loads(files["config.json"]), field: value})
    cell = _facts(files)["architecture"][field]
    assert cell["value"] is None and reason in cell["unknown"], cell


def test_a_number_too_large_for_a_float_is_not_stored_as_infinity():
    files = tiny_model_files(0)
    files["config.json"] = files["config.json"].replace(b'"max_position_embeddings": 64',
                                                        b'"rope_scaling": {"factor": 1e400}, '
                                                        b'"max_position_embeddings": 64')
    facts = _facts(files)
    assert "not finite" in facts["architecture"]["rope_scaling"]["unknown"]
    json.dumps(facts, allow_nan=False)


@pytest.mark.parametrize("text,reason", [
    (b'{"num_hidden_layers": NaN}', "not JSON"),
    (b'{"num_hidden_layers": 2, "num_hidden_layers": 3}', "repeats key 'num_hidden_layers'"),
    (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
    (b'{"num_hidden_layers": ' + b"9" * 5000 + b"}", "not JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (b"[1, 2]", "not a JSON object"),
])
def test_unparseable_config(text, reason):
    files = tiny_model_files(0)
    files["config.json"] = text
    cell = _facts(files)["architecture"]["num_hidden_layers"]
    assert cell["value"] is None and reason in cell["unknown"], cell


def test_oversized_json_is_not_read():
    files = tiny_model_files(0)
    files["tokenizer_config.json"] = b" " * (8 << 20) + b"{}"
    reads = Reads(files)
    t = reads.facts()["tokenizer"]
    assert "over the" in t["class"]["unknown"]
    assert not any(p == "tokenizer_config.json" for p, _, _ in reads.ranges)


def test_safetensors_header_too_large_is_refused_unread():
    files = tiny_model_files(0)
    del files["model.safetensors.index.json"]
    # A valid header of 33 MiB (padding is allowed): the facts readers stop at 32 MiB without reading it.
    n = 33 << 20
    files["model-00001-of-00002.safetensors"] = struct.pack("<Q", n) + b"{}".ljust(n)
    reads = Reads(files)
    w = reads.facts()["weights"]
    assert "safetensors.header.too-large" in w["parameters"]["unknown"]
    assert MAX_SAFETENSORS_HEADER == 32 << 20
    assert max(e - s for _, s, e in reads.ranges) < 1 << 20


def test_index_naming_a_missing_shard_and_bad_index():
    files = tiny_model_files(0)
    del files["model-00002-of-00002.safetensors"]
    w = _facts(files)["weights"]
    assert "does not hold" in w["parameters"]["unknown"] and "model-00002-of-00002" in w["parameters"]["unknown"]
    files = tiny_model_files(0)
    files["model.safetensors.index.json"] = _json({"weight_map": ["x"]})
    assert "no weight_map" in _facts(files)["weights"]["parameters"]["unknown"]


def test_corrupt_gguf_and_wrong_template_types():
    files = {"m.gguf": b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 0)}
    assert "count-overflow" in _facts(files)["weights"]["parameters"]["unknown"]
    files = tiny_model_files(0)
    cfg = json.loads(files["tokenizer_config.json"])
    for bad, reason in ((7, "not a string or a list"), ([{"name": "a"}], "not a {name, template}"),
                        ([{"name": "a", "template": "x"}, {"name": "a", "template": "y"}], "twice")):
        files["tokenizer_config.json"] = _json({**cfg, "chat_template": bad, "eos_token": {"no": "content"}})
        t = _facts(files)["tokenizer"]
        assert reason in t["chat_template_sha256"]["unknown"]
        assert "not a token" in t["eos_token"]["unknown"]


def test_the_read_budget_bounds_what_a_version_makes_us_read():
    files = tiny_model_files(0)
    w = _facts(files, budget=100)["weights"]
    assert "read budget" in w["parameters"]["unknown"]


def test_a_gguf_header_past_the_read_bound_is_unknown_and_not_read_further(monkeypatch):
    from registry.facts import weights

    monkeypatch.setattr(weights, "MAX_GGUF_HEADER", 256)
    reads = Reads({"m.gguf": tiny_gguf()})
    w = reads.facts()["weights"]
    assert "runs past the first 256 bytes" in w["parameters"]["unknown"]
    assert max(e for _, _, e in reads.ranges) <= 256


def test_gguf_metadata_of_the_wrong_types():
    import os
    import tempfile

    from gguf import GGUFWriter

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.gguf")
        w = GGUFWriter(path, "llama")
        w.add_array("general.file_type", [1, 2])
        w.add_array("llama.attention.head_count_kv", [2, 4])
        w.add_string("llama.block_count", "32")
        w.add_tensor("t", np.ones(4, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        data = open(path, "rb").read()
    facts = _facts({"m.gguf": data})
    a = facts["architecture"]
    assert a["num_key_value_heads"]["unknown"] == (
        "m.gguf llama.attention.head_count_kv is an array of 2 values, not one number")
    assert a["num_hidden_layers"]["unknown"] == "m.gguf llama.block_count is '32' (str)"
    assert facts["weights"]["sets"][0]["file_type"] == "unknown (an array)"
    assert _value(facts["weights"]["parameters"]) == 4


def test_corrupted_headers_and_configs_never_crash_the_readers():
    import random

    rng = random.Random(8)
    base = {**tiny_model_files(0), "m.gguf": tiny_gguf()}
    junk = [None, True, -1, 0, 2**70, 1.5, "x", [], [1, "a"], {}, {"content": 3}, "\ud800"]
    config = json.loads(base["config.json"])
    tok = json.loads(base["tokenizer_config.json"])
    for i in range(300):
        files = dict(base)
        target = rng.choice(["model-00001-of-00002.safetensors", "m.gguf", "config.json", "tokenizer_config.json"])
        if target.endswith(".json"):
            doc = dict(config if target == "config.json" else tok)
            for key in rng.sample(sorted(doc) + ["quantization_config", "text_config", "rope_scaling"], 3):
                doc[key] = rng.choice(junk + [{"quant_method": rng.choice(junk + ["awq"]), "bits": rng.choice(junk)}])
            files[target] = json.dumps(doc).encode("utf-8", "surrogatepass")
        else:
            data = bytearray(files[target])
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(min(len(data), 600))] = rng.randrange(256)
            files[target] = bytes(data)
        facts = _facts(files)
        json.dumps(facts, allow_nan=False, ensure_ascii=False).encode("utf-8")
        for group in ("architecture", "quantization", "tokenizer"):
            for name, cell in facts[group].items():
                assert set(cell) <= {"value", "source", "unknown", "derived", "disagrees"}, (i, name, cell)
                assert ("unknown" in cell) == (cell["value"] is None and "source" not in cell), (i, name, cell)


def test_lone_surrogates_are_not_text():
    files = tiny_model_files(0)
    tok = json.loads(files["tokenizer_config.json"])
    files["tokenizer_config.json"] = json.dumps({**tok, "eos_token": "\ud800", "tokenizer_class": "A\udfff"}).encode()
    files["config.json"] = _json({**json.loads(files["config.json"]),
                                  "quantization_config": {"quant_method": "\ud801"}})
    facts = _facts(files)
    assert facts["tokenizer"]["eos_token"] == {
        "value": None, "unknown": "tokenizer_config.json eos_token holds a lone surrogate escape: not text"}
    assert "lone surrogate" in facts["tokenizer"]["class"]["unknown"]
    assert "quantized with \\\\ud801" in json.dumps(facts["weights"]["parameters"])
    json.dumps(facts, ensure_ascii=False).encode("utf-8")


def test_a_tokenizer_config_that_is_no_object():
    files = tiny_model_files(0)
    files["tokenizer_config.json"] = b'["<s>"]'
    t = _facts(files)["tokenizer"]
    assert t["class"] == t["bos_token"] == {"value": None, "unknown": "tokenizer_config.json is not a JSON object"}
