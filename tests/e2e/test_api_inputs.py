"""Edge input on the HTTP API: free text, NUL characters, presigned URLs and ranges (SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt
import hashlib
import typing

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, TypeAdapter, ValidationError
from sqlalchemy import func, select

from api.app import create_app
from registry.auth import issue_token
from registry.db.models import ApiToken, Principal, RoleBinding, Tenant, Version

PROBLEM = "https://modelreg.dev/problems/"

# One of each kind the free-text check refuses: C0, DEL, C1, and every bidirectional formatting character.
REFUSED = ["\x00", "\t", "\n", "\x1b", "\x7f", "\x85", "\x9f", "\u061c", "\u200e", "\u200f",
           "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]


def _token(container, name: str, *, admin: bool = False, submitter_in: str | None = None) -> str:
    with container.session_factory() as session:
        principal = Principal(name=name, is_admin=admin)
        session.add(principal)
        session.flush()
        if submitter_in:
            tenant = session.scalar(select(Tenant).where(Tenant.name == submitter_in))
            if tenant is None:
                tenant = Tenant(name=submitter_in)
                session.add(tenant)
                session.flush()
            session.add(RoleBinding(principal_id=principal.id, tenant_id=tenant.id, role="submitter", capacity=""))
        issued = issue_token(session, principal)
        session.commit()
        return issued.token


@pytest.fixture
def api(container):
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {_token(container, 'root', admin=True, submitter_in='acme')}"
        yield client


def _count(container, model) -> int:
    with container.session_factory() as session:
        return session.scalar(select(func.count()).select_from(model))


def _assert_invalid_text(r, field: str) -> None:
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["type"] == PROBLEM + "invalid-text", body
    assert any(e["field"].startswith(field) for e in body["errors"]), body


def _assert_refused_name(r, field: str) -> None:
    """Names, roles and capacities have a pattern, which a NUL or a surrogate fails first (invalid-input)."""
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["type"] in {PROBLEM + "invalid-input", PROBLEM + "invalid-text"}, body
    assert any(e["field"].startswith(field) for e in body["errors"]), body


def _upload(api, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    assert api.put(f"/v1/blobs/sha256/{digest}", params={"tenant": "acme"}, content=data).status_code == 201
    return {"path": "weights.bin", "size": len(data), "sha256": digest}


@pytest.mark.parametrize("char", REFUSED, ids=[f"U+{ord(c):04X}" for c in REFUSED])
def test_free_text_fields_refuse_control_and_bidi_characters(api, container, tmp_path, char):
    tokens = _count(container, ApiToken)
    r = api.post("/v1/principals/root/tokens", json={"description": f"ci{char}key"})
    _assert_invalid_text(r, "description")
    assert _count(container, ApiToken) == tokens

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    for body, field in [
        ({"source": str(tmp_path / "m"), "revision": f"main{char}"}, "revision"),
        ({"source": str(tmp_path / "m"), "include": ["*.json", f"{char}*"]}, "include"),
        ({"source": str(tmp_path / "m"), "exclude": [f"*{char}"]}, "exclude"),
        ({"source": f"upload:my{char}model", "files": [_upload(api, b"weights")]}, "source"),
    ]:
        _assert_invalid_text(api.post("/v1/models/acme/m/versions", json=body), field)
    assert _count(container, Version) == 0


# Issue 18: characters that show as nothing or as a break; a label holding one reads as another label.
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u180e", "\u2028", "\u2029",
             "\u00a0", "\u2003", "\u3000", "\U000e0041"]


@pytest.mark.parametrize("char", INVISIBLE, ids=[f"U+{ord(c):04X}" for c in INVISIBLE])
def test_labels_refuse_invisible_and_separator_characters(api, container, tmp_path, char):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    r = api.post("/v1/models/acme/m/versions", json={"source": str(tmp_path / "m"), "revision": f"main{char}"})
    _assert_invalid_text(r, "revision")
    assert f"U+{ord(char):04X}" in r.text
    r = api.post("/v1/models/acme/m/versions", json={"source": f"upload:tiny{char}", "files": [_upload(api, b"w")]})
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", r.text
    assert (r.json()["type"], r.json()["field"]) == (PROBLEM + "invalid-text", "label")
    assert f"U+{ord(char):04X}" in r.json()["detail"]
    assert _count(container, Version) == 0


def test_a_label_may_hold_ascii_spaces_and_other_scripts(api):
    r = api.post("/v1/models/acme/m/versions", json={"source": "upload:my model été 模型",
                                                     "files": [_upload(api, b"w")]})
    assert r.status_code == 202, r.text


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
    tokens = _count(container, ApiToken)
    r = api.post("/v1/principals/root/tokens", json={"expires_in_days": value})
    assert r.status_code == 422 and r.json()["type"] == PROBLEM + "invalid-input", r.text
    assert _count(container, ApiToken) == tokens
    file = {**_upload(api, b"w"), "size": value}
    r = api.post("/v1/models/acme/m/versions", json={"source": "upload:x", "files": [file]})
    assert r.status_code == 422 and r.json()["type"] == PROBLEM + "invalid-input", r.text
    assert _count(container, Version) == 0


def test_free_text_fields_have_length_caps(api, container, tmp_path):
    from registry.domain.text import MAX_DESCRIPTION_LENGTH, MAX_LABEL_LENGTH, MAX_REVISION_LENGTH
    from registry.sources.filters import MAX_GLOB_LENGTH, MAX_GLOBS

    _assert_invalid_text(api.post("/v1/principals/root/tokens",
                                  json={"description": "d" * (MAX_DESCRIPTION_LENGTH + 1)}), "description")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    source = str(tmp_path / "m")
    for body, field in [
        ({"source": source, "revision": "r" * (MAX_REVISION_LENGTH + 1)}, "revision"),
        ({"source": source, "include": ["g" * (MAX_GLOB_LENGTH + 1)]}, "include"),
    ]:
        _assert_invalid_text(api.post("/v1/models/acme/m/versions", json=body), field)
    # The label is what follows "upload:"; it used to be cut silently at 512 characters.
    r = api.post("/v1/models/acme/m/versions",
                 json={"source": "upload:" + "l" * (MAX_LABEL_LENGTH + 1), "files": [_upload(api, b"w")]})
    assert r.status_code == 422 and r.json()["type"] == PROBLEM + "invalid-text", r.text
    assert r.json()["field"] == "label"
    r = api.post("/v1/models/acme/m/versions", json={"source": source, "include": ["*"] * (MAX_GLOBS + 1)})
    assert r.status_code == 422, r.text
    assert _count(container, Version) == 0
    # At the caps, everything is accepted.
    r = api.post("/v1/models/acme/m/versions",
                 json={"source": "upload:" + "l" * MAX_LABEL_LENGTH, "files": [_upload(api, b"w")]})
    assert r.status_code == 202, r.text
    r = api.post("/v1/principals/root/tokens", json={"description": "d" * MAX_DESCRIPTION_LENGTH})
    assert r.status_code == 201, r.text


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


def test_a_name_with_a_final_newline_is_refused(api, container, tmp_path):
    """A pattern ending in "$" also matched "m\\n": such a model was created."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    r = api.post("/v1/models/acme/m%0A/versions", json={"source": str(tmp_path / "m")})
    assert r.status_code == 422 and r.json()["type"] == PROBLEM + "invalid-input", r.text
    assert _count(container, Version) == 0


