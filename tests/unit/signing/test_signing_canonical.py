"""Canonical JSON: sorted keys, no whitespace, UTF-8, and refusal of ambiguous values."""

from __future__ import annotations

import json

import pytest

from registry.domain.errors import InvalidInputError
from registry.signing.canonical import canonical_json


def test_sorted_compact_utf8():
    assert canonical_json({"b": [1, 2.5, None], "a": {"z": True, "y": "é"}}) == (
        '{"a":{"y":"é","z":true},"b":[1,2.5,null]}'.encode()
    )


def test_same_value_same_bytes_whatever_the_insertion_order():
    a = {"files": [{"path": "x", "sha256": "0" * 64}], "model": "m", "serial": 3}
    b = {"serial": 3, "model": "m", "files": [{"sha256": "0" * 64, "path": "x"}]}
    assert canonical_json(a) == canonical_json(b)
    assert json.loads(canonical_json(a)) == a


@pytest.mark.parametrize(
    "value, where",
    [
        ({1: "a"}, "$"),
        ({"a": float("nan")}, "$.a"),
        ({"a": [float("inf")]}, "$.a[0]"),
        ({"a": b"bytes"}, "$.a"),
        ({"a": {1, 2}}, "$.a"),
    ],
)
def test_ambiguous_values_are_refused_with_their_location(value, where):
    with pytest.raises(InvalidInputError) as err:
        canonical_json(value)
    assert err.value.details["where"] == where
