"""A tiny random Llama built by transformers itself, saved as safetensors, for the eval runners.

``tiny_llm_files(seed)`` returns the files ``save_pretrained`` writes (``config.json``,
``generation_config.json``, ``model.safetensors``, ``tokenizer.json``, ``tokenizer_config.json``,
``chat_template.jinja``): a 2-layer Llama with a byte-level BPE tokenizer trained here on a few
sentences in English and German, and a chat template. No hub is reached. The same seed gives the same
weights; the bytes are built once per process and seed.

Example:
    >>> files = tiny_llm_files()  # doctest: +SKIP
    >>> write_tiny_llm(tmp_path / "model")  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CORPUS = (
    "The capital of France is Paris.",
    "Die Hauptstadt von Frankreich ist Paris.",
    "What is the weather like in Berlin today?",
    "Wie ist das Wetter heute in Berlin?",
    "I cannot help with that request.",
    "hello world",
)
VOCAB_SIZE = 320


@functools.cache
def tiny_llm_files(seed: int = 0) -> dict[str, bytes]:
    """Path -> bytes of the tiny Llama's repository (built once per process and seed)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(CORPUS) * 8, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                        pad_token="<pad>")
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        return {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir()) if p.is_file()}


def write_tiny_llm(dest: Path, seed: int = 0) -> Path:
    """Write the tiny Llama's files under ``dest`` (created) and return it."""
    dest.mkdir(parents=True, exist_ok=True)
    for name, data in tiny_llm_files(seed).items():
        (dest / name).write_bytes(data)
    return dest
