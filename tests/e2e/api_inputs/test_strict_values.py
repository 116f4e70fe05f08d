"""Values the HTTP API takes only as they are: integers that are JSON integers (not true, "1" or 1.0), and no NUL
in a path, a query or any body field (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from registry.db.models import ApiToken, Version
from tests.support.api_inputs import (
    PROBLEM,
    assert_invalid_text,
    assert_refused_name,
    count_rows,
    upload_weights,
)

# Issue 18: lax pydantic read each of these as 1; a version number is a JSON integer.
NOT_INTEGERS = [True, "1", 1.0]


@pytest.mark.parametrize("value", NOT_INTEGERS, ids=repr)
def test_alias_bodies_take_only_integers(api, value):
    for body in ({"version": value}, {"version": 1, "canary": {"version": value, "tenants": ["acme"]}}):
        r = api.put("/v1/models/acme/m/aliases/prod", json=body)
        assert r.status_code == 422 and r.json()["type"] == PROBLEM + "invalid-input", r.text
        assert any(e["field"].endswith("version") for e in r.json()["errors"]), r.text


@pytest.mark.parametrize("value", [True, "1", 1.0], ids=repr)
def test_other_integers_in_bodies_take_only_integers(api, container, value):
    tokens = count_rows(container, ApiToken)
    r = api.post("/v1/principals/root/tokens", json={"expires_in_days": value})
    assert r.status_code == 422 and r.json()["type"] == PROBLEM + "invalid-input", r.text
    assert count_rows(container, ApiToken) == tokens
    file = {**upload_weights(api, b"w"), "size": value}
    r = api.post("/v1/models/acme/m/versions", json={"source": "upload:x", "files": [file]})
    assert r.status_code == 422 and r.json()["type"] == PROBLEM + "invalid-input", r.text
    assert count_rows(container, Version) == 0


@pytest.mark.parametrize(
    ("method", "url", "kwargs"),
    [
        ("GET", "/v1/principals/ro%00ot", {}),
        ("POST", "/v1/principals/ro%00ot/tokens", {"json": {}}),
        ("GET", "/v1/models/ac%00me/m/versions", {}),
        ("GET", "/v1/models/acme/m%00/versions/1", {}),
        ("GET", "/v1/audit/events?tenant=ac%00me", {}),
        ("PUT", "/v1/blobs/sha256/" + "0" * 64 + "?tenant=ac%00me", {"content": b"x"}),
        ("GET", "/v1/blobs/sha256/" + "0" * 64 + "?expires=1&signature=%00", {}),
    ],
)
def test_a_nul_in_a_path_or_query_is_422_before_any_route(api, method, url, kwargs):
    r = api.request(method, url, **kwargs)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"] == PROBLEM + "invalid-text"


def test_a_nul_in_any_body_field_is_422(api, container):
    """The names and the role of a grant are looked up in the database: a NUL must not reach it."""
    for body in ({"tenant": "ac\x00me", "role": "submitter"}, {"tenant": "acme", "role": "sub\x00mitter"},
                 {"tenant": "acme", "role": "approver", "capacity": "sec\x00urity"}):
        assert_refused_name(api.post("/v1/principals/root/roles", json=body), "")
    assert_refused_name(api.post("/v1/tenants", json={"name": "t\x00"}), "name")
    assert_refused_name(api.post("/v1/principals", json={"name": "p\x00"}), "name")
    r = api.post("/v1/models/acme/m/versions",
                 json={"source": "upload:x", "files": [{"path": "a\x00", "size": 1, "sha256": "0" * 64}]})
    assert_invalid_text(r, "files.0.path")
    r = api.post("/v1/models/acme/m/versions", json={"source": "hf://org/repo", "hf_endpoint": "http://h\x00"})
    assert_invalid_text(r, "hf_endpoint")
    # A JSON string can carry a lone surrogate, which no UTF-8 database (or response) can encode.
    r = api.post("/v1/principals/root/roles", content=b'{"tenant": "ac\\ud800me", "role": "submitter"}',
                 headers={"Content-Type": "application/json"})
    assert_refused_name(r, "tenant")