def test_a_nul_in_any_body_field_is_422(api, container):
    """The names and the role of a grant are looked up in the database: a NUL must not reach it."""
    for body in ({"tenant": "ac\x00me", "role": "submitter"}, {"tenant": "acme", "role": "sub\x00mitter"},
                 {"tenant": "acme", "role": "approver", "capacity": "sec\x00urity"}):
        _assert_refused_name(api.post("/v1/principals/root/roles", json=body), "")
    _assert_refused_name(api.post("/v1/tenants", json={"name": "t\x00"}), "name")
    _assert_refused_name(api.post("/v1/principals", json={"name": "p\x00"}), "name")
    r = api.post("/v1/models/acme/m/versions",
                 json={"source": "upload:x", "files": [{"path": "a\x00", "size": 1, "sha256": "0" * 64}]})
    _assert_invalid_text(r, "files.0.path")
    r = api.post("/v1/models/acme/m/versions", json={"source": "hf://org/repo", "hf_endpoint": "http://h\x00"})
    _assert_invalid_text(r, "hf_endpoint")
    # A JSON string can carry a lone surrogate, which no UTF-8 database (or response) can encode.
    r = api.post("/v1/principals/root/roles", content=b'{"tenant": "ac\\ud800me", "role": "submitter"}',
                 headers={"Content-Type": "application/json"})
    _assert_refused_name(r, "tenant")


@pytest.fixture
def blob_url(api, container):
    """A stored blob and the path and query of a good presigned URL for it."""
    from urllib.parse import urlsplit

    data = bytes(range(256)) * 4
    _upload(api, data)
    url = urlsplit(container.blob_store.presign_get(hashlib.sha256(data).hexdigest(), dt.timedelta(minutes=5)))
    return f"{url.path}?{url.query}", data


