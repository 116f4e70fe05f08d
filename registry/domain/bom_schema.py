"""The strict CycloneDX 1.6 JSON schema check of an ML-BOM, in time linear in the number of components.

``cyclonedx-python-lib``'s own validator (``JsonStrictValidator``) checks the schema's ``uniqueItems`` with
``jsonschema``'s generic test, which compares every pair of items when they are objects: for a version of
20,000 files (one component each) that is 200 million comparisons, minutes of CPU per BOM. Here the same
schema files, the same draft and the same format checker are used, with one keyword replaced:
``uniqueItems`` hashes a canonical form of each item, in which two items are equal exactly when JSON Schema
says they are (``1`` equals ``1.0``, ``true`` does not equal ``1``, object keys are unordered):
:func:`equality_key`, written by the C JSON encoder, with :func:`canonical_item` as its plain statement.

Two more keywords are replaced to make the check of a big BOM several times cheaper, without changing a
verdict (``jsonschema`` spends most of its time on bookkeeping per node):

- ``$ref`` resolves each reference once per validation, not once per node it applies to (a reference's
  target depends only on it and the base URI it is read under; draft 7 has no dynamic references);
- ``items`` validates an array item only when no equal item (by a type-strict form: ``1`` and ``1.0`` apart)
  passed the same subschema earlier in the same document: a verdict depends only on the instance and the
  subschema, and the BOM's ``{"name": "modelreg:size", "value": "8"}`` properties repeat by the thousand.

Usage::

    error = first_error(document)   # None when the document is valid
"""

from __future__ import annotations

import contextvars
import functools
import json
from collections.abc import Iterator
from typing import Any

from cyclonedx.schema import SchemaVersion, _res  # _res: the library's index of its bundled schema files
from jsonschema import ValidationError
from jsonschema.exceptions import _WrappedReferencingError
from jsonschema.protocols import Validator
from jsonschema.validators import Draft7Validator, extend
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT7

_SCHEMA_PREFIX = "http://cyclonedx.org/schema/"


# What one validation learned: the resolved references and the (subschema, item) pairs that passed.
_run: contextvars.ContextVar[tuple[dict[Any, Any], set[Any]]] = contextvars.ContextVar("bom_schema_run")


def first_error(document: Any) -> ValidationError | None:
    """The first violation of the strict CycloneDX 1.6 schema in ``document`` (parsed JSON), or None."""
    token = _run.set(({}, set()))
    try:
        return next(_validator().iter_errors(document), None)
    finally:
        _run.reset(token)


def canonical_item(value: Any) -> Any:
    """A hashable form of a JSON value in which two values are equal exactly when JSON Schema's equality
    says they are: numbers by value (``1 == 1.0``), booleans apart from numbers, objects by their members."""
    # Strings and objects first: they are most of a BOM. A bool is an int to Python, so it comes before int.
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, dict):
        return ("object", frozenset((k, canonical_item(v)) for k, v in value.items()))
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("number", value)  # Python's 1 == 1.0 and hash(1) == hash(1.0), as JSON Schema wants
    if value is None:
        return ("null",)
    if isinstance(value, (list, tuple)):
        return ("array", tuple(canonical_item(v) for v in value))
    raise TypeError(f"not a JSON value: {type(value).__name__}")


class _NotFinite(Exception):
    pass


def _not_finite(constant: str) -> Any:
    raise _NotFinite(constant)


def _number(text: str) -> int | float:
    value = float(text)
    return int(value) if value.is_integer() else value


def equality_key(value: Any) -> Any:
    """:func:`canonical_item`'s equality, several times faster: the value written by the C encoder (keys sorted),
    read back with every integral float as the int it equals (``1.0`` -> ``1``, exact: ``int(1e17)`` equals
    ``1e17`` as Python and JSON Schema compare them) and written again. A value holding NaN or an infinity
    (which equal nothing) falls back to :func:`canonical_item`."""
    written = json.dumps(value, sort_keys=True)
    try:
        return json.dumps(json.loads(written, parse_float=_number, parse_constant=_not_finite), sort_keys=True)
    except _NotFinite:
        return canonical_item(value)


def _unique_items(validator: Validator, unique: bool, instance: Any,
                  schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = equality_key(item)
        if key in seen:
            yield ValidationError(f"{instance!r:.200} has non-unique elements")
            return
        seen.add(key)


def _strict_item(value: Any) -> str:
    """A form of a JSON value that tells every two values of different Python types apart (``1`` and ``1.0``
    too, unlike :func:`canonical_item`): equal forms are the same instance to any keyword. The C encoder
    writes it, several times faster than walking the value in Python."""
    return json.dumps(value, sort_keys=True, allow_nan=True)


def _ref(validator: Validator, ref: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    resolver = validator._resolver  # type: ignore[attr-defined]  # jsonschema's resolver of this subschema
    resolved_refs = _run.get()[0]
    key = (ref, resolver._base_uri)
    resolved = resolved_refs.get(key)
    if resolved is None:
        try:
            resolved = resolved_refs[key] = resolver.lookup(ref)
        except Unresolvable as err:
            raise _WrappedReferencingError(err) from err
    yield from validator.descend(instance, resolved.contents, resolver=resolved.resolver)


def _items(validator: Validator, items: Any, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "array"):
        return
    if validator.is_type(items, "array"):  # a tuple schema: no CycloneDX array has one, no memo
        for (index, item), subschema in zip(enumerate(instance), items):
            yield from validator.descend(item, subschema, path=index, schema_path=index)
        return
    passed = _run.get()[1]
    for index, item in enumerate(instance):
        key = (id(items), validator._resolver._base_uri, _strict_item(item))  # type: ignore[attr-defined]
        if key in passed:
            continue
        failed = False
        for error in validator.descend(item, items, path=index):
            failed = True
            yield error
        if not failed:
            passed.add(key)


_LinearDraft7 = extend(Draft7Validator, validators={"uniqueItems": _unique_items, "$ref": _ref, "items": _items})


@functools.cache
def _validator() -> Validator:
    schema, registry = schema_and_registry()
    return _LinearDraft7(schema, registry=registry, format_checker=Draft7Validator.FORMAT_CHECKER)


@functools.cache
def schema_and_registry() -> tuple[dict[str, Any], Registry]:
    """The strict 1.6 schema and the registry of the three schemas it refers to, read once per process."""
    # The schema files and their registry are those cyclonedx-python-lib's JsonStrictValidator builds (the
    # strict 1.6 document and the three it refers to).
    with open(_res.BOM_JSON_STRICT[SchemaVersion.V1_6]) as bom, open(_res.SPDX_JSON) as spdx, open(_res.JSF) as jsf, \
            open(_res.CRYPTOGRAPHY_DEFS) as cdefs:
        registry = Registry().with_resources([
            (f"{_SCHEMA_PREFIX}spdx.SNAPSHOT.schema.json", DRAFT7.create_resource(json.load(spdx))),
            (f"{_SCHEMA_PREFIX}cryptography-defs.SNAPSHOT.schema.json", DRAFT7.create_resource(json.load(cdefs))),
            (f"{_SCHEMA_PREFIX}jsf-0.82.SNAPSHOT.schema.json", DRAFT7.create_resource(json.load(jsf))),
        ])
        return json.load(bom), registry
