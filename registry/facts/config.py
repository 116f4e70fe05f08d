"""Architecture and quantization facts from ``config.json`` (or, without one, a GGUF file's metadata).

Shape fields are looked up in ``text_config`` first (multimodal configs nest the language model
there), then at the top level, under the names transformers maps to them (``n_layer`` is
``num_hidden_layers`` for GPT-2). The source of every value names the key it came from.
"""

from __future__ import annotations

import json
from typing import Any

from registry.facts._cells import describe, known, plain, positive_int, unknown

CONFIG = "config.json"
QUANTIZE_CONFIG = "quantize_config.json"

SHAPE_FIELDS: dict[str, tuple[str, ...]] = {
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_attention_heads": ("num_attention_heads", "n_head", "n_heads", "num_heads"),
    "num_key_value_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv", "n_kv_heads",
                            "multi_query_group_num"),
    "head_dim": ("head_dim", "kv_channels"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "max_position_embeddings": ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"),
}
OPTIONAL_INT_FIELDS = ("sliding_window", "kv_lora_rank", "qk_rope_head_dim")
"""Absent or null means the feature is not used (no window, no multi-head latent attention)."""
TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config")

# quant_method -> the library that writes it, when the config does not name its writer itself.
QUANT_TOOLS = {
    "awq": "autoawq", "gptq": "gptq", "bitsandbytes": "bitsandbytes", "compressed-tensors": "compressed-tensors",
    "fp8": "fp8", "fbgemm_fp8": "fbgemm", "aqlm": "aqlm", "hqq": "hqq", "eetq": "eetq", "exl2": "exllamav2",
    "quanto": "optimum-quanto", "torchao": "torchao", "mxfp4": "mxfp4", "modelopt": "nvidia-modelopt",
}
# Methods that store one element per weight; every other method packs several weights per element.
UNPACKED = frozenset({"fp8", "fbgemm_fp8", "eetq"})


def architecture(config: Any, config_error: str | None) -> dict[str, dict]:
    """The architecture cells from a parsed ``config.json`` (``config_error`` says why there is none)."""
    names = ("model_type", "architectures", *SHAPE_FIELDS, *OPTIONAL_INT_FIELDS, "rope_scaling", "torch_dtype",
             "tie_word_embeddings")
    if config_error is not None or not isinstance(config, dict):
        why = config_error or f"{CONFIG} is not a JSON object"
        return {n: unknown(why) for n in names}
    text = next((config[k] for k in TEXT_CONFIG_KEYS if isinstance(config.get(k), dict)), None)
    text_key = next((k for k in TEXT_CONFIG_KEYS if isinstance(config.get(k), dict)), "")
    out: dict[str, dict] = {}

    def find(aliases: tuple[str, ...]) -> tuple[Any, str] | None:
        for scope, prefix in ((text, f"{text_key}."), (config, "")):
            if scope is None:
                continue
            for key in aliases:
                if key in scope and scope[key] is not None:
                    return scope[key], f"{CONFIG} {prefix}{key}"
        return None

    mt = config.get("model_type")
    out["model_type"] = (known(mt, f"{CONFIG} model_type") if isinstance(mt, str) and 0 < len(mt) <= 128
                         else unknown(f"{CONFIG} model_type is {describe(mt)}" if "model_type" in config
                                      else f"{CONFIG} has no model_type"))
    arch = config.get("architectures")
    out["architectures"] = (
        known(arch, f"{CONFIG} architectures")
        if isinstance(arch, list) and 0 < len(arch) <= 16 and all(isinstance(a, str) and len(a) <= 128 for a in arch)
        else unknown(f"{CONFIG} architectures is {describe(arch)}, not a list of class names"
                     if "architectures" in config else f"{CONFIG} has no architectures"))
    for name, aliases in SHAPE_FIELDS.items():
        found = find(aliases)
        if found is None:
            out[name] = unknown(f"{CONFIG} has no {name}")
        elif positive_int(found[0]) is None:
            out[name] = unknown(f"{found[1]} is {describe(found[0])}, not a positive integer")
        else:
            out[name] = known(found[0], found[1])
    for name in OPTIONAL_INT_FIELDS:
        found = find((name,))
        if found is None:
            out[name] = known(None, f"{CONFIG} (absent or null)")
        elif positive_int(found[0]) is None:
            out[name] = unknown(f"{found[1]} is {describe(found[0])}, not a positive integer")
        else:
            out[name] = known(found[0], found[1])
    _derive_heads(config, out)
    found = find(("rope_scaling",))
    if found is None:
        out["rope_scaling"] = known(None, f"{CONFIG} (absent or null)")
    else:
        try:
            if not isinstance(found[0], dict):
                raise ValueError(f"{describe(found[0])}, not an object")
            value = plain(found[0])
            if len(json.dumps(value)) > 4096:
                raise ValueError("over 4096 bytes")
            out["rope_scaling"] = known(value, found[1])
        except ValueError as exc:
            out["rope_scaling"] = unknown(f"{found[1]} is {exc}")
    found = find(("torch_dtype", "dtype"))
    out["torch_dtype"] = (unknown(f"{CONFIG} has no torch_dtype") if found is None
                          else known(found[0], found[1]) if isinstance(found[0], str) and len(found[0]) <= 32
                          else unknown(f"{found[1]} is {describe(found[0])}"))
    found = find(("tie_word_embeddings",))
    out["tie_word_embeddings"] = (
        unknown(f"{CONFIG} has no tie_word_embeddings (the default depends on the model class)") if found is None
        else known(found[0], found[1]) if isinstance(found[0], bool)
        else unknown(f"{found[1]} is {describe(found[0])}, not a boolean"))
    return out


