"""The capacity estimate, checked against numbers worked out by hand (no fixtures)."""

import pytest

from registry.domain.capacity import NOT_COUNTED, estimate_capacity, kv_bytes_per_token


def _facts(weight_bytes=None, **arch):
    cells = {k: ({"value": v, "source": "config.json"} if not isinstance(v, str) or k == "model_type"
                 else {"value": None, "unknown": v}) for k, v in arch.items()}
    for optional in ("kv_lora_rank", "qk_rope_head_dim", "sliding_window"):
        cells.setdefault(optional, {"value": None, "source": "config.json (absent or null)"})
    weights = ({"value": weight_bytes, "source": "safetensors headers"} if weight_bytes is not None
               else {"value": None, "unknown": "no safetensors or GGUF weights"})
    return {"weights": {"tensor_bytes": weights}, "architecture": cells}


LLAMA3_8B = _facts(16_060_522_496, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                   head_dim=128)


def test_llama3_8b_kv_per_token_and_memory_for_8k_by_4():
    # 2 (K and V) * 32 layers * 8 KV heads * 128 dims * 2 bytes = 131072; fp8 halves it.
    assert kv_bytes_per_token(layers=32, kv_heads=8, head_dim=128, bytes_per_element=2) == 131_072
    est = estimate_capacity(LLAMA3_8B, context=8192, sequences=4)
    assert est.kv_bytes_per_token == {"fp16": 131_072, "fp8": 65_536}
    assert est.attention == "gqa (32 query heads share 8 KV heads)"
    # 131072 * 8192 * 4 = 4 GiB of KV cache at fp16, 2 GiB at fp8.
    assert est.kv_cache_bytes == {"fp16": 4_294_967_296, "fp8": 2_147_483_648}
    assert est.total_bytes == {"fp16": 16_060_522_496 + 4_294_967_296, "fp8": 16_060_522_496 + 2_147_483_648}
    assert est.unknown == {} and est.notes == ()
    assert "CUDA graphs captured by the runtime" in est.not_counted
    assert est.as_dict()["not_counted"] == list(NOT_COUNTED)


def test_per_token_only_without_a_context():
    est = estimate_capacity(LLAMA3_8B)
    assert est.kv_bytes_per_token["fp16"] == 131_072 and est.kv_cache_bytes is None and est.total_bytes is None


def test_mla_caches_one_latent_per_layer():
    # DeepSeek-V3: 61 layers * (512 latent + 64 rope dims) * 2 bytes = 70272.
    facts = _facts(None, num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128, head_dim=128)
    facts["architecture"]["kv_lora_rank"] = {"value": 512, "source": "config.json"}
    facts["architecture"]["qk_rope_head_dim"] = {"value": 64, "source": "config.json"}
    est = estimate_capacity(facts, context=1000, sequences=2)
    assert est.attention == "mla" and est.kv_bytes_per_token == {"fp16": 70_272, "fp8": 35_136}
    assert est.kv_cache_bytes == {"fp16": 140_544_000, "fp8": 70_272_000}
    # The weights are unknown, so is the total, and the estimate says why.
    assert est.total_bytes is None and est.unknown == {"tensor_bytes": "no safetensors or GGUF weights"}


def test_mqa_and_mha():
    falcon = estimate_capacity(_facts(1, num_hidden_layers=32, num_attention_heads=71, num_key_value_heads=1,
                                      head_dim=64))
    assert falcon.attention == "mqa" and falcon.kv_bytes_per_token["fp16"] == 2 * 32 * 1 * 64 * 2
    gpt2 = estimate_capacity(_facts(1, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=12,
                                    head_dim=64))
    assert gpt2.attention == "mha" and gpt2.kv_bytes_per_token["fp16"] == 2 * 12 * 12 * 64 * 2 == 36_864


def test_sliding_window_is_named_as_not_reduced():
    facts = _facts(1, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=128)
    facts["architecture"]["sliding_window"] = {"value": 4096, "source": "config.json"}
    est = estimate_capacity(facts, context=32768)
    assert est.kv_cache_bytes["fp16"] == 131_072 * 32768
    assert est.notes and "upper bound" in est.notes[0]


def test_an_unknown_fact_gives_no_figure_and_says_why():
    facts = _facts(10, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                   head_dim="config.json head_dim is '128' (str), not a positive integer")
    est = estimate_capacity(facts, context=10)
    assert est.kv_bytes_per_token is None and est.kv_cache_bytes is None and est.total_bytes is None
    assert est.unknown == {"head_dim": "config.json head_dim is '128' (str), not a positive integer"}
    bad_mla = _facts(10, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, head_dim=2)
    bad_mla["architecture"]["kv_lora_rank"] = {"value": None, "unknown": "config.json kv_lora_rank is '512' (str)"}
    assert estimate_capacity(bad_mla).kv_bytes_per_token is None
    assert estimate_capacity({}).unknown["num_hidden_layers"] == "not recorded"


@pytest.mark.parametrize("context,sequences", [(0, 1), (8, 0), (-1, 1), (True, 1), (8, 1.5)])
def test_bad_context_or_sequences(context, sequences):
    with pytest.raises(ValueError):
        estimate_capacity(LLAMA3_8B, context=context, sequences=sequences)