def test_presigned_urls_with_odd_parameters_are_403(api, blob_url):
    from urllib.parse import parse_qs, urlencode

    url, data = blob_url
    path, query = url.split("?")
    good = {k: v[0] for k, v in parse_qs(query).items()}
    assert api.get(url).content == data
    for bad in ({"signature": "é" * 64}, {"signature": "\u0660" * 64}, {"signature": good["signature"].upper()},
                {"signature": good["signature"] + "0"}, {"expires": "9" * 5000}, {"expires": "9" * 4000},
                {"expires": "+" + good["expires"]}, {"expires": good["expires"] + "_0"}, {"expires": "-1"}):
        r = api.get(f"{path}?{urlencode({**good, **bad})}")
        assert r.status_code == 403, (bad, r.text)
        assert r.json()["type"] == PROBLEM + "bad-presigned-url"


@pytest.mark.parametrize("header", [
    "bytes=" + "9" * 5000 + "-", "bytes=0-" + "9" * 5000, "bytes=-" + "9" * 5000,
    "bytes=" + "1" * 20 + "-", "bytes=0-1,2-3", "bytes=5-2", "items=0-1", "bytes=-",
])
def test_unsatisfiable_or_unsupported_ranges_are_416(api, blob_url, header):
    url, _ = blob_url
    r = api.get(url, headers={"Range": header})
    assert r.status_code == 416, r.text
    assert r.json()["type"] == PROBLEM + "range-not-satisfiable"


def test_ranges_up_to_nineteen_digits_still_work(api, blob_url):
    url, data = blob_url
    r = api.get(url, headers={"Range": "bytes=10-" + "9" * 19})
    assert r.status_code == 206 and r.content == data[10:]
    assert api.get(url, headers={"Range": "bytes=-" + "9" * 19}).content == data


def _nul_sample(annotation):
    """A value of ``annotation`` with a NUL in its string, or None when it holds no string."""
    if annotation is str:
        return "\x00"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _nul_sample(args[0])
    if origin is list:
        inner = _nul_sample(args[0])
        return None if inner is None else [inner]
    for arg in args:  # a union such as `str | None`
        if (inner := _nul_sample(arg)) is not None:
            return inner
    return None


def _models_in(annotation):
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _routes(routes):
    for route in routes:
        # FastAPI keeps an included router's routes behind it.
        if hasattr(route, "original_router"):
            yield from _routes(route.original_router.routes)
        else:
            yield route


def _body_models(container):
    todo = [model for route in _routes(create_app(container).routes)
            for param in getattr(getattr(route, "dependant", None), "body_params", [])
            for model in _models_in(param.field_info.annotation)]
    seen = set()
    while todo:
        model = todo.pop()
        if model not in seen:
            seen.add(model)
            todo.extend(m for info in model.model_fields.values() for m in _models_in(info.annotation))
    return seen


def test_every_string_in_every_request_body_refuses_a_nul(container):
    """New body fields (comments, reasons...) are covered too: a NUL never reaches PostgreSQL from a body."""
    checked = []
    for model in _body_models(container):
        for name, info in model.model_fields.items():
            sample = _nul_sample(info.annotation)
            if sample is not None:
                with pytest.raises(ValidationError):
                    TypeAdapter(typing.Annotated[info.annotation, info]).validate_python(sample)
                checked.append(f"{model.__name__}.{name}")
    assert {"VersionCreate.revision", "VersionCreate.include", "UploadedFile.path", "RoleGrant.tenant",
            "TokenCreate.description"} <= set(checked)


def _int_annotation(annotation) -> bool:
    if annotation is int:
        return True
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _int_annotation(args[0])
    return any(_int_annotation(arg) for arg in args if arg is not type(None)) if origin is not list else False


def test_every_integer_in_every_request_body_is_strict(container):
    """New body fields are covered too: true, "1" and 1.0 are never an integer of a body (issue 18)."""
    checked = []
    for model in _body_models(container):
        for name, info in model.model_fields.items():
            if _int_annotation(info.annotation):
                for value in (True, "1", 1.0):
                    with pytest.raises(ValidationError):
                        TypeAdapter(typing.Annotated[info.annotation, info]).validate_python(value)
                checked.append(f"{model.__name__}.{name}")
    assert {"AliasUpdate.version", "CanaryCreate.version", "UploadedFile.size", "TokenCreate.expires_in_days",
            "QuotaUpdate.bytes", "RetentionUpdate.keep_last"} <= set(checked)
