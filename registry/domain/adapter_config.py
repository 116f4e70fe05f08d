"""The two ways an adapter's ``adapter_config.json`` is given its base: by a node (:func:`rewrite_base_name`) and
by ``/hf`` (:func:`with_base`). Both are pure functions of signed data, so anyone holding the adapter's signature
bundle checks the bytes by doing the rewrite again. No I/O.

**A node** (``modelreg fetch``) sets ``base_model_name_or_path`` to its base's served name.

vLLM's filesystem LoRA resolver accepts an adapter directory when its ``adapter_config.json`` says
``base_model_name_or_path`` equal to the served model's name, a string compare. The adapter's release names its
base's served name (signed, ``adapter_of.served_name``), and :func:`rewrite_base_name` writes it into the config:
only the bytes of that one value change (the key and its value are inserted after the opening brace when the
config has none); every other byte stays as signed. The rewrite is a function of the signed bytes and the signed
name, so ``modelreg verify`` checks a fetched adapter by doing it again and comparing, byte for byte (ADR 0018).

**``/hf``** names the base as PEFT's loaders read it: ``base_model_name_or_path`` (a Hub repository id) and
``revision`` (``AutoPeftModelForCausalLM`` loads the base at it). :func:`with_base` writes the base's repository
id ``tenant/name`` and its commit (the first 40 hex digits of the signed ``adapter_of.manifest_digest``), so a
loader pointed at the registry loads exactly the bound base. The JSON is written as PEFT's ``save_pretrained``
writes it (two-space indent, sorted keys), so one original and one base always give the same bytes.

Example:
    >>> rewrite_base_name(b'{"peft_type": "LORA",\\n "base_model_name_or_path": "/tmp/x", "r": 4}\\n', "acme/llm")
    b'{"peft_type": "LORA",\\n "base_model_name_or_path": "acme/llm", "r": 4}\\n'
    >>> rewrite_base_name(b'{"r": 4}', "acme/llm")
    b'{"base_model_name_or_path": "acme/llm","r": 4}'
    >>> served = with_base(b'{"peft_type": "LORA", "base_model_name_or_path": "/tmp/x", "revision": null}',
    ...                    base_name="acme/llm", base_revision="ab" * 20)
    >>> import json; json.loads(served)["base_model_name_or_path"], json.loads(served)["revision"][:6]
    ('acme/llm', 'ababab')
    >>> with_base(served, base_name="acme/llm", base_revision="ab" * 20) == served
    True
"""

from __future__ import annotations

import json
from typing import Any

from registry.domain.adapters import ADAPTER_CONFIG, MAX_CONFIG_BYTES
from registry.domain.errors import InvalidInputError

BASE_NAME_KEY = "base_model_name_or_path"
BASE_REVISION_KEY = "revision"
MAX_SERVED_NAME = 256

_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\n\r"


class AdapterConfigError(InvalidInputError):
    """An ``adapter_config.json`` that cannot be rewritten: not one JSON object in UTF-8, a key twice, too big."""

    code = "adapter-config-invalid"


def check_served_name(name: object) -> str:
    """A served name as a release may give it: printable text of 1 to :data:`MAX_SERVED_NAME` characters.

    Raises:
        InvalidInputError: anything else.
    """
    if not isinstance(name, str) or not 0 < len(name) <= MAX_SERVED_NAME or not name.isprintable():
        raise InvalidInputError(f"a served name is printable text of 1 to {MAX_SERVED_NAME} characters",
                                field="served_name")
    return name


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in _WHITESPACE:
        at += 1
    return at


