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


GGUF_CHAT_TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"


def tiny_gguf(*, file_type: int = 7, chat_template: object = GGUF_CHAT_TEMPLATE, name: str = "tiny") -> bytes:
    """A tiny Llama-shaped GGUF written by ``gguf.GGUFWriter``: 2 blocks of hidden 64, 4 heads, 2 KV heads.

    Tensors: ``token_embd`` F32 (32 x 64), ``output_norm`` F16 (64), and per block a Q8_0 ``attn_q``
    (64 x 64, written as its blocks' bytes). ``chat_template`` is a string or a list of
    ``{"name", "template"}`` (named templates); ``file_type`` is written as ``general.file_type``.
    """
    import os
    import tempfile

    from gguf import GGMLQuantizationType, GGUFWriter

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.gguf")
        w = GGUFWriter(path, "llama")
        w.add_name(name)
        w.add_file_type(file_type)
        w.add_block_count(2)
        w.add_context_length(4096)
        w.add_embedding_length(64)
        w.add_head_count(4)
        w.add_head_count_kv(2)
        w.add_rope_scaling_type(__import__("gguf").RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(2.0)
        w.add_tokenizer_model("llama")
        w.add_token_list(["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(29)])
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        if chat_template is not None:
            w.add_chat_template(chat_template)
        w.add_tensor("token_embd.weight", np.ones((32, 64), dtype=np.float32))
        w.add_tensor("output_norm.weight", np.ones(64, dtype=np.float16))
        for layer in range(2):
            # 64 x 64 elements of Q8_0: 2 blocks of 32 per row, 34 bytes each.
            w.add_tensor(f"blk.{layer}.attn_q.weight", np.zeros((64, 68), dtype=np.uint8),
                         raw_dtype=GGMLQuantizationType.Q8_0)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        with open(path, "rb") as f:
            return f.read()


def tiny_bf16_safetensors() -> bytes:
    """One ``model.safetensors`` written by ``safetensors.torch`` with bfloat16 and float32 tensors."""
    import torch
    from safetensors.torch import save

    return save({"embed.weight": torch.zeros((32, 16), dtype=torch.bfloat16),
                 "layer.weight": torch.zeros((16, 16), dtype=torch.bfloat16),
                 "norm.weight": torch.ones(16, dtype=torch.float32)})