def _derive_heads(config: dict, out: dict[str, dict]) -> None:
    heads, hidden = out["num_attention_heads"]["value"], out["hidden_size"]["value"]
    if out["num_key_value_heads"].get("unknown") == f"{CONFIG} has no num_key_value_heads":
        if config.get("multi_query") is True:
            out["num_key_value_heads"] = known(1, f"{CONFIG} multi_query", derived="multi-query attention: one KV head")
        elif heads is not None:
            out["num_key_value_heads"] = known(
                heads, f"{CONFIG} num_attention_heads",
                derived="no num_key_value_heads: every head has its own KV (transformers' default)")
    if out["head_dim"].get("unknown") == f"{CONFIG} has no head_dim":
        if heads is not None and hidden is not None and hidden % heads == 0:
            out["head_dim"] = known(hidden // heads, f"{CONFIG} hidden_size, num_attention_heads",
                                    derived="hidden_size / num_attention_heads")
        elif heads is not None and hidden is not None:
            out["head_dim"] = unknown(f"no head_dim, and hidden_size {hidden} is not a multiple of {heads} heads")


def architecture_from_gguf(meta: dict) -> dict[str, dict]:
    """The architecture cells from a GGUF file's metadata (what llama.cpp reads instead of config.json)."""
    path, md, lengths = meta["path"], meta["metadata"], meta["array_lengths"]
    arch = md.get("general.architecture")
    out: dict[str, dict] = {}
    no_config = f"no {CONFIG}; GGUF metadata of {path} does not give it"
    if not isinstance(arch, str) or not arch or len(arch) > 64:
        out["model_type"] = unknown(f"{path} has no general.architecture")
        arch = "\0"
    else:
        out["model_type"] = known(arch, f"{path} general.architecture")
    keys = {"num_hidden_layers": "block_count", "hidden_size": "embedding_length",
            "num_attention_heads": "attention.head_count", "num_key_value_heads": "attention.head_count_kv",
            "head_dim": "attention.key_length", "vocab_size": "vocab_size",
            "max_position_embeddings": "context_length", "sliding_window": "attention.sliding_window",
            "kv_lora_rank": "attention.kv_lora_rank"}
    for name, suffix in keys.items():
        key = f"{arch}.{suffix}"
        value = md.get(key)
        if positive_int(value) is not None:
            out[name] = known(value, f"{path} {key}")
        elif name in OPTIONAL_INT_FIELDS and key not in md and key not in lengths:
            out[name] = known(None, f"{path} (absent)")
        else:
            out[name] = unknown(f"{path} {key} is an array of {lengths[key]} values, not one number" if key in lengths
                                else f"{path} {key} is {describe(value)}" if key in md else f"{path} has no {key}")
    if out["vocab_size"]["value"] is None and "tokenizer.ggml.tokens" in lengths:
        out["vocab_size"] = known(lengths["tokenizer.ggml.tokens"], f"{path} tokenizer.ggml.tokens",
                                  derived="number of tokens")
    if out["kv_lora_rank"]["value"] is not None and positive_int(md.get(f"{arch}.rope.dimension_count")):
        out["qk_rope_head_dim"] = known(md[f"{arch}.rope.dimension_count"], f"{path} {arch}.rope.dimension_count")
    else:
        out["qk_rope_head_dim"] = known(None, f"{path} (no multi-head latent attention)")
    kv = out["num_key_value_heads"]
    if kv["value"] is None and kv["unknown"].endswith(f"has no {arch}.attention.head_count_kv") \
            and out["num_attention_heads"]["value"] is not None:
        out["num_key_value_heads"] = known(out["num_attention_heads"]["value"], f"{path} {arch}.attention.head_count",
                                           derived="no head_count_kv: llama.cpp uses head_count")
    if out["head_dim"]["value"] is None and out["hidden_size"]["value"] and out["num_attention_heads"]["value"] \
            and out["hidden_size"]["value"] % out["num_attention_heads"]["value"] == 0:
        out["head_dim"] = known(out["hidden_size"]["value"] // out["num_attention_heads"]["value"],
                                f"{path} embedding_length, head_count", derived="embedding_length / head_count")
    scaling = md.get(f"{arch}.rope.scaling.type")
    factor = md.get(f"{arch}.rope.scaling.factor")
    if isinstance(scaling, str):
        value = {"type": scaling[:64]}
        if isinstance(factor, float) and factor == factor and abs(factor) != float("inf"):
            value["factor"] = factor
        out["rope_scaling"] = known(value, f"{path} {arch}.rope.scaling.*")
    else:
        out["rope_scaling"] = known(None, f"{path} (absent)")
    out["architectures"] = unknown(no_config)
    out["torch_dtype"] = unknown(no_config)
    out["tie_word_embeddings"] = unknown(no_config)
    return out


