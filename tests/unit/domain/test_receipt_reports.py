"""A receipt report's JSON Schema (the API's request body) and its parser agree: what the parser accepts the
schema allows, and what the schema refuses the parser refuses too, field by field."""

from __future__ import annotations

import jsonschema
import pytest

from registry.domain.errors import InvalidInputError
from registry.domain.receipts import REPORT_SCHEMA, parse_report

PATH = {"model": "acme/llm", "version": 7, "where": "path", "path": "/srv/llm"}
BUCKET = {"model": "acme/llm", "version": 7, "where": "bucket", "bucket": "acme", "prefix": "llm/7", "held": False}
POD = {"model": "acme/llm", "image_digest": "sha256:" + "a" * 64, "where": "pod", "namespace": "team-a",
       "pod": "llm-0", "uid": "6f1c0a9e-0000-4000-8000-000000000001", "volume": "model", "pod_node": "gpu-7"}


def _report(*places: dict, **fields) -> dict:
    return {"program": "fetch", "node": "gpu-1", "places": list(places), **fields}


@pytest.mark.parametrize("doc", [_report(PATH), _report(BUCKET, scope="/cache", snapshot=True), _report(POD),
                                 _report(), {"program": "cluster-watch", "node": "n"}])
def test_what_the_parser_accepts_the_schema_allows(doc):
    parse_report(doc)
    jsonschema.validate(doc, REPORT_SCHEMA)


@pytest.mark.parametrize("doc", [
    _report({**PATH, "pod": 5}),  # a field the place's kind does not read is still of its type
    _report({**PATH, "bucket": ["acme"]}),
    _report({**PATH, "held": "yes"}),
    _report({**PATH, "version": 0}),
    _report({**PATH, "colour": "red"}),
    _report(PATH, extra=1),
    _report(PATH, snapshot=1),
    _report(PATH, scope=None),
    {**_report(PATH), "program": "admission"},
    _report("not a place"),
])
def test_what_the_schema_refuses_the_parser_refuses(doc):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, REPORT_SCHEMA)
    with pytest.raises(InvalidInputError):
        parse_report(doc)
