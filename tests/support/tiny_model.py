"""A tiny, deterministic Llama-shaped model as the bytes of its files, for tests and examples.

``tiny_model_files(seed)`` returns what a Hugging Face repository of a sharded safetensors model holds:
two weight shards written with the ``safetensors`` numpy API, the shard index, ``config.json``,
``generation_config.json``, ``tokenizer.json`` and ``tokenizer_config.json``. The same seed always
gives the same bytes; another seed gives other weights (and so other digests) with the same layout.
"""

from __future__ import annotations

import json

import numpy as np
from safetensors.numpy import save

HIDDEN = 16
VOCAB = 32
LAYERS = 2
INTERMEDIATE = 32

SHARD_NAMES = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


def _json(obj: object) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def _tensors(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": rng.standard_normal((VOCAB, HIDDEN), dtype=np.float32),
        "model.norm.weight": np.ones(HIDDEN, dtype=np.float32),
        "lm_head.weight": rng.standard_normal((VOCAB, HIDDEN), dtype=np.float32),
    }
    for layer in range(LAYERS):
        p = f"model.layers.{layer}"
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            tensors[f"{p}.self_attn.{name}.weight"] = rng.standard_normal((HIDDEN, HIDDEN), dtype=np.float32)
        tensors[f"{p}.mlp.gate_proj.weight"] = rng.standard_normal((INTERMEDIATE, HIDDEN), dtype=np.float32)
        tensors[f"{p}.mlp.up_proj.weight"] = rng.standard_normal((INTERMEDIATE, HIDDEN), dtype=np.float32)
        tensors[f"{p}.mlp.down_proj.weight"] = rng.standard_normal((HIDDEN, INTERMEDIATE), dtype=np.float32)
        tensors[f"{p}.input_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
        tensors[f"{p}.post_attention_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    return tensors


def _tokenizer() -> dict[str, object]:
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for i in range(VOCAB - len(vocab)):
        vocab[chr(ord("a") + i % 26) * (1 + i // 26)] = len(vocab)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": t, "special": True, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False}
            for t, i in list(vocab.items())[:3]
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }


def tiny_model_files(seed: int = 0) -> dict[str, bytes]:
    """The files of a tiny two-shard safetensors model, keyed by repository path.

    Args:
        seed: Seeds the weights; equal seeds give byte-identical files.
    """
    tensors = _tensors(seed)
    names = sorted(tensors)
    halves = (names[: len(names) // 2], names[len(names) // 2 :])
    files: dict[str, bytes] = {}
    weight_map: dict[str, str] = {}
    total = 0
    for shard, keys in zip(SHARD_NAMES, halves):
        part = {k: tensors[k] for k in keys}
        files[shard] = save(part, metadata={"format": "pt"})
        total += sum(t.nbytes for t in part.values())
        weight_map.update({k: shard for k in keys})
    files["model.safetensors.index.json"] = _json({"metadata": {"total_size": total}, "weight_map": weight_map})
    files["config.json"] = _json(
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": HIDDEN,
            "intermediate_size": INTERMEDIATE,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "num_hidden_layers": LAYERS,
            "vocab_size": VOCAB,
            "max_position_embeddings": 64,
            "rms_norm_eps": 1e-6,
            "torch_dtype": "float32",
            "bos_token_id": 1,
            "eos_token_id": 2,
            "tie_word_embeddings": False,
        }
    )
    files["generation_config.json"] = _json({"bos_token_id": 1, "eos_token_id": 2, "max_new_tokens": 8})
    files["tokenizer.json"] = _json(_tokenizer())
    files["tokenizer_config.json"] = _json(
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "model_max_length": 64,
            "chat_template": "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}",
        }
    )
    return files
