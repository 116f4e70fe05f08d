"""Model facts: what a serving platform must know of a version, read from the headers of its files.

:func:`read_model_facts` takes the version's file sizes and a ``read_range(path, start, end)``
callable, and reads only headers under bounds (safetensors and GGUF headers through the scanners'
own parsers, small JSON files whole): no database, no store, no guessing. Every fact is a cell,
``{"value": ..., "source": ...}`` or ``{"value": None, "unknown": "why"}``.

Example:
    >>> files = {"config.json": b'{"model_type": "llama", "num_hidden_layers": 2}'}
    >>> facts = read_model_facts({p: len(b) for p, b in files.items()}, lambda p, s, e: files[p][s:e])
    >>> facts["architecture"]["num_hidden_layers"]["value"], facts["weights"]["parameters"]["unknown"][:20]
    (2, 'no safetensors or GG')
"""

from __future__ import annotations

from typing import Any, Mapping

from registry.domain import parts as part_facts
from registry.facts import config as config_facts
from registry.facts import tokenizer as tokenizer_facts
from registry.facts import weights as weight_facts
from registry.facts._cells import MAX_JSON_BYTES, RangeFile, ReadBudget, ReadRange, known, load_json, unknown

READER_VERSION = "2"
"""Bump when what the readers record changes; stored beside the facts. 2: ``parts``."""
MAX_TOTAL_READ = 512 << 20
"""All the bytes the readers may read for one version (a thousand shards' headers fit easily)."""

__all__ = ["READER_VERSION", "ReadRange", "read_model_facts"]


def read_model_facts(files: Mapping[str, int], read_range: ReadRange, *,
                     budget: int = MAX_TOTAL_READ) -> dict[str, Any]:
    """Read a version's facts from its files' headers.

    Args:
        files: Path -> size of every file of the version.
        read_range: Returns the bytes ``[start, end)`` of a file; its errors (a missing blob, an
            unreachable store) propagate: they say nothing about the model.
        budget: Bytes the readers may read in all.

    Returns:
        ``{"reader_version", "weights", "architecture", "quantization", "tokenizer", "parts"}``; ``parts``
        (``path -> {part: sha256}``) splits the files that hold several components of the release unit
        (:mod:`registry.domain.parts`).
    """
    spent = ReadBudget(budget)

    def load(path: str) -> tuple[Any, str | None]:
        if path not in files:
            return None, f"no {path}"
        return load_json(read_range, path, files[path], spent)

    config, config_error = load(config_facts.CONFIG)
    quantize_config, _ = load(config_facts.QUANTIZE_CONFIG)
    sets, gguf_metas = weight_facts.weight_sets(files, read_range, spent)
    gguf_meta = gguf_metas[0] if gguf_metas else None
    quantization, packed = config_facts.quantization(config, quantize_config,
                                                     [s for s in sets if s["format"] == "gguf"])
    if config_error is not None and config_facts.CONFIG not in files and gguf_meta is not None:
        architecture = config_facts.architecture_from_gguf(gguf_meta)
    else:
        architecture = config_facts.architecture(config, config_error)
    tok_config, tok_error = load(tokenizer_facts.TOKENIZER_CONFIG)
    if tok_error is None and not isinstance(tok_config, dict):
        tok_config, tok_error = None, f"{tokenizer_facts.TOKENIZER_CONFIG} is not a JSON object"
    special_map, _ = load(tokenizer_facts.SPECIAL_TOKENS_MAP)
    template_json, _ = load(tokenizer_facts.CHAT_TEMPLATE_JSON)
    jinja, jinja_error = None, None
    if tokenizer_facts.CHAT_TEMPLATE_JINJA in files:
        size = files[tokenizer_facts.CHAT_TEMPLATE_JINJA]
        if size > MAX_JSON_BYTES:
            jinja_error = f"{tokenizer_facts.CHAT_TEMPLATE_JINJA} is {size} bytes, over the {MAX_JSON_BYTES} read"
        else:
            jinja = RangeFile(read_range, tokenizer_facts.CHAT_TEMPLATE_JINJA, size, spent, size).read(size)
    tokenizer = {
        "class": tokenizer_facts.tokenizer_class(tok_config, tok_error, gguf_meta),
        **tokenizer_facts.special_tokens(tok_config, tok_error, special_map, gguf_meta),
        **tokenizer_facts.chat_template(jinja, jinja_error, template_json, tok_config, gguf_meta),
    }
    for cells in (architecture, quantization, tokenizer):
        for name, cell in cells.items():
            if not _is_text(cell.get("value")):
                # JSON escapes can spell lone surrogates: no UTF-8 text, and PostgreSQL refuses them.
                cells[name] = unknown(f"{cell.get('source', name)} holds a lone surrogate escape: not text")
    return _escape_surrogates({
        "reader_version": READER_VERSION,
        "weights": {"formats": known(weight_facts.formats(files), "file names"),
                    **weight_facts.summarize(sets, packed), "sets": sets},
        "architecture": architecture,
        "quantization": quantization,
        "tokenizer": tokenizer,
        "parts": part_facts.read_parts(tok_config, tok_error, gguf_metas),
    })


def _is_text(node: Any, depth: int = 0) -> bool:
    """No string in ``node`` (keys included) holds a lone surrogate."""
    if isinstance(node, str):
        try:
            node.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if depth > 8:
        return True
    if isinstance(node, dict):
        return all(_is_text(k, depth + 1) and _is_text(v, depth + 1) for k, v in node.items())
    if isinstance(node, list):
        return all(_is_text(v, depth + 1) for v in node)
    return True


def _escape_surrogates(node: Any) -> Any:
    """The document with lone surrogates in its remaining strings (reasons quoting bad input) escaped."""
    if isinstance(node, str):
        return node if _is_text(node) else node.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(node, dict):
        return {_escape_surrogates(k): _escape_surrogates(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_escape_surrogates(v) for v in node]
    return node