def quantization(config: Any, quantize_config: Any, gguf_sets: list[dict]) -> tuple[dict[str, dict], str | None]:
    """The quantization cells, and why tensor elements are not parameters (a packing method), if so.

    Args:
        config: The parsed config.json (or None).
        quantize_config: The parsed quantize_config.json (AutoGPTQ writes one beside the weights), or None.
        gguf_sets: The GGUF weight sets (each with its ``file_type``).
    """
    out: dict[str, dict] = {}
    if gguf_sets:
        out["gguf_file_type"] = known({s["files"][0]: s.get("file_type") for s in gguf_sets}, "GGUF general.file_type")
    else:
        out["gguf_file_type"] = known(None, "no GGUF files")
    qc, source = None, None
    if isinstance(config, dict):
        for key in ("quantization_config", "compression_config"):
            if key in config:
                qc, source = config[key], f"{CONFIG} {key}"
                break
    if qc is None and quantize_config is not None:
        qc, source = quantize_config, QUANTIZE_CONFIG
    if qc is None:
        none = known(None, f"{CONFIG} (no quantization_config)") if isinstance(config, dict) else unknown(
            f"no {CONFIG}" if config is None else f"{CONFIG} is not a JSON object")
        return {**out, "method": none, "bits": none, "group_size": none, "tool": none}, None
    if not isinstance(qc, dict):
        bad = unknown(f"{source} is {describe(qc)}, not an object")
        return {**out, "method": bad, "bits": bad, "group_size": bad, "tool": bad}, bad["unknown"]
    method = qc.get("quant_method", "gptq" if source == QUANTIZE_CONFIG else None)
    if isinstance(method, str) and 0 < len(method) <= 64:
        method = method.lower()
        out["method"] = known(method, f"{source} quant_method" if "quant_method" in qc else source,
                              **({} if "quant_method" in qc else {"derived": "quantize_config.json is AutoGPTQ's"}))
    else:
        out["method"] = unknown(f"{source} quant_method is {describe(method)}")
        method = None
    out["bits"], out["group_size"] = _bits_and_group(qc, method, source)
    out["tool"] = _tool(qc, method, source)
    packed = None
    if method is not None and not (method in UNPACKED or _unpacked_variant(qc, method, out["bits"]["value"])):
        packed = (f"quantized with {method}: the safetensors tensors hold packed weights, so their element count "
                  "(weights.sets tensor_elements) is not the parameter count")
    elif method is None:
        packed = f"{source} does not say how the weights are quantized"
    return out, packed


