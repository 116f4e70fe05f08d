"""The ML-BOM's schema check (registry/domain/bom_schema.py): the same verdicts as cyclonedx-python-lib's own
strict validator, and ``uniqueItems`` with JSON Schema's equality, in linear time for a 20,000-file version."""

from __future__ import annotations

import json
import random

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from jsonschema.validators import Draft7Validator

from registry.domain.bom_schema import canonical_item, equality_key, first_error

UNIQUE = {"type": "array", "uniqueItems": True}


def _bom(files: int) -> dict:
    return {
        "bomFormat": "CycloneDX", "specVersion": "1.6", "version": 1,
        "components": [{
            "type": "machine-learning-model", "bom-ref": "model", "name": "tiny",
            "components": [{"type": "file", "bom-ref": f"file:{i}", "name": f"data/{i}.json",
                            "hashes": [{"alg": "SHA-256", "content": f"{i:064x}"}],
                            "properties": [{"name": "modelreg:size", "value": "8"}]} for i in range(files)],
        }],
    }


def _stock(document: dict) -> bool:
    return JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(document)) is None


def test_a_valid_bom_passes_both_checks():
    document = _bom(3)
    assert _stock(document) and first_error(document) is None


@pytest.mark.parametrize("spoil", [
    lambda d: d["components"][0]["components"].append(dict(d["components"][0]["components"][0])),
    lambda d: d["components"][0].update(unknown="field"),
    lambda d: d["components"][0]["components"][0]["hashes"][0].update(alg="SHA-257"),
    lambda d: d.update(specVersion=1.6),
], ids=["duplicate-component", "unknown-field", "bad-enum", "wrong-type"])
def test_a_spoiled_bom_fails_both_checks(spoil):
    document = _bom(3)
    spoil(document)
    assert not _stock(document)
    assert first_error(document) is not None


def test_a_bom_of_many_files_is_checked_and_a_duplicate_found_with_its_path_and_a_bounded_message():
    """The stock check compares every pair of file components (2 million pairs here, 200 million for the
    20,000 files of tests/integration/test_oci_store.py's version); this one hashes each once."""
    document = _bom(2000)
    assert first_error(document) is None
    document["components"][0]["components"].append(dict(document["components"][0]["components"][7]))
    error = first_error(document)
    assert error is not None and "non-unique" in error.message and len(error.message) < 300
    assert error.json_path == "$.components[0].components"


@pytest.mark.parametrize("items", [
    [1, 1.0], [True, 1], [False, 0], [None, False], [{"a": 1, "b": 2}, {"b": 2, "a": 1}],
    [{"a": [1, 2]}, {"a": [2, 1]}], [[1, [True]], [1.0, [1]]], ["1", 1], [{"a": 1}, {"a": 1.0}],
    [0.5, 0.5], [[], {}], [{"a": None}, {}], [[{"x": True}], [{"x": True}]],
    [10**17, 1e17], [10**17 + 1, 1e17], [-0.0, 0], [1e300, 10**300], [0.1, 0.30000000000000004 - 0.2],
    [{"a": "é"}, {"a": "\u00e9"}], [{"a": 1.5, "b": [2.0]}, {"b": [2], "a": 1.5}],
])
@pytest.mark.parametrize("key", [canonical_item, equality_key])
def test_unique_items_agrees_with_json_schema_equality(items, key):
    stock = Draft7Validator(UNIQUE).is_valid(items)
    ours = len({key(i) for i in items}) == len(items)
    assert ours == stock, items


def test_unique_items_agrees_on_random_documents():
    rng = random.Random(7)

    def value(depth: int):
        kind = rng.randrange(7 if depth < 3 else 4)
        return [lambda: rng.choice([True, False]), lambda: rng.choice([0, 1, 1.0, 2.5]), lambda: rng.choice("ab"),
                lambda: None, lambda: [value(depth + 1) for _ in range(rng.randrange(3))],
                lambda: {rng.choice("xy"): value(depth + 1) for _ in range(rng.randrange(3))},
                lambda: [value(depth + 1)]][kind]()

    for _ in range(500):
        items = [value(0) for _ in range(rng.randrange(2, 5))]
        stock = Draft7Validator(UNIQUE).is_valid(items)
        assert (len({canonical_item(i) for i in items}) == len(items)) == stock, items
        assert (len({equality_key(i) for i in items}) == len(items)) == stock, items


@pytest.mark.parametrize("spoil", [
    lambda files: files[1500]["hashes"][0].update(alg="SHA-257"),
    lambda files: files[1500]["properties"][0].update(value=8),
    lambda files: files[1500]["properties"].append({"name": "modelreg:size", "value": "8", "x": 1}),
    lambda files: files[1500].update(type="folder"),
], ids=["bad-enum", "number-for-string", "unknown-field", "bad-type"])
def test_a_bad_item_after_many_equal_or_alike_valid_ones_is_still_found(spoil):
    """Items that passed are remembered (the sizes repeat, so do the hashes' algorithms), and an item unlike
    any that passed, however close, is checked in full: the verdict is the stock validator's."""
    document = _bom(2000)
    spoil(document["components"][0]["components"])
    assert not _stock(document)
    error = first_error(document)
    assert error is not None and error.json_path.startswith("$.components[0].components[1500]"), error

