"""LoRA adapters made by PEFT itself for the tiny Llama of ``tiny_llm.py``, and the variants the adapter tests need.

``tiny_adapter_files(variant)`` returns path -> bytes of what ``PeftModel.save_pretrained`` writes
(``adapter_config.json`` and ``adapter_model.safetensors``, or ``adapter_model.bin`` for a pickle; PEFT's README
is left out, it names a temporary directory), built once per process and variant on CPU torch:

- ``lora``: LoRA (r=4, alpha 8) on ``q_proj`` and ``v_proj`` of ``tiny_llm_files(seed)``; A and B drawn from a
  seeded generator, so the weights are deterministic and non-zero (PEFT starts B at zero).
- ``other_shapes``: the same LoRA made for a wider Llama (hidden size 48): the modules exist, the shapes do not fit.
- ``other_modules``: LoRA on ``c_attn`` of a tiny GPT-2: modules the Llama does not have.
- ``pickle``: ``lora`` saved as a pickle (``adapter_model.bin``, ``torch.save``'s zip).
- ``pickle_payload``: that pickle with one more entry whose unpickling calls ``os.getcwd`` (a harmless stand-in
  for ``os.system``, never loaded here: the scanner must flag it).

``adapter_config.json`` is written back canonically with ``base_model_name_or_path`` set to ``base_name``.

Example:
    >>> files = tiny_adapter_files("lora")  # doctest: +SKIP
    >>> sorted(files)  # doctest: +SKIP
    ['adapter_config.json', 'adapter_model.safetensors']
"""

from __future__ import annotations

import functools
import io
import json
import os
import tempfile
from pathlib import Path

VARIANTS = ("lora", "other_shapes", "other_modules", "pickle", "pickle_payload")
TARGETS = ["q_proj", "v_proj"]
RANK = 4


class _Payload:
    """Pickles as a call of ``os.getcwd`` (built into bytes only, never loaded)."""

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return os.getcwd, ()


def write_files(dest: Path, files: dict[str, bytes]) -> Path:
    """Write ``files`` under ``dest`` (created) and return it."""
    dest.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (dest / name).write_bytes(data)
    return dest


def _llama(hidden_size: int, seed: int):
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    from tests.support.tiny_llm import tiny_llm_files

    if hidden_size == 32:
        # The very base the tests submit, loaded from its files.
        with tempfile.TemporaryDirectory() as tmp:
            for name, data in tiny_llm_files(seed).items():
                (Path(tmp) / name).write_bytes(data)
            return AutoModelForCausalLM.from_pretrained(tmp)
    config = LlamaConfig(vocab_size=320, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, tie_word_embeddings=False)
    return LlamaForCausalLM(config)


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(vocab_size=320, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                      bos_token_id=0, eos_token_id=0))


def base_model(kind: str = "llama", seed: int = 0):
    """A tiny base as transformers builds it: ``llama`` (the tiny Llama's own files), ``wide-llama`` (hidden size
    48) or ``gpt2`` (Conv1D layers, whose weights PEFT adapts with ``fan_in_fan_out``)."""
    import torch

    torch.manual_seed(seed)
    return {"llama": lambda: _llama(32, seed), "wide-llama": lambda: _llama(48, seed), "gpt2": _gpt2}[kind]()


def peft_model(base, config, seed: int = 0):
    """``get_peft_model(base, config)`` with every adapter parameter drawn from a seeded generator (non-zero)."""
    import torch
    from peft import get_peft_model

    torch.manual_seed(seed)
    model = get_peft_model(base, config)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for _, parameter in model.named_parameters():
            if parameter.requires_grad:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)
    return model


def saved_adapter(model, *, safe_serialization: bool = True) -> dict[str, bytes]:
    """What ``model.save_pretrained`` writes, path -> bytes (PEFT's README left out)."""
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=safe_serialization)
        return {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir())
                if p.is_file() and p.name.startswith("adapter_")}


def _peft_model(variant: str, seed: int):
    from peft import LoraConfig

    if variant == "other_modules":
        return peft_model(base_model("gpt2", seed), LoraConfig(
            r=RANK, lora_alpha=8, target_modules=["c_attn"], fan_in_fan_out=True, task_type="CAUSAL_LM"), seed)
    return peft_model(base_model("wide-llama" if variant == "other_shapes" else "llama", seed),
                      LoraConfig(r=RANK, lora_alpha=8, target_modules=TARGETS, task_type="CAUSAL_LM"), seed)


@functools.cache
def tiny_adapter_files(variant: str = "lora", seed: int = 0, base_name: str = "acme/llm") -> dict[str, bytes]:
    """Path -> bytes of an adapter ``variant`` (see the module's docstring), built once per process."""
    import torch

    if variant not in VARIANTS:
        raise ValueError(f"no adapter variant {variant!r}: one of {VARIANTS}")
    if variant == "pickle_payload":
        files = dict(tiny_adapter_files("pickle", seed, base_name))
        state = torch.load(io.BytesIO(files.pop("adapter_model.bin")), weights_only=True)
        state["__planted__"] = _Payload()
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return {**files, "adapter_model.bin": buffer.getvalue()}
    model = _peft_model("lora" if variant == "pickle" else variant, seed)
    saved = saved_adapter(model, safe_serialization=variant != "pickle")
    config = json.loads(saved["adapter_config.json"])
    config["base_model_name_or_path"] = base_name
    saved["adapter_config.json"] = json.dumps(config, sort_keys=True, indent=2).encode()
    return saved


def edited_config(files: dict[str, bytes], **changes: object) -> dict[str, bytes]:
    """``files`` with ``adapter_config.json``'s keys set to ``changes``."""
    config = json.loads(files["adapter_config.json"])
    config.update(changes)
    return {**files, "adapter_config.json": json.dumps(config, sort_keys=True, indent=2).encode()}