def _value_span(text: str) -> tuple[int, int] | None:
    """Where the top-level object's ``base_model_name_or_path`` value is (start, end), or None when absent.

    Raises:
        AdapterConfigError: not one JSON object, or a key repeated (readers disagree on which wins).
    """
    at = _skip(text, 0)
    if at >= len(text) or text[at] != "{":
        raise AdapterConfigError("adapter_config.json is not a JSON object")
    at, seen, span = _skip(text, at + 1), set(), None
    if at < len(text) and text[at] == "}":
        end = at + 1
    else:
        while True:
            if at >= len(text) or text[at] != '"':
                raise AdapterConfigError("adapter_config.json: a key was expected")
            try:
                key, at = json.decoder.scanstring(text, at + 1)
            except ValueError as exc:
                raise AdapterConfigError(f"adapter_config.json: {exc}") from None
            if key in seen:
                raise AdapterConfigError(f"adapter_config.json repeats key {key!r}")
            seen.add(key)
            at = _skip(text, at)
            if at >= len(text) or text[at] != ":":
                raise AdapterConfigError("adapter_config.json: ':' was expected")
            start = _skip(text, at + 1)
            try:
                _, at = _DECODER.raw_decode(text, start)
            except (ValueError, RecursionError) as exc:
                raise AdapterConfigError(f"adapter_config.json: {exc}"[:300]) from None
            if key == BASE_NAME_KEY:
                span = (start, at)
            at = _skip(text, at)
            if at < len(text) and text[at] == ",":
                at = _skip(text, at + 1)
                continue
            if at < len(text) and text[at] == "}":
                end = at + 1
                break
            raise AdapterConfigError("adapter_config.json: ',' or '}' was expected")
    if _skip(text, end) != len(text):
        raise AdapterConfigError("adapter_config.json has more after its object")
    return span


def rewrite_base_name(data: bytes, served_name: str) -> bytes:
    """``data`` (an ``adapter_config.json``) with ``base_model_name_or_path`` set to ``served_name``.

    Only that value's bytes change; a config without the key gets it first in the object. The same input
    always gives the same bytes.

    Raises:
        AdapterConfigError: ``data`` is over :data:`MAX_CONFIG_BYTES`, not UTF-8, not one JSON object, or
            repeats a key.
        InvalidInputError: ``served_name`` is no served name (:func:`check_served_name`).
    """
    check_served_name(served_name)
    if len(data) > MAX_CONFIG_BYTES:
        raise AdapterConfigError(f"adapter_config.json is over {MAX_CONFIG_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AdapterConfigError("adapter_config.json is not UTF-8") from None
    value = json.dumps(served_name)
    span = _value_span(text)
    if span is None:
        brace = text.index("{") + 1
        empty = text[_skip(text, brace)] == "}"
        return (text[:brace] + f'"{BASE_NAME_KEY}": {value}' + ("" if empty else ",") + text[brace:]).encode()
    start, end = span
    return (text[:start] + value + text[end:]).encode()


# --- /hf ----------------------------------------------------------------------------------------------------


class AdapterConfigUnservableError(ValueError):
    """The stored ``adapter_config.json`` cannot be rewritten (not a bounded, strict JSON object). An approved
    adapter's config passed the same reading at seal, so this means the stored bytes are not the checked ones."""


def with_base(original: bytes, *, base_name: str, base_revision: str | None) -> bytes:
    """``original`` (an ``adapter_config.json``) with ``base_model_name_or_path`` = ``base_name`` and
    ``revision`` = ``base_revision``; every other key and value as it was.

    Raises:
        AdapterConfigUnservableError: ``original`` is over :data:`MAX_CONFIG_BYTES`, not UTF-8, not JSON, not an
            object, or repeats a key or holds NaN/Infinity (readers would disagree on what it says).
    """
    if len(original) > MAX_CONFIG_BYTES:
        raise AdapterConfigUnservableError(f"{ADAPTER_CONFIG} is {len(original)} bytes, over {MAX_CONFIG_BYTES}")
    try:
        document = json.loads(original.decode("utf-8"), object_pairs_hook=_no_duplicates,
                              parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise AdapterConfigUnservableError(f"{ADAPTER_CONFIG} is not strict JSON: {exc}"[:300]) from None
    if not isinstance(document, dict):
        raise AdapterConfigUnservableError(f"{ADAPTER_CONFIG} is not a JSON object")
    document[BASE_NAME_KEY] = base_name
    document[BASE_REVISION_KEY] = base_revision
    return json.dumps(document, indent=2, sort_keys=True).encode()


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")
