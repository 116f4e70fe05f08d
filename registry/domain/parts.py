"""The parts of files that hold more than one component of the release unit (``registry/domain/components.py``).

Read with the facts at seal, from what the facts readers already loaded: ``tokenizer_config.json`` (its
``chat_template``, and the rest of the document) and each GGUF set's metadata (``tokenizer.chat_template``
and its named variants). A part's digest is the sha256 of the template's UTF-8 text, or of canonical JSON
(sorted keys, ASCII) for anything that is not a string, so a change is seen whatever its type.

Example:
    >>> parts = tokenizer_config_parts({"chat_template": "{{ x }}", "eos_token": "</s>"})
    >>> sorted(parts)
    ['chat_template', 'without_chat_template']
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

MAX_NAMED_TEMPLATES = 64
"""Named templates beyond this are one part holding the whole value (bounds the recorded parts)."""


def _digest(value: Any) -> str:
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
    else:
        data = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    return hashlib.sha256(data).hexdigest()


def _named(prefix: str, value: Any) -> dict[str, str]:
    """A template value as parts: one for a string, one per ``{name, template}`` for a list of them."""
    if (isinstance(value, list) and 0 < len(value) <= MAX_NAMED_TEMPLATES
            and all(isinstance(i, dict) and isinstance(i.get("name"), str) and len(i["name"]) <= 128
                    and "#" not in i["name"] for i in value)
            and len({i["name"] for i in value}) == len(value)):
        return {f"{prefix}/{i['name']}": _digest(i.get("template")) for i in value}
    return {prefix: _digest(value)}


def tokenizer_config_parts(doc: Any) -> dict[str, str] | None:
    """``tokenizer_config.json``'s parts, or None when it is not a JSON object (it then counts whole)."""
    if not isinstance(doc, dict):
        return None
    parts = {"without_chat_template": _digest({k: v for k, v in doc.items() if k != "chat_template"})}
    if doc.get("chat_template") is not None:
        parts.update(_named("chat_template", doc["chat_template"]))
    return parts


def gguf_parts(metadata: dict[str, Any]) -> dict[str, str]:
    """A GGUF file's chat templates as parts: ``tokenizer.chat_template`` and ``tokenizer.chat_template/NAME``."""
    parts: dict[str, str] = {}
    for key, value in sorted(metadata.items()):
        if key == "tokenizer.chat_template":
            parts[key] = _digest(value)
        elif (key.startswith("tokenizer.chat_template.") and "#" not in key
              and len(parts) < MAX_NAMED_TEMPLATES):
            parts[f"tokenizer.chat_template/{key.removeprefix('tokenizer.chat_template.')}"] = _digest(value)
    return parts


def read_parts(tok_config: Any, tok_error: str | None, gguf_metas: list[dict]) -> dict[str, dict[str, str]]:
    """``path -> {part: sha256}`` for the split files the facts readers loaded.

    Args:
        tok_config: The root ``tokenizer_config.json`` as parsed, if it was.
        tok_error: Why it could not be read (then it has no parts and counts whole).
        gguf_metas: Each GGUF set's kept metadata with its path.
    """
    parts: dict[str, dict[str, str]] = {}
    if tok_error is None:
        found = tokenizer_config_parts(tok_config)
        if found is not None:
            parts["tokenizer_config.json"] = found
    for meta in gguf_metas:
        found = gguf_parts(meta["metadata"])
        if found:
            parts[meta["path"]] = found
    return parts
