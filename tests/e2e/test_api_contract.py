"""What the OpenAPI document promises, and the edges of the inputs it describes, on both databases.

Integers past a column's range are refused by the parameter's declared bounds (a 422 problem),
never a 500 from the database; the bound just inside the range reaches the service (404).
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.params import INT32_MAX, INT64_MAX
from api.problems import MEDIA_TYPE, STATUS_BY_ERROR, status_for
from registry.auth import issue_token
from registry.bootstrap import bootstrap
from registry.db.models import Principal, Tenant
from registry.domain import errors
from registry.settings import Settings


@pytest.fixture
def api(container):
    with container.session_factory() as session:
        session.add(Tenant(name="acme"))
        admin = Principal(name="root", is_admin=True)
        session.add(admin)
        session.flush()
        token = issue_token(session, admin).token
        session.commit()
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        yield client


VERSION_ROUTES = ["/v1/models/acme/m/versions/{}", "/v1/models/acme/m/versions/{}/signature",
                  "/v1/models/acme/m/versions/{}/scans", "/v1/models/acme/m/versions/{}/chunks/" + "ab" * 32]


@pytest.mark.parametrize("route", VERSION_ROUTES)
@pytest.mark.parametrize("number, status", [(INT32_MAX, 404), (INT32_MAX + 1, 422), (INT64_MAX + 1, 422),
                                            (0, 422)])
def test_version_numbers_past_an_integer_column_are_refused(api, route, number, status):
    r = api.get(route.format(number))
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == MEDIA_TYPE
    if status == 404:
        assert r.json()["type"].endswith("/model-not-found")
    else:
        assert r.json()["errors"][0]["field"] == "path.number"


@pytest.mark.parametrize("token_id, status", [(INT64_MAX, 404), (INT64_MAX + 1, 422), (10**30, 422)])
def test_token_ids_past_a_bigint_are_refused(api, token_id, status):
    r = api.delete(f"/v1/tokens/{token_id}")
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == MEDIA_TYPE


@pytest.mark.parametrize("after, status", [(INT64_MAX, 200), (INT64_MAX + 1, 422)])
def test_audit_after_past_a_bigint_is_refused(api, after, status):
    r = api.get("/v1/audit/events", params={"after": after})
    assert r.status_code == status, r.text
    if status == 200:
        assert r.json() == []


def test_uploaded_file_sizes_past_a_bigint_are_refused(api):
    r = api.post("/v1/models/acme/m/versions", json={
        "source": "upload:x", "files": [{"path": "a.bin", "size": INT64_MAX + 1, "sha256": "a" * 64}]})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "files.0.size"


# --- the OpenAPI document --------------------------------------------------------------------


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    container = bootstrap(Settings(data_dir=tmp_path_factory.mktemp("spec")))
    try:
        return create_app(container).openapi()
    finally:
        container.dispose()


def _operations(spec):
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            yield f"{method.upper()} {path}", operation


def test_every_error_status_is_a_problem(spec):
    assert spec["components"]["schemas"]["Problem"]["required"] == ["type", "title", "status", "detail"]
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    for label, operation in _operations(spec):
        errors_ = {status: r for status, r in operation["responses"].items() if int(status) >= 400}
        problem = {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
        for status, response in errors_.items():
            assert response["content"] == problem, (label, status)
        if operation.get("parameters") or "requestBody" in operation:
            assert "422" in errors_, label
        if operation.get("security"):
            assert {"401", "403"} <= set(errors_) or label == "GET /v1/whoami", label
            assert errors_["401"]["headers"]["WWW-Authenticate"], label


@pytest.mark.parametrize("label, statuses", [
    ("POST /v1/tenants", {"401", "403", "409", "422"}),
    ("GET /v1/models/{tenant}/{name}/versions/{number}", {"401", "403", "404", "422"}),
    # 409: an adapter's base that cannot be bound (adapter-base-unusable).
    ("POST /v1/models/{tenant}/{name}/versions", {"401", "403", "404", "409", "413", "422"}),
    ("PUT /v1/blobs/sha256/{digest}", {"401", "403", "404", "413", "422", "502"}),
    ("GET /v1/blobs/sha256/{digest}", {"403", "404", "416", "422", "502"}),
    ("GET /readyz", {"503"}),
    ("GET /v1/audit/verify", {"401", "403", "422"}),
    ("GET /v1/whoami", {"401"}),
    ("GET /v1/models/{tenant}/{name}/versions/{number}/chunks/{digest}", {"401", "403", "404", "409", "422"}),
])
def test_routes_state_the_statuses_their_errors_map_to(spec, label, statuses):
    operation = dict(_operations(spec))[label]
    assert {s for s in operation["responses"] if int(s) >= 400} == statuses


def test_blob_bytes_are_documented_as_bytes(spec):
    operations = dict(_operations(spec))
    get = operations["GET /v1/blobs/sha256/{digest}"]["responses"]
    assert set(get["200"]["content"]) == set(get["206"]["content"]) == {"application/octet-stream"}
    assert "content" not in operations["HEAD /v1/blobs/sha256/{digest}"]["responses"]["200"]
    chunk_list = operations["GET /v1/models/{tenant}/{name}/versions/{number}/chunks/{digest}"]["responses"]
    assert set(chunk_list["200"]["content"]) == {"application/octet-stream"}


def _parameter(spec, label: str, name: str) -> dict:
    operation = dict(_operations(spec))[label]
    [parameter] = [p for p in operation["parameters"] if p["name"] == name]
    return parameter["schema"]


def test_path_and_query_parameters_state_their_constraints(spec):
    digest = _parameter(spec, "GET /v1/blobs/sha256/{digest}", "digest")
    assert digest["pattern"] == "^[0-9a-f]{64}$"
    for label in ("GET /v1/models/{tenant}/{name}/versions", "POST /v1/models/{tenant}/{name}/versions"):
        for name in ("tenant", "name"):
            assert _parameter(spec, label, name)["pattern"] == "^[a-z0-9][a-z0-9._-]{0,62}$"
    assert _parameter(spec, "GET /v1/principals/{name}", "name")["pattern"] == "^[a-z0-9][a-z0-9._-]{0,62}$"
    number = _parameter(spec, "GET /v1/models/{tenant}/{name}/versions/{number}", "number")
    assert (number["minimum"], number["maximum"]) == (1, INT32_MAX)
    token = _parameter(spec, "DELETE /v1/tokens/{token_id}", "token_id")
    assert (token["minimum"], token["maximum"]) == (1, INT64_MAX)
    after = _parameter(spec, "GET /v1/audit/events", "after")
    assert (after["minimum"], after["maximum"]) == (0, INT64_MAX)
    assert spec["components"]["securitySchemes"]["token"] == {
        "type": "http", "scheme": "bearer",
        "description": "A modelreg token (`mr_...`), or a pod's projected service-account token"}
    unbind = {name: _parameter(spec, "DELETE /v1/node-bindings", name)
              for name in ("issuer", "namespace", "service_account", "tenant")}
    assert [unbind[n]["maxLength"] for n in ("issuer", "namespace", "service_account")] == [512, 63, 253]
    assert unbind["tenant"]["pattern"] == "^[a-z0-9][a-z0-9._-]{0,62}$"


# --- statuses ----------------------------------------------------------------------------------


def test_every_error_branch_has_its_status():
    expected = {errors.ServiceUnavailableError: 503, errors.UpstreamError: 502, errors.NotFoundError: 404,
                errors.ConflictError: 409, errors.InvalidInputError: 422, errors.IntegrityError: 422,
                errors.LimitExceededError: 413, errors.RangeNotSatisfiableError: 416,
                errors.AuthenticationError: 401, errors.PermissionDeniedError: 403,
                errors.PolicyViolationError: 403, errors.UnstorableDataError: 422}
    for cls, status in expected.items():
        assert status_for(cls.__new__(cls)) == status, cls.__name__
    assert {cls for cls, _ in STATUS_BY_ERROR} >= set(expected) - {errors.UnstorableDataError}


def test_an_unreachable_database_is_503(tmp_path):
    container = bootstrap(Settings(database_url="postgresql://nobody@127.0.0.1:1/none", data_dir=tmp_path))
    try:
        with TestClient(create_app(container), raise_server_exceptions=False) as client:
            r = client.get("/readyz")
    finally:
        container.dispose()
    assert r.status_code == 503 and r.headers["content-type"] == MEDIA_TYPE
    assert r.json()["type"].endswith("/unavailable") and r.json()["component"] == "database"


def test_an_unmigrated_database_is_not_ready(tmp_path):
    """A replica that starts before the migration Job finished is kept out of the Service."""
    container = bootstrap(Settings(database_url=f"sqlite:///{tmp_path / 'empty.db'}", data_dir=tmp_path,
                                   blob_store_url=(tmp_path / "blobs").as_uri()))
    try:
        with TestClient(create_app(container), raise_server_exceptions=False) as client:
            r = client.get("/readyz")
            assert r.status_code == 503 and r.json()["component"] == "database"
            assert "modelreg migrate" in r.json()["detail"]
            from registry.db import migrate

            migrate.upgrade(container.engine)
            assert client.get("/readyz").json()["status"] == "ready"
    finally:
        container.dispose()


def test_a_method_the_path_does_not_take_is_405_with_every_allowed_method(api):
    r = api.request("OPTIONS", "/v1/tenants")
    assert r.status_code == 405 and r.headers["content-type"] == MEDIA_TYPE
    assert r.headers["allow"] == "GET, HEAD, POST"
    r = api.request("TRACE", "/v1/models/acme/m/versions")
    assert r.headers["allow"] == "GET, HEAD, POST"


def test_a_body_that_is_not_text_is_422(api):
    r = api.post("/v1/tenants", content=b"\xff\xfe{", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.headers["content-type"] == MEDIA_TYPE
    assert r.json()["type"].endswith("/invalid-input")


def _refs(node, where="#"):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield where, value
            else:
                yield from _refs(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _refs(value, f"{where}/{i}")


def _resolve(spec, ref: str):
    assert ref.startswith("#/"), ref
    node = spec
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, dict) and part in node, ref
        node = node[part]
    return node


def test_every_ref_in_the_document_resolves(spec):
    """Issue 18: paths-info's body named #/components/schemas/HfPathsInfoRequest, which was not there."""
    refs = list(_refs(spec))
    assert len(refs) > 50
    unresolved = []
    for where, ref in refs:
        try:
            _resolve(spec, ref)
        except AssertionError:
            unresolved.append(f"{where}: {ref}")
    assert unresolved == []
    links = [link["operationRef"] for _, link in _links(spec) if "operationRef" in link]
    assert links and all(_resolve(spec, ref) for ref in links)


