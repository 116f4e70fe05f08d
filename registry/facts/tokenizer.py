"""Tokenizer facts: class, special tokens and the sha256 of the chat template.

Where transformers looks, in its order: the chat template in ``chat_template.jinja``, else
``chat_template.json``, else ``tokenizer_config.json`` (a string, or a list of named templates);
special tokens in ``special_tokens_map.json`` over ``tokenizer_config.json``. A GGUF file's
``tokenizer.chat_template`` stands in when the repository has none of these.
"""

from __future__ import annotations

import hashlib
from typing import Any

from registry.facts._cells import describe, known, unknown

TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
CHAT_TEMPLATE_JINJA = "chat_template.jinja"
CHAT_TEMPLATE_JSON = "chat_template.json"
SPECIAL = ("bos_token", "eos_token", "pad_token", "unk_token")


def _token_text(value: Any) -> str | None:
    """A special token as written: a string, or an AddedToken object's ``content``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and len(value) <= 256 else None


def tokenizer_class(tok_config: Any, tok_error: str | None, gguf_meta: dict | None) -> dict:
    if isinstance(tok_config, dict) and "tokenizer_class" in tok_config:
        value = tok_config["tokenizer_class"]
        return (known(value, f"{TOKENIZER_CONFIG} tokenizer_class") if isinstance(value, str) and len(value) <= 128
                else unknown(f"{TOKENIZER_CONFIG} tokenizer_class is {describe(value)}"))
    if gguf_meta is not None and isinstance(gguf_meta["metadata"].get("tokenizer.ggml.model"), str):
        return known(gguf_meta["metadata"]["tokenizer.ggml.model"][:128], f"{gguf_meta['path']} tokenizer.ggml.model")
    return unknown(tok_error or f"{TOKENIZER_CONFIG} has no tokenizer_class")


def special_tokens(tok_config: Any, tok_error: str | None, special_map: Any, gguf_meta: dict | None) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for name in SPECIAL:
        found: list[tuple[str, Any]] = []
        for doc, source in ((special_map, SPECIAL_TOKENS_MAP), (tok_config, TOKENIZER_CONFIG)):
            if isinstance(doc, dict) and doc.get(name) is not None:
                found.append((f"{source} {name}", doc[name]))
        if found:
            where, raw = found[0]
            text = _token_text(raw)
            if text is None:
                out[name] = unknown(f"{where} is {describe(raw)}, not a token")
                continue
            cell = known(text, where)
            others = {w: _token_text(v) for w, v in found[1:] if _token_text(v) != text}
            if others:
                cell["disagrees"] = others
            out[name] = cell
        elif gguf_meta is not None and f"tokenizer.ggml.{_gguf_name(name)}_token_id" in gguf_meta["metadata"]:
            key = f"tokenizer.ggml.{_gguf_name(name)}_token_id"
            out[name] = unknown(f"{gguf_meta['path']} {key} gives token id "
                                f"{describe(gguf_meta['metadata'][key])}; token texts are not read")
        elif tok_error is not None and special_map is None:
            out[name] = unknown(tok_error)
        else:
            out[name] = known(None, f"{TOKENIZER_CONFIG}, {SPECIAL_TOKENS_MAP} (not set)")
    return out


def _gguf_name(name: str) -> str:
    return {"bos_token": "bos", "eos_token": "eos", "pad_token": "padding", "unk_token": "unknown"}[name]


def _digest(text: str | bytes) -> str:
    return hashlib.sha256(text if isinstance(text, bytes) else text.encode("utf-8")).hexdigest()


def chat_template(jinja: bytes | None, jinja_error: str | None, template_json: Any, tok_config: Any,
                  gguf_meta: dict | None) -> dict[str, dict]:
    """``chat_template_sha256`` (the default template) and ``chat_templates`` (name -> sha256).

    Args:
        jinja: The bytes of chat_template.jinja, if the version has it.
        jinja_error: Why chat_template.jinja could not be read, if so.
        template_json: The parsed chat_template.json, if any.
        tok_config: The parsed tokenizer_config.json, if any.
        gguf_meta: The first GGUF file's kept metadata, if any.
    """
    if jinja_error is not None:
        why = unknown(jinja_error)
        return {"chat_template_sha256": why, "chat_templates": why}
    if jinja is not None:
        return {"chat_template_sha256": known(_digest(jinja), CHAT_TEMPLATE_JINJA),
                "chat_templates": known({"default": _digest(jinja)}, CHAT_TEMPLATE_JINJA)}
    for doc, source in ((template_json, CHAT_TEMPLATE_JSON), (tok_config, TOKENIZER_CONFIG)):
        if isinstance(doc, dict) and doc.get("chat_template") is not None:
            return _from_value(doc["chat_template"], f"{source} chat_template")
    if gguf_meta is not None:
        md = gguf_meta["metadata"]
        named = {k.removeprefix("tokenizer.chat_template").lstrip(".") or "default": v
                 for k, v in md.items() if k == "tokenizer.chat_template" or k.startswith("tokenizer.chat_template.")}
        if named:
            bad = [k for k, v in named.items() if not isinstance(v, str)]
            if bad:
                why = unknown(f"{gguf_meta['path']} chat template {bad[0]!r} is not a UTF-8 string")
                return {"chat_template_sha256": why, "chat_templates": why}
            return _cells({k: _digest(v) for k, v in named.items()}, f"{gguf_meta['path']} tokenizer.chat_template")
    none = known(None, f"{CHAT_TEMPLATE_JINJA}, {CHAT_TEMPLATE_JSON}, {TOKENIZER_CONFIG} (no chat template)")
    return {"chat_template_sha256": none, "chat_templates": none}


def _from_value(value: Any, source: str) -> dict[str, dict]:
    try:
        if isinstance(value, str):
            return _cells({"default": _digest(value)}, source)
        if isinstance(value, list) and 0 < len(value) <= 64:
            named: dict[str, str] = {}
            for item in value:
                if not (isinstance(item, dict) and isinstance(item.get("name"), str)
                        and isinstance(item.get("template"), str) and len(item["name"]) <= 128):
                    raise ValueError(f"holds {describe(item)}, not a {{name, template}} object")
                if item["name"] in named:
                    raise ValueError(f"names {item['name']!r} twice")
                named[item["name"]] = _digest(item["template"])
            return _cells(named, source)
        raise ValueError(f"is {describe(value)}, not a string or a list of named templates")
    except UnicodeEncodeError:
        why = unknown(f"{source} holds a lone surrogate: it has no UTF-8 bytes to hash")
    except ValueError as exc:
        why = unknown(f"{source} {exc}")
    return {"chat_template_sha256": why, "chat_templates": why}


def _cells(named: dict[str, str], source: str) -> dict[str, dict]:
    default = (known(named["default"], source) if "default" in named
               else unknown(f"{source} has named templates {sorted(named)[:8]} but none named 'default'"))
    return {"chat_template_sha256": default, "chat_templates": known(named, source)}