def _unpacked_variant(qc: dict, method: str, bits: Any) -> bool:
    if method == "bitsandbytes":
        return bits == 8
    if method == "compressed-tensors":
        return qc.get("format") in ("float-quantized", "int-quantized", "naive-quantized")
    return False


def _bits_and_group(qc: dict, method: str | None, source: str) -> tuple[dict, dict]:
    bits_key = next((k for k in ("bits", "w_bit", "weight_bits") if k in qc), None)
    group_key = next((k for k in ("group_size", "q_group_size", "weight_block_size") if k in qc), None)
    if method == "bitsandbytes" and bits_key is None:
        b4, b8 = qc.get("load_in_4bit") is True, qc.get("load_in_8bit") is True
        bits = (known(4 if b4 else 8, f"{source} load_in_{4 if b4 else 8}bit") if b4 != b8
                else unknown(f"{source} sets neither (or both) of load_in_4bit and load_in_8bit"))
        return bits, known(None, f"{source} (bitsandbytes quantizes in blocks of its own)")
    if method == "fp8" and bits_key is None:
        bits = known(8, f"{source} quant_method", derived="fp8")
    elif method == "compressed-tensors" and bits_key is None:
        return _compressed_tensors(qc, source)
    elif bits_key is None:
        bits = unknown(f"{source} has no bits")
    else:
        value = qc[bits_key]
        bits = (known(value, f"{source} {bits_key}") if positive_int(value) is not None and value <= 64
                else unknown(f"{source} {bits_key} is {describe(value)}"))
    if group_key is None:
        group = unknown(f"{source} has no group_size")
    else:
        value = qc[group_key]
        ok = (isinstance(value, int) and not isinstance(value, bool) and (value == -1 or 0 < value <= 1 << 20)) or (
            group_key == "weight_block_size" and isinstance(value, list) and 0 < len(value) <= 4
            and all(positive_int(v) is not None and v <= 1 << 20 for v in value))
        group = known(value, f"{source} {group_key}") if ok else unknown(f"{source} {group_key} is {describe(value)}")
    return bits, group


def _compressed_tensors(qc: dict, source: str) -> tuple[dict, dict]:
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        why = unknown(f"{source} has no config_groups")
        return why, why
    bits, sizes = set(), set()
    for g in groups.values():
        weights = g.get("weights") if isinstance(g, dict) else None
        if not isinstance(weights, dict):
            why = unknown(f"{source} config_groups has a group without weights")
            return why, why
        bits.add(weights.get("num_bits") if positive_int(weights.get("num_bits")) else "bad")
        size = weights.get("group_size")
        sizes.add(size if size is None or positive_int(size) else "bad")
    where = f"{source} config_groups.*.weights"
    b = (known(bits.pop(), f"{where}.num_bits") if len(bits) == 1 and "bad" not in bits
         else unknown(f"{where}.num_bits: {sorted(map(str, bits))}"))
    s = (known(sizes.pop(), f"{where}.group_size") if len(sizes) == 1 and "bad" not in sizes
         else unknown(f"{where}.group_size: {sorted(map(str, sizes))}"))
    return b, s


def _tool(qc: dict, method: str | None, source: str) -> dict:
    meta = qc.get("meta")
    writer = meta.get("quantizer") if isinstance(meta, dict) else qc.get("quantizer")
    if isinstance(writer, str):
        writer = [writer]
    if isinstance(writer, list) and writer and all(isinstance(w, str) and len(w) <= 128 for w in writer[:8]):
        return known(writer[:8], f"{source} {'meta.quantizer' if isinstance(meta, dict) else 'quantizer'}")
    if method in QUANT_TOOLS:
        return known(QUANT_TOOLS[method], f"{source} quant_method", derived="the library that writes this quant_method")
    return unknown(f"{source} names no writer and quant_method {method!r} is not one we know")