def _links(spec):
    for name, operation in _operations(spec):
        for status, response in operation.get("responses", {}).items():
            for link in response.get("links", {}).values():
                yield f"{name} {status}", link


def test_the_paths_info_body_states_what_the_server_takes(spec):
    from registry.domain.files import MAX_PATH_LENGTH
    from registry.services.hf import MAX_PATHS

    content = spec["paths"]["/hf/api/models/{tenant}/{name}/paths-info/{revision}"]["post"]["requestBody"]["content"]
    for media_type, required in (("application/json", ["paths"]), ("application/x-www-form-urlencoded", [])):
        schema = content[media_type]["schema"]
        assert schema["properties"]["paths"]["maxItems"] == MAX_PATHS
        assert schema["properties"]["paths"]["items"]["maxLength"] == MAX_PATH_LENGTH
        assert schema["properties"]["expand"]["type"] == "boolean"
        assert schema["required"] == required


@pytest.mark.parametrize(("body", "valid"), [
    ({"tenant": "acme", "role": "approver"}, False),
    ({"tenant": "acme", "role": "approver", "capacity": ""}, False),
    ({"tenant": "acme", "role": "approver", "capacity": "security"}, True),
    ({"tenant": "acme", "role": "submitter"}, True),
])
def test_a_role_grant_is_valid_by_the_document_exactly_when_the_server_takes_it(api, spec, body, valid):
    """Issue 18 (schemathesis ST202): a grant the document called valid was refused with a 422."""
    import jsonschema

    schema = jsonschema.validators.Draft202012Validator(
        {"$ref": "#/components/schemas/RoleGrant", "components": spec["components"]})
    assert schema.is_valid(body) is valid
    r = api.post("/v1/principals", json={"name": "pat"})
    assert r.status_code in (201, 409), r.text
    r = api.post("/v1/principals/pat/roles", json=body)
    assert r.status_code == (201 if valid else 422), r.text
    if valid:
        # The document's link from the grant revokes it with the same body.
        assert api.request("DELETE", "/v1/principals/pat/roles", json=body).status_code == 204
