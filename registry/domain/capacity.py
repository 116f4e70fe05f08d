"""A serving capacity estimate from a version's facts: weights plus KV cache, nothing else.

Per token, a transformer caches a key and a value vector per layer and KV head:
``2 * layers * kv_heads * head_dim * bytes``. What this handles and what it does not:

- GQA and MQA: counted exactly, through ``num_key_value_heads`` (1 for MQA).
- MLA (DeepSeek-V2/V3, ``kv_lora_rank``): the compressed latent and the rope key are cached once
  per layer, ``layers * (kv_lora_rank + qk_rope_head_dim) * bytes``, as vLLM and SGLang cache them.
- Sliding-window attention is NOT reduced: every layer is counted at the full context, so for models
  whose layers (or some of them) attend to a window the figure is an upper bound.
- Weight bytes are the tensor bytes of the headers, as stored (a quantized model's packed bytes).

The GPU memory needed is weights + KV cache for ``context * sequences`` tokens; :data:`NOT_COUNTED`
lists what a serving runtime adds on top.

Example:
    >>> kv_bytes_per_token(layers=32, kv_heads=8, head_dim=128, bytes_per_element=2)
    131072
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

KV_DTYPES: dict[str, int] = {"fp16": 2, "fp8": 1}
"""KV-cache element types and their bytes (bf16 has fp16's size)."""

NOT_COUNTED: tuple[str, ...] = (
    "activations and intermediate buffers of the forward pass",
    "CUDA graphs captured by the runtime",
    "CUDA context, NCCL and cuBLAS/cuDNN workspaces",
    "allocator fragmentation and the runtime's memory-utilization headroom",
    "framework workspace (sampler, logits for the batch, prefix-cache bookkeeping)",
    "LoRA adapters and their cache",
    "vision or audio encoders' activations of multimodal models",
    "KV-cache block rounding (pages of 16 tokens and the like)",
    "tensor-parallel duplication (replicated layers, embeddings) across GPUs",
)


def kv_bytes_per_token(*, layers: int, kv_heads: int, head_dim: int, bytes_per_element: int) -> int:
    """Bytes of KV cache one token takes in standard attention (MHA, GQA, MQA)."""
    return 2 * layers * kv_heads * head_dim * bytes_per_element


def mla_kv_bytes_per_token(*, layers: int, kv_lora_rank: int, qk_rope_head_dim: int, bytes_per_element: int) -> int:
    """Bytes of KV cache one token takes in multi-head latent attention (one latent, no separate V)."""
    return layers * (kv_lora_rank + qk_rope_head_dim) * bytes_per_element


@dataclass(frozen=True)
class CapacityEstimate:
    """What serving a version needs. ``None`` where a fact is unknown; ``unknown`` says why."""

    weight_bytes: int | None
    attention: str | None
    kv_bytes_per_token: dict[str, int] | None
    context: int | None = None
    sequences: int | None = None
    kv_cache_bytes: dict[str, int] | None = None
    total_bytes: dict[str, int] | None = None
    unknown: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    not_counted: tuple[str, ...] = NOT_COUNTED

    def as_dict(self) -> dict[str, Any]:
        return {"weight_bytes": self.weight_bytes, "attention": self.attention,
                "kv_bytes_per_token": self.kv_bytes_per_token, "context": self.context,
                "sequences": self.sequences, "kv_cache_bytes": self.kv_cache_bytes,
                "total_bytes": self.total_bytes, "unknown": dict(self.unknown), "notes": list(self.notes),
                "not_counted": list(self.not_counted)}


def _value(cells: Mapping[str, Any], name: str, unknown: dict[str, str]) -> Any:
    cell = cells.get(name) if isinstance(cells, Mapping) else None
    if not isinstance(cell, Mapping):
        unknown[name] = "not recorded"
        return None
    if cell.get("value") is None and "unknown" in cell:
        unknown[name] = str(cell["unknown"])
    return cell.get("value")


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def estimate_capacity(facts: Mapping[str, Any], context: int | None = None, sequences: int = 1) -> CapacityEstimate:
    """Estimate the GPU memory a version needs, from its recorded facts.

    Args:
        facts: The facts document (``weights`` and ``architecture`` cells).
        context: Tokens per sequence (prompt + output); None gives the per-token figures only.
        sequences: Sequences held at once, each at ``context`` tokens.

    Raises:
        ValueError: ``context`` or ``sequences`` is not a positive integer.
    """
    if context is not None and _count(context) is None or _count(sequences) is None:
        raise ValueError(f"context ({context!r}) and sequences ({sequences!r}) must be positive integers")
    unknown: dict[str, str] = {}
    weights = facts.get("weights") or {}
    arch = facts.get("architecture") or {}
    weight_bytes = _count(_value(weights, "tensor_bytes", unknown))
    layers = _count(_value(arch, "num_hidden_layers", unknown))
    notes: list[str] = []
    lora_rank = _count(_value(arch, "kv_lora_rank", unknown))
    if lora_rank is not None:
        rope = _count(_value(arch, "qk_rope_head_dim", unknown))
        attention = "mla"
        per_token = None if layers is None or rope is None else {
            name: mla_kv_bytes_per_token(layers=layers, kv_lora_rank=lora_rank, qk_rope_head_dim=rope,
                                         bytes_per_element=size) for name, size in KV_DTYPES.items()}
    elif "kv_lora_rank" in unknown:
        # Whether the model uses latent attention is itself unknown: no formula applies.
        attention, per_token = None, None
    else:
        kv_heads = _count(_value(arch, "num_key_value_heads", unknown))
        heads = _count(_value(arch, "num_attention_heads", unknown))
        head_dim = _count(_value(arch, "head_dim", unknown))
        attention = (None if kv_heads is None else "mqa" if kv_heads == 1 else
                     "mha" if kv_heads == heads else f"gqa ({heads} query heads share {kv_heads} KV heads)"
                     if heads is not None else f"{kv_heads} KV heads")
        per_token = None if None in (layers, kv_heads, head_dim) else {
            name: kv_bytes_per_token(layers=layers, kv_heads=kv_heads, head_dim=head_dim, bytes_per_element=size)
            for name, size in KV_DTYPES.items()}
    if _value(arch, "sliding_window", {}) is not None:
        notes.append("sliding-window attention is not reduced: every layer is counted at the full context "
                     "(an upper bound)")
    kv_cache = total = None
    if context is not None and per_token is not None:
        kv_cache = {name: b * context * sequences for name, b in per_token.items()}
        if weight_bytes is not None:
            total = {name: weight_bytes + b for name, b in kv_cache.items()}
    return CapacityEstimate(weight_bytes=weight_bytes, attention=attention, kv_bytes_per_token=per_token,
                            context=context, sequences=sequences if context is not None else None,
                            kv_cache_bytes=kv_cache, total_bytes=total, unknown=unknown, notes=tuple(notes))
