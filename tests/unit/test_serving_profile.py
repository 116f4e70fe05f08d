"""Serving profiles: validation of hostile input, the canonical digest, the vLLM config file and the capacity gate.

Capacity figures are worked out by hand in the comments; the GPU table is the shipped policies/data.json.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest
import yaml

from registry.domain.errors import (
    InvalidInputError,
    InvalidServingProfileError,
    PolicyViolationError,
    ServingProfileDoesNotFitError,
)
from registry.domain.serving_profile import (
    ENGINE_SETTINGS,
    MAX_SETTINGS,
    engine_config,
    fit_profile,
    parse_serving_profile,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = json.loads((ROOT / "policies/data.json").read_text())["modelreg"]["config"]
GPUS = CONFIG["gpus"]
MARGIN = CONFIG["serving_runtime_margin_bytes"]
GiB = 2**30

EXAMPLE = {"engine": "vllm", "gpu": {"type": "H100-80GB", "count": 2},
           "settings": {"max_model_len": 8192, "max_num_seqs": 64, "dtype": "bfloat16", "kv_cache_dtype": "fp8",
                        "tensor_parallel_size": 2, "gpu_memory_utilization": 0.9, "generation_config": "auto",
                        "tool_call_parser": "hermes", "enable_auto_tool_choice": True}}


def _profile(gpu="H100-80GB", count=1, **settings):
    return {"engine": "vllm", "gpu": {"type": gpu, "count": count},
            "settings": {"max_model_len": 8192, "max_num_seqs": 64, **settings}}


def _facts(weight_bytes=None, dtypes=None, **arch):
    """A facts document shaped as registry/facts records it: cells of value and source, or value None and why."""
    cells = {k: ({"value": v, "source": "config.json"} if not isinstance(v, str)
                 else {"value": None, "unknown": v}) for k, v in arch.items()}
    for optional in ("kv_lora_rank", "qk_rope_head_dim", "sliding_window"):
        cells.setdefault(optional, {"value": None, "source": "config.json (absent or null)"})
    weights = ({"value": weight_bytes, "source": "safetensors headers (4 files)"} if weight_bytes is not None
               else {"value": None, "unknown": "no safetensors or GGUF weights"})
    dtype_cell = {"value": dtypes or {"BF16": weight_bytes // 2 if weight_bytes else 1}, "source": "headers"}
    return {"weights": {"tensor_bytes": weights, "dtypes": dtype_cell}, "architecture": cells}


LLAMA3_8B_BYTES = 16_060_522_496
LLAMA3_8B = _facts(LLAMA3_8B_BYTES, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                   head_dim=128)
# 2 (K and V) * 32 layers * 8 KV heads * 128 dims = 65536 elements per token: bytes at fp16 and fp8.
KV_FP16_PER_TOKEN, KV_FP8_PER_TOKEN = 131_072, 65_536


def _fit(data, facts=LLAMA3_8B, margin=MARGIN):
    return fit_profile(parse_serving_profile(data), facts, GPUS, runtime_margin_bytes=margin)


# --- parsing ----------------------------------------------------------------------------------------------------


def test_the_example_profile_parses_with_the_gates_defaults_filled_in():
    profile = parse_serving_profile(EXAMPLE)
    assert (profile.engine, profile.gpu_type, profile.gpu_count) == ("vllm", "H100-80GB", 2)
    assert profile.tensor_parallel_size == 2 and profile.pipeline_parallel_size == 1
    assert dict(profile.settings) == {**EXAMPLE["settings"], "pipeline_parallel_size": 1}
    with pytest.raises(TypeError):
        profile.settings["max_model_len"] = 1  # read-only: a profile is a value
    minimal = parse_serving_profile(_profile(gpu="L4"))
    assert dict(minimal.settings) == {"max_model_len": 8192, "max_num_seqs": 64, "dtype": "auto",
                                      "kv_cache_dtype": "auto", "tensor_parallel_size": 1,
                                      "pipeline_parallel_size": 1, "gpu_memory_utilization": 0.9,
                                      "generation_config": "auto"}


def test_tensor_times_pipeline_parallel_equal_to_the_gpu_count_parses():
    profile = parse_serving_profile(_profile(count=4, tensor_parallel_size=2, pipeline_parallel_size=2,
                                             gpu_memory_utilization=1, chat_template="tool_use", seed=0,
                                             enable_prefix_caching=False, quantization="awq_marlin"))
    assert profile.gpu_count == 4 and profile.settings["gpu_memory_utilization"] == 1.0
    assert profile.settings["chat_template"] == "tool_use"


def _with(path: str, value):
    """EXAMPLE with the value at a dotted path replaced (``...`` deletes it)."""
    data = copy.deepcopy(EXAMPLE)
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[key]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return data


BAD = [
    # (what, the input, the field the refusal names, a word of its reason)
    ("unknown engine", _with("engine", "tgi"), "engine", "not a known engine"),
    ("no engine", _with("engine", ...), "engine", "not a known engine"),
    ("unknown setting", _with("settings.max_tokens", 5), "settings.max_tokens", "unknown vllm setting"),
    ("dashed setting", _with("settings.max-num-batched-tokens", 5), "settings.max-num-batched-tokens",
     "underscores"),
    ("refused setting", _with("settings.trust_remote_code", True), "settings.trust_remote_code", "never set"),
    ("refused plugin path", _with("settings.tool_parser_plugin", "/tmp/p.py"), "settings.tool_parser_plugin",
     "never set"),
    ("string int", _with("settings.max_model_len", "8192"), "settings.max_model_len", "integer"),
    ("float int", _with("settings.max_model_len", 8192.0), "settings.max_model_len", "integer"),
    ("bool int", _with("settings.max_num_seqs", True), "settings.max_num_seqs", "integer"),
    ("string float", _with("settings.gpu_memory_utilization", "0.9"), "settings.gpu_memory_utilization", "number"),
    ("string bool", _with("settings.enable_auto_tool_choice", "yes"), "settings.enable_auto_tool_choice", "true or"),
    ("int choice", _with("settings.dtype", 16), "settings.dtype", "string"),
    ("zero length", _with("settings.max_model_len", 0), "settings.max_model_len", "out of range"),
    ("huge length", _with("settings.max_model_len", 2**40), "settings.max_model_len", "out of range"),
    ("huge batch", _with("settings.max_num_seqs", 10**6), "settings.max_num_seqs", "out of range"),
    ("negative seed", _with("settings.seed", -1), "settings.seed", "out of range"),
    ("zero utilization", _with("settings.gpu_memory_utilization", 0), "settings.gpu_memory_utilization", "range"),
    ("over utilization", _with("settings.gpu_memory_utilization", 1.01), "settings.gpu_memory_utilization",
     "range"),
    ("nan utilization", _with("settings.gpu_memory_utilization", float("nan")), "settings.gpu_memory_utilization",
     "range"),
    ("inf utilization", _with("settings.gpu_memory_utilization", float("inf")), "settings.gpu_memory_utilization",
     "range"),
    ("dtype not vLLM's", _with("settings.dtype", "fp16"), "settings.dtype", "not one of"),
    ("kv dtype not vLLM's", _with("settings.kv_cache_dtype", "int4"), "settings.kv_cache_dtype", "not one of"),
    ("generation config path", _with("settings.generation_config", "/etc/modelreg"), "settings.generation_config",
     "not one of"),
    ("chat template path", _with("settings.chat_template", "../../tokenizer/chat_template.jinja"),
     "settings.chat_template", "path"),
    ("chat template file", _with("settings.chat_template", "chat_template.jinja"), "settings.chat_template", "path"),
    ("inline chat template", _with("settings.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}"),
     "settings.chat_template", "inline"),
    ("parser with spaces", _with("settings.tool_call_parser", "Hermes Parser"), "settings.tool_call_parser",
     "registered name"),
    ("auto tool choice without parser", _with("settings.tool_call_parser", ...), "settings.enable_auto_tool_choice",
     "tool_call_parser"),
    ("tp below the gpu count", _with("settings.tensor_parallel_size", 1), "settings.tensor_parallel_size",
     "must be equal"),
    ("tp x pp above the gpu count", _with("settings.pipeline_parallel_size", 2), "settings.tensor_parallel_size",
     "must be equal"),
    ("tp zero", _with("settings.tensor_parallel_size", 0), "settings.tensor_parallel_size", "out of range"),
    ("no max_num_seqs", _with("settings.max_num_seqs", ...), "settings.max_num_seqs", "required"),
    ("no max_model_len", _with("settings.max_model_len", ...), "settings.max_model_len", "required"),
    ("zero gpus", _with("gpu.count", 0), "gpu.count", "integer in"),
    ("string gpus", _with("gpu.count", "2"), "gpu.count", "integer in"),
    ("too many gpus", _with("gpu.count", 1000), "gpu.count", "integer in"),
    ("gpu path", _with("gpu.type", "../H100"), "gpu.type", "not a GPU type name"),
    ("empty gpu", _with("gpu.type", ""), "gpu.type", "not a GPU type name"),
    ("gpu not a string", _with("gpu.type", 80), "gpu.type", "not a GPU type name"),
    ("gpu not an object", _with("gpu", "H100-80GB"), "gpu", "must be an object"),
    ("extra gpu field", _with("gpu.memory_bytes", 10**12), "gpu.memory_bytes", "unknown field"),
    ("extra top field", _with("model", "acme/llm"), "model", "unknown field"),
    ("settings a list", _with("settings", [["max_model_len", 1]]), "settings", "must be an object"),
    ("no settings", _with("settings", ...), "settings", "must be an object"),
]


@pytest.mark.parametrize(("data", "field", "why"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_profile_is_refused_naming_the_field(data, field, why):
    with pytest.raises(InvalidServingProfileError) as caught:
        parse_serving_profile(data)
    assert caught.value.details["field"] == field
    assert why in caught.value.details["reason"]
    assert f"invalid serving profile: {field}: " in str(caught.value)
    assert isinstance(caught.value, InvalidInputError) and caught.value.code == "invalid-serving-profile"


@pytest.mark.parametrize("data", [None, [], "engine: vllm", 3])
def test_a_profile_that_is_not_an_object_is_refused(data):
    with pytest.raises(InvalidServingProfileError) as caught:
        parse_serving_profile(data)
    assert caught.value.details["field"] == "profile"


def test_oversized_input_is_refused_before_it_is_read_and_never_echoed_whole():
    many = _with("settings", {f"s{i}": i for i in range(10_000)})
    with pytest.raises(InvalidServingProfileError) as caught:
        parse_serving_profile(many)
    assert caught.value.details == {"field": "settings", "reason": caught.value.details["reason"],
                                    "limit": MAX_SETTINGS}
    long_name = "x" * 1_000_000
    for data in (_with(f"settings.{long_name}", 1), _with("gpu.type", long_name), _with("engine", long_name),
                 _with("settings.tool_call_parser", long_name), _with(long_name, 1)):
        with pytest.raises(InvalidServingProfileError) as caught:
            parse_serving_profile(data)
        assert len(str(caught.value)) < 2_000 and len(caught.value.details["field"]) < 200
    with pytest.raises(InvalidServingProfileError) as caught:
        parse_serving_profile(_with("settings.max\x1b[2Jlen", 1))
    assert "\x1b" not in str(caught.value)


# --- the canonical digest ---------------------------------------------------------------------------------------


def _reversed(value):
    return {k: _reversed(v) for k, v in reversed(value.items())} if isinstance(value, dict) else value


def test_the_digest_is_stable_and_independent_of_key_order():
    profile = parse_serving_profile(EXAMPLE)
    text = profile.canonical_json()
    assert " " not in text and list(json.loads(text)) == ["engine", "gpu", "settings"]
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    assert profile.digest == hashlib.sha256(text.encode()).hexdigest()
    assert parse_serving_profile(_reversed(EXAMPLE)).digest == profile.digest
    # Stating a default the gate fills in is the same profile; changing a setting is another.
    assert parse_serving_profile(_with("settings.pipeline_parallel_size", 1)).digest == profile.digest
    assert parse_serving_profile(_with("settings.max_num_seqs", 65)).digest != profile.digest
    assert parse_serving_profile(_with("gpu.type", "H200-141GB")).digest != profile.digest
    # Pinned: a change to the canonical form changes every stored digest, so it must be deliberate.
    assert text == ('{"engine":"vllm","gpu":{"count":2,"type":"H100-80GB"},"settings":{"dtype":"bfloat16",'
                    '"enable_auto_tool_choice":true,"generation_config":"auto","gpu_memory_utilization":0.9,'
                    '"kv_cache_dtype":"fp8","max_model_len":8192,"max_num_seqs":64,"pipeline_parallel_size":1,'
                    '"tensor_parallel_size":2,"tool_call_parser":"hermes"}}')


# --- the engine's config file -----------------------------------------------------------------------------------


def test_the_vllm_config_is_deterministic_yaml_with_vllms_long_option_names():
    data = _with("settings.chat_template", "tool_use")
    data["settings"].update(enable_prefix_caching=False, enforce_eager=False, enable_chunked_prefill=True)
    profile = parse_serving_profile(data)
    name, body = engine_config(profile, chat_template_file="/srv/unit/chat_template.tool_use.jinja",
                               generation_config_dir="/srv/unit")
    again = engine_config(parse_serving_profile(_reversed(data)), chat_template_file=
                          "/srv/unit/chat_template.tool_use.jinja", generation_config_dir="/srv/unit")
    assert name == "vllm-config.yaml" and again == (name, body)
    assert body.startswith(b"# vllm engine config written by modelreg from serving profile sha256:"
                           + profile.digest.encode())
    assert yaml.safe_load(body) == {
        "max-model-len": 8192, "max-num-seqs": 64, "dtype": "bfloat16", "kv-cache-dtype": "fp8",
        "tensor-parallel-size": 2, "pipeline-parallel-size": 1, "gpu-memory-utilization": 0.9,
        "generation-config": "/srv/unit", "tool-call-parser": "hermes", "enable-auto-tool-choice": True,
        "chat-template": "/srv/unit/chat_template.tool_use.jinja",
        # vLLM's default for prefix caching may be on: off is said with its --no- flag. enforce_eager is
        # off by default, so false is left out.
        "no-enable-prefix-caching": True, "enable-chunked-prefill": True}
    keys = [line.split(":")[0] for line in body.decode().splitlines() if not line.startswith("#")]
    assert keys == sorted(keys)
    long_names = {n.replace("_", "-") for n in ENGINE_SETTINGS["vllm"]}
    assert {k.removeprefix("no-") for k in keys} <= long_names


def test_the_generation_config_without_a_folder_and_vllms_own_defaults():
    loaded = yaml.safe_load(engine_config(parse_serving_profile(EXAMPLE), chat_template_file=None,
                                          generation_config_dir=None)[1])
    assert loaded["generation-config"] == "auto" and "chat-template" not in loaded
    ignoring = parse_serving_profile(_with("settings.generation_config", "vllm"))
    loaded = yaml.safe_load(engine_config(ignoring, chat_template_file=None, generation_config_dir="/srv/unit")[1])
    assert loaded["generation-config"] == "vllm"


def test_values_round_trip_through_yaml():
    profile = parse_serving_profile(_with("settings.gpu_memory_utilization", 1e-05))
    odd = "/srv/unit ü/\"quoted\" 'x': #y"
    loaded = yaml.safe_load(engine_config(profile, chat_template_file=None, generation_config_dir=odd)[1])
    assert loaded["gpu-memory-utilization"] == 1e-05 and loaded["generation-config"] == odd


@pytest.mark.parametrize(("template", "file", "generation_dir", "field"), [
    ("tool_use", None, None, "chat_template_file"),
    (None, "/srv/unit/chat_template.jinja", None, "chat_template_file"),
    ("tool_use", "chat_template.jinja", None, "chat_template_file"),
    (None, None, "/srv/unit\n--trust-remote-code: true", "generation_config_dir"),
    (None, None, "srv/unit", "generation_config_dir"),
    (None, None, "/srv/unit\u2028tensor-parallel-size: 1", "generation_config_dir"),
    (None, None, "/srv/" + "u" * 5000, "generation_config_dir"),
])
def test_engine_config_refuses_a_missing_or_unusable_path(template, file, generation_dir, field):
    data = _with("settings.chat_template", template) if template else EXAMPLE
    with pytest.raises(InvalidServingProfileError) as caught:
        engine_config(parse_serving_profile(data), chat_template_file=file, generation_config_dir=generation_dir)
    assert caught.value.details["field"] == field


# --- the capacity gate ------------------------------------------------------------------------------------------


def test_the_example_fits_two_h100s_with_the_arithmetic():
    fit = _fit(EXAMPLE)
    # Budget: 80 GB x 0.9 - 2 GiB. Weights split over 2 GPUs; KV 8192 x 64 x 65536 B = 32 GiB, halved by TP.
    budget = int(80 * 10**9 * 0.9) - 2 * GiB
    assert fit.fits and fit.per_gpu_budget == budget
    assert fit.per_gpu_needed == LLAMA3_8B_BYTES // 2 + 16 * GiB
    assert fit.arithmetic == [
        "GPU H100-80GB: 80.00 GB = 74.51 GiB each; 2 GPUs (tensor parallel 2 x pipeline parallel 1)",
        "budget 74.51 GiB x 0.9 - 2.00 GiB margin = 65.06 GiB",
        "weights 14.96 GiB / 2 GPUs = 7.48 GiB",
        "KV 8192 tokens x 64 seqs x 65536 B/token (fp8) = 32.00 GiB / 2 = 16.00 GiB "
        "(8 KV heads over tensor parallel 2)",
        "needed 7.48 GiB + 16.00 GiB = 23.48 GiB <= 65.06 GiB per GPU: fits",
    ]
    assert fit.require() is fit and fit.reason is None


def test_a_profile_that_does_not_fit_is_refused_with_the_arithmetic():
    # One L4: 24 GB x 0.9 - 2 GiB = 18.12 GiB; 14.96 GiB of weights + 8192 x 64 x 131072 B = 64 GiB of KV.
    fit = _fit(_profile(gpu="L4", dtype="bfloat16"))
    assert not fit.fits and fit.per_gpu_needed == LLAMA3_8B_BYTES + 64 * GiB
    assert fit.arithmetic[-1] == "needed 14.96 GiB + 64.00 GiB = 78.96 GiB > 18.12 GiB per GPU: does not fit"
    assert "KV 8192 tokens x 64 seqs x 131072 B/token (bf16) = 64.00 GiB (8 KV heads over tensor parallel 1)" in \
        fit.arithmetic
    with pytest.raises(ServingProfileDoesNotFitError) as caught:
        fit.require()
    err = caught.value
    assert isinstance(err, PolicyViolationError) and err.code == "serving-profile-does-not-fit"
    assert err.details["arithmetic"] == fit.arithmetic and err.details["gpu"] == "1 x L4"
    assert "78.96 GiB needed per GPU, 18.12 GiB available" in str(err)
    # A few sequences fewer and it fits the same card: 14.96 + 8192 x 2 x 131072 B (2 GiB) = 16.96 GiB.
    assert _fit(_profile(gpu="L4", max_num_seqs=2)).fits


def test_tensor_parallelism_halves_the_need_per_gpu():
    one = _fit(_profile(gpu="A100-80GB"))
    two = _fit(_profile(gpu="A100-80GB", count=2, tensor_parallel_size=2))
    kv = 8192 * 64 * KV_FP16_PER_TOKEN
    assert one.per_gpu_needed == LLAMA3_8B_BYTES + kv
    assert two.per_gpu_needed == LLAMA3_8B_BYTES // 2 + kv // 2
    assert not one.fits and two.fits  # 78.96 GiB > 65.06 GiB; 39.48 GiB fits


def test_an_fp8_kv_cache_halves_the_kv_bytes():
    for fp8 in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        fit = _fit(_profile(gpu="H200-141GB", kv_cache_dtype=fp8))
        assert fit.per_gpu_needed == LLAMA3_8B_BYTES + 8192 * 64 * KV_FP8_PER_TOKEN
    auto = _fit(_profile(gpu="H200-141GB"))
    assert auto.per_gpu_needed == LLAMA3_8B_BYTES + 8192 * 64 * KV_FP16_PER_TOKEN
    # float32 serving: 4-byte KV elements and the 16-bit weights upcast.
    wide = _fit(_profile(gpu="H200-141GB", dtype="float32"))
    assert wide.per_gpu_needed == 2 * LLAMA3_8B_BYTES + 8192 * 64 * 2 * KV_FP16_PER_TOKEN
    f32_stored = _facts(LLAMA3_8B_BYTES, dtypes={"F32": LLAMA3_8B_BYTES // 4}, num_hidden_layers=32,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=128)
    assert _fit(_profile(gpu="H200-141GB", dtype="float"), f32_stored).per_gpu_needed == \
        LLAMA3_8B_BYTES + 8192 * 64 * 2 * KV_FP16_PER_TOKEN


def test_kv_heads_fewer_than_tensor_parallel_ranks_are_replicated_and_an_mla_latent_is_whole():
    # 2 KV heads over 4 ranks: each rank holds one head, half of the KV cache (not a quarter).
    gqa2 = _facts(4 * GiB, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=2, head_dim=64)
    per_token = 2 * 16 * 2 * 64 * 2
    fit = _fit(_profile(gpu="L40S", count=4, tensor_parallel_size=4, max_num_seqs=8), gqa2)
    assert fit.per_gpu_needed == GiB + 8192 * 8 * per_token // 2
    assert fit.arithmetic[3].endswith("(2 KV heads over tensor parallel 4, replicated)")
    # MLA: 61 layers x (512 + 64) x 2 bytes per token, whole on each of 8 ranks.
    mla = _facts(8 * GiB, num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128, head_dim=128)
    mla["architecture"]["kv_lora_rank"] = {"value": 512, "source": "config.json"}
    mla["architecture"]["qk_rope_head_dim"] = {"value": 64, "source": "config.json"}
    fit = _fit(_profile(gpu="H200-141GB", count=8, tensor_parallel_size=8), mla)
    assert fit.per_gpu_needed == GiB + 8192 * 64 * 70_272


def test_pipeline_stages_split_the_layers_rounding_up():
    even = _fit(_profile(gpu="A100-80GB", count=2, pipeline_parallel_size=2))
    assert even.per_gpu_needed == LLAMA3_8B_BYTES // 2 + 8192 * 64 * KV_FP16_PER_TOKEN // 2
    odd = _facts(33 * GiB, num_hidden_layers=33, num_attention_heads=32, num_key_value_heads=8, head_dim=128)
    fit = _fit(_profile(gpu="A100-80GB", count=2, pipeline_parallel_size=2, max_num_seqs=1), odd)
    kv_total = 8192 * 33 * 2 * 8 * 128 * 2
    assert fit.per_gpu_needed == 33 * GiB // 2 + -(-kv_total * 17 // 33)
    assert "x 17/33" in fit.arithmetic[3] and "17 of 33 layers per pipeline stage" in fit.arithmetic[3]


def test_unknown_facts_cannot_be_shown_to_fit():
    no_weights = _facts(None, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=128)
    fit = _fit(EXAMPLE, no_weights)
    assert not fit.fits and fit.per_gpu_needed is None and fit.per_gpu_budget > 0
    assert fit.reason == "cannot be shown to fit: unknown weight bytes (no safetensors or GGUF weights)"
    with pytest.raises(ServingProfileDoesNotFitError) as caught:
        fit.require()
    assert caught.value.details["arithmetic"][-1] == fit.reason
    no_shape = _facts(LLAMA3_8B_BYTES, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                      head_dim="config.json head_dim is '128' (str), not a positive integer")
    fit = _fit(EXAMPLE, no_shape)
    assert not fit.fits and "KV cache bytes per token (head_dim: config.json head_dim is '128'" in fit.reason
    for nothing in (_fit(EXAMPLE, {}), _fit(EXAMPLE, None)):
        assert not nothing.fits and nothing.per_gpu_needed is None
        assert "weight bytes (not recorded)" in nothing.reason and "KV cache bytes per token" in nothing.reason


def test_an_unknown_gpu_type_is_refused_naming_the_known_ones():
    with pytest.raises(InvalidServingProfileError) as caught:
        _fit(_profile(gpu="RTX-6000-Ada"))
    assert caught.value.details["field"] == "gpu.type"
    assert caught.value.details["known"] == sorted(GPUS) and "H100-80GB" in str(caught.value)
    with pytest.raises(InvalidServingProfileError, match="no positive integer memory_bytes"):
        fit_profile(parse_serving_profile(_profile(gpu="X1")), LLAMA3_8B, {"X1": {"memory_bytes": "80GB"}},
                    runtime_margin_bytes=0)
    with pytest.raises(ValueError, match="runtime_margin_bytes"):
        _fit(EXAMPLE, margin=-1)


def test_the_shipped_gpu_table_holds_the_common_gpus_in_decimal_gigabytes():
    assert GPUS == {name: {"memory_bytes": gb * 10**9} for name, gb in [
        ("A10G", 24), ("L4", 24), ("L40S", 48), ("A100-40GB", 40), ("A100-80GB", 80), ("H100-80GB", 80),
        ("H100-NVL-94GB", 94), ("H200-141GB", 141), ("B200-192GB", 192), ("MI300X-192GB", 192)]}
    assert MARGIN == 2 * GiB
    for name in GPUS:  # every shipped name is one a profile may hold
        assert parse_serving_profile(_profile(gpu=name)).gpu_type == name
