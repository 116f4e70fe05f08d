"""Canonical JSON: the one byte encoding of the payloads modelreg signs itself.

Object keys are sorted, there is no whitespace, strings are UTF-8 (not ``\\u`` escaped) and the
result has no trailing newline, so the same value always gives the same bytes, and a digest of a
payload (a version manifest, an approval set) is stable.

Example:
    >>> canonical_json({"b": 1, "a": ["é", None, True]})
    b'{"a":["\\xc3\\xa9",null,true],"b":1}'
"""

from __future__ import annotations

import json
import math
from typing import Any

from registry.domain.errors import InvalidInputError


def _check(value: Any, where: str) -> None:
    # json.dumps would turn int keys into strings (so {1: x, "1": y} encodes two equal keys) and
    # writes NaN, which is not JSON: refuse both rather than sign something ambiguous.
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInputError(f"{where}: {value} is not representable in JSON", where=where)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInputError(f"{where}: object key {key!r} is not a string", where=where)
            _check(item, f"{where}.{key}")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check(item, f"{where}[{index}]")
        return
    raise InvalidInputError(f"{where}: {type(value).__name__} is not a JSON value", where=where)


def canonical_json(obj: Any) -> bytes:
    """Encode ``obj`` as canonical JSON bytes.

    Floats are allowed when finite and encoded as Python's shortest round-trip repr; payloads meant
    for verifiers in other languages should carry numbers as integers or strings.

    Args:
        obj: A JSON value made of dicts with string keys, lists, tuples, strings, ints, finite
            floats, booleans and None.

    Raises:
        InvalidInputError: a value that JSON cannot carry unambiguously (non-string key, NaN,
            infinity, or another type), with ``details['where']`` pointing at it.
    """
    _check(obj, "$")
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
        "utf-8"
    )
