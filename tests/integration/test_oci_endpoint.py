"""The read-only OCI endpoint (``/v2``), driven by oras-py and plain HTTP against a live modelreg.

Tenant ``acme`` holds ``llm``: version 1 approved and promoted to ``prod``, version 2 approved and then
revoked, version 3 awaiting approval. Tenant ``other`` holds ``secret``, approved. uvicorn serves the app
on loopback; oras-py pulls through the 401 -> ``/v2/token`` -> Bearer dance, with a modelreg token as the
Basic password. Everything runs on SQLite and PostgreSQL; the pulls also on the local store and S3.
"""

from __future__ import annotations

import base64
import datetime as dt
import http.client
import json

import httpx
import pytest

from registry.auth import token_id_of
from registry.clock import ManualClock
from registry.db.models import Principal, RoleBinding, Tenant
from registry.domain.aliases import make_target
from registry.services import aliases, identity, provenance
from tests.support.oci_world import NAME, OCI_MANIFEST, REPO, TENANT, build_world
from tests.support.oci_world import oras_client as _oras
from tests.support.oci_world import pulled_files as _pulled
from tests.support.oci_world import sha256_of as _sha256
from tests.support.registry import role_token
from tests.support.releases import approve_standin

# oci_world: a copy of tests/support/oci_world.py's world, built once per worker and database.
pytestmark = pytest.mark.seeded(builder=build_world)

# --- pulls with a real client -----------------------------------------------------------------------


def test_oras_pulls_by_tag_and_by_digest_every_file_with_its_name_and_bytes(oci_store_world, tmp_path):
    w = oci_store_world
    client = _oras(w, w.node)
    client.pull(target=f"{w.host}/{REPO}:prod", outdir=str(tmp_path / "by-alias"))
    assert _pulled(tmp_path / "by-alias") == w.files
    manifest = client.get_manifest(f"{w.host}/{REPO}:1")
    with w.http(w.node) as http:
        digest = http.head(f"/v2/{REPO}/manifests/1").headers["docker-content-digest"]
    client.pull(target=f"{w.host}/{REPO}@{digest}", outdir=str(tmp_path / "by-digest"))
    assert _pulled(tmp_path / "by-digest") == w.files
    assert {layer["annotations"]["org.opencontainers.image.title"]: layer["digest"] for layer in manifest["layers"]} \
        == {path: _sha256(data) for path, data in w.files.items()}
    # The config blob is served by the digest the manifest names, as the bytes that digest is of.
    with w.http(w.pull_token(w.node, f"repository:{REPO}:pull")) as http:
        config = http.get(f"/v2/{REPO}/blobs/{manifest['config']['digest']}")
        assert config.status_code == 200 and _sha256(config.content) == manifest["config"]["digest"]
        assert json.loads(config.content)["descriptor"]["name"] == REPO
        # A range of a file's bytes, straight from the store.
        weights = next(p for p in w.files if p.endswith(".safetensors"))
        ranged = http.get(f"/v2/{REPO}/blobs/{_sha256(w.files[weights])}", headers={"Range": "bytes=8-15"})
        assert ranged.status_code == 206 and ranged.content == w.files[weights][8:16]
        assert ranged.headers["content-range"] == f"bytes 8-15/{len(w.files[weights])}"
        assert ranged.headers["docker-content-digest"] == _sha256(w.files[weights])


def test_the_dance_401_then_token_then_manifest_with_exact_bytes_and_headers(oci_world):
    w = oci_world
    with w.http() as anonymous:
        r = anonymous.get(f"/v2/{REPO}/manifests/prod")
        assert r.status_code == 401 and r.json()["errors"][0]["code"] == "UNAUTHORIZED"
        assert r.headers["www-authenticate"] == (f'Bearer realm="{w.url}/v2/token",service="{w.host}",'
                                                 f'scope="repository:{REPO}:pull"')
        assert r.headers["docker-distribution-api-version"] == "registry/2.0"
        assert anonymous.get("/v2/").status_code == 401
    token = httpx.get(f"{w.url}/v2/token", params={"service": w.host, "scope": f"repository:{REPO}:pull"},
                      auth=("x", w.node)).json()
    assert token["token"] == token["access_token"] and token["expires_in"] == 300 and token["issued_at"]
    with w.http(token["token"]) as http:
        assert http.get("/v2/").status_code == 200
        got = http.get(f"/v2/{REPO}/manifests/prod", headers={"Accept": OCI_MANIFEST})
        head = http.head(f"/v2/{REPO}/manifests/1")
    assert got.status_code == 200 and got.headers["content-type"] == OCI_MANIFEST
    assert got.headers["docker-content-digest"] == _sha256(got.content)
    assert got.headers["content-length"] == str(len(got.content))
    assert (head.status_code, head.headers["docker-content-digest"], head.headers["content-length"], head.content) \
        == (200, _sha256(got.content), str(len(got.content)), b"")
    manifest = json.loads(got.content)
    assert manifest["artifactType"] == "application/vnd.cncf.model.manifest.v1+json"
    # A bearer modelreg token works as well, and gives the same bytes.
    with w.http(w.node) as direct:
        assert direct.get(f"/v2/{REPO}/manifests/1").content == got.content
        # Bearer and Basic on the token endpoint alike.
        assert direct.get("/v2/token", params={"scope": f"repository:{REPO}:pull"}).status_code == 200


def test_accept_without_the_oci_manifest_type_is_manifest_unknown(oci_world):
    with oci_world.http(oci_world.node) as http:
        r = http.get(f"/v2/{REPO}/manifests/1",
                     headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
        assert r.status_code == 404 and r.json()["errors"][0]["code"] == "MANIFEST_UNKNOWN"
        assert http.get(f"/v2/{REPO}/manifests/1", headers={"Accept": "*/*"}).status_code == 200


def _raw_get(oci_world, path: str, token: str, accept_lines: list[str]) -> tuple[int, bytes]:
    """A GET through http.client, which sends each ``Accept`` as its own header line (httpx would join them)."""
    conn = http.client.HTTPConnection(oci_world.host, timeout=30)
    try:
        conn.putrequest("GET", path)
        conn.putheader("Authorization", f"Bearer {token}")
        for line in accept_lines:
            conn.putheader("Accept", line)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_accept_sent_as_several_lines_counts_every_line_by_tag_and_by_digest(oci_world):
    # As the distribution-spec conformance suite sends it: the index type first, the manifest type after.
    lines = ["application/vnd.oci.image.index.v1+json", OCI_MANIFEST]
    status, body = _raw_get(oci_world, f"/v2/{REPO}/manifests/1", oci_world.node, lines)
    assert status == 200, body
    digest = _sha256(body)
    assert _raw_get(oci_world, f"/v2/{REPO}/manifests/{digest}", oci_world.node, lines) == (200, body)
    assert _raw_get(oci_world, f"/v2/{REPO}/manifests/1", oci_world.node, [lines[0], f"text/plain, {OCI_MANIFEST}"]) \
        == (200, body)
    # No line naming it is still no manifest.
    status, body = _raw_get(oci_world, f"/v2/{REPO}/manifests/{digest}", oci_world.node, [lines[0], "text/plain"])
    assert status == 404 and json.loads(body)["errors"][0]["code"] == "MANIFEST_UNKNOWN"


def test_an_alias_with_a_canary_gives_a_canary_tenants_node_the_canary_version(oci_world, tmp_path):
    w = oci_world
    approve_standin(w.container, TENANT, NAME, 3)
    with w.container.session_factory() as session:
        aliases.promote(session, w.admin, TENANT, NAME, "prod", make_target(1, 3, ["beta"]),
                        policy=w.container.policy, clock=w.container.clock)
    beta_node = role_token(w.container, "beta-node", "beta", "node")
    with w.container.session_factory() as session:
        principal = session.query(Principal).filter_by(name="beta-node").one()
        acme = session.query(Tenant).filter_by(name=TENANT).one()
        session.add(RoleBinding(principal_id=principal.id, tenant_id=acme.id, role="node", capacity=""))
        session.commit()
    digests = {}
    for token in (w.node, beta_node):
        with w.http(w.pull_token(token, f"repository:{REPO}:pull")) as http:
            digests[token] = {ref: http.head(f"/v2/{REPO}/manifests/{ref}").headers["docker-content-digest"]
                              for ref in ("prod", "1", "3")}
    assert digests[w.node]["prod"] == digests[w.node]["1"] != digests[w.node]["3"]
    assert digests[beta_node]["prod"] == digests[beta_node]["3"]
    _oras(w, beta_node).pull(target=f"{w.host}/{REPO}:prod", outdir=str(tmp_path / "canary"))
    assert (tmp_path / "canary" / "README.md").read_bytes() == b"v3\n"


# --- refusals ---------------------------------------------------------------------------------------


def test_another_tenants_repository_is_denied_and_says_nothing_of_what_exists(oci_world, tmp_path):
    w = oci_world
    with w.http(w.node) as http:
        for path in ("/v2/other/secret/manifests/1", "/v2/other/nothing/manifests/1", "/v2/other/secret/tags/list"):
            r = http.get(path)
            assert (r.status_code, r.json()["errors"][0]["code"]) == (403, "DENIED"), path
    # Through the dance: the token is issued without that repository, and the client is told DENIED.
    token = w.pull_token(w.node, "repository:other/secret:pull")
    with w.http(token) as http:
        r = http.get("/v2/other/secret/manifests/1")
        assert (r.status_code, r.json()["errors"][0]["code"]) == (401, "DENIED")
        assert 'error="insufficient_scope"' in r.headers["www-authenticate"]
    with pytest.raises(ValueError, match="/v2/other/secret/manifests/1"):
        _oras(w, w.node).pull(target=f"{w.host}/other/secret:1", outdir=str(tmp_path / "refused"))
    assert not (tmp_path / "refused").exists()


def test_revoked_and_unapproved_versions_have_no_manifest_and_no_tag(oci_world):
    with oci_world.http(oci_world.node) as http:
        for ref in ("2", "3", "next", "4", "nope"):
            r = http.get(f"/v2/{REPO}/manifests/{ref}")
            assert (r.status_code, r.json()["errors"][0]["code"]) == (404, "MANIFEST_UNKNOWN"), ref
        # The image shape of each released tag is listed too, once its build job has run (as here).
        assert http.get(f"/v2/{REPO}/tags/list").json() == {"name": REPO,
                                                             "tags": ["1", "1-image", "prod", "prod-image"]}
        r = http.get("/v2/acme/nothing/tags/list")
        assert (r.status_code, r.json()["errors"][0]["code"]) == (404, "NAME_UNKNOWN")


def test_a_blob_not_in_this_repository_is_unknown_even_when_another_tenant_has_it(oci_world):
    w = oci_world
    revoked_only = _sha256(b"v2\n")  # the README of the revoked version 2 only
    unapproved_only = _sha256(b"v3\n")
    others = _sha256(w.other_files["SECRET.md"])
    with w.http(w.pull_token(w.node, f"repository:{REPO}:pull")) as http:
        for digest in (revoked_only, unapproved_only, others, _sha256(b"never stored")):
            for method in ("GET", "HEAD"):
                r = http.request(method, f"/v2/{REPO}/blobs/{digest}")
                assert r.status_code == 404, (digest, method)
                if method == "GET":
                    assert r.json()["errors"][0]["code"] == "BLOB_UNKNOWN"
        r = http.get(f"/v2/{REPO}/blobs/sha256:abc")
        assert (r.status_code, r.json()["errors"][0]["code"]) == (400, "DIGEST_INVALID")
    # The other tenant's own reader gets it from its own repository only.
    with w.http(w.outsider) as http:
        assert http.get(f"/v2/other/secret/blobs/{others}").content == w.other_files["SECRET.md"]
        assert http.get(f"/v2/other/secret/blobs/{_sha256(w.files['README.md'])}").status_code == 404


def test_a_pull_token_is_good_for_its_repositories_only_and_not_after_it_expires(oci_world):
    w = oci_world
    token = w.pull_token(w.outsider, "repository:other/secret:pull")
    with w.http(token) as http:
        assert http.get("/v2/other/secret/manifests/1").status_code == 200
    # Issued for acme/llm (which its principal may read): good there, refused on other/secret.
    acme = w.pull_token(w.node, f"repository:{REPO}:pull")
    with w.http(acme) as http:
        assert http.get(f"/v2/{REPO}/manifests/1").status_code == 200
        r = http.get(f"/v2/{REPO}/blobs/{_sha256(w.files['README.md'])}")
        assert r.status_code == 200 and r.content == w.files["README.md"]
    with w.http(token) as http:
        r = http.get(f"/v2/{REPO}/manifests/1")
        assert (r.status_code, r.json()["errors"][0]["code"]) == (401, "DENIED")
    # The router reads the container's clock on each request: five minutes and a second later.
    w.container.clock = ManualClock(dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=301))
    with w.http(acme) as http:
        r = http.get(f"/v2/{REPO}/manifests/1")
        assert (r.status_code, r.json()["errors"][0]["code"]) == (401, "UNAUTHORIZED")
        assert "expired" in r.json()["errors"][0]["message"]


def test_a_pull_token_dies_with_the_modelreg_token_it_was_issued_for(oci_world):
    w = oci_world
    node = role_token(w.container, "node-2", TENANT, "node")
    pull = w.pull_token(node, f"repository:{REPO}:pull")
    with w.http(pull) as http:
        assert http.get(f"/v2/{REPO}/manifests/1").status_code == 200
    with w.container.session_factory() as session:
        identity.revoke_token(session, w.admin, token_id_of(session, node), clock=w.container.clock)
        session.commit()
    with w.http(pull) as http:
        r = http.get(f"/v2/{REPO}/manifests/1")
        assert (r.status_code, r.json()["errors"][0]["code"]) == (401, "UNAUTHORIZED")
        assert "revoked" in r.json()["errors"][0]["message"]


def test_the_oauth2_form_gives_pull_and_refresh_tokens_for_an_empty_user_name(oci_world):
    # As containerd asks first: POST the form, the password a modelreg token, the user name empty.
    w = oci_world
    form = {"grant_type": "password", "service": w.host, "client_id": "containerd-client",
            "scope": f"repository:{REPO}:pull repository:other/secret:pull", "username": "", "password": w.node,
            "access_type": "offline"}
    r = httpx.post(f"{w.url}/v2/token", data=form, timeout=30)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["scope"] == f"repository:{REPO}:pull" and answer["expires_in"] > 0 and answer["issued_at"]
    with w.http(answer["access_token"]) as http:
        assert http.get(f"/v2/{REPO}/manifests/1").status_code == 200
    r = httpx.post(f"{w.url}/v2/token", timeout=30, data={
        "grant_type": "refresh_token", "refresh_token": answer["refresh_token"], "service": w.host,
        "client_id": "containerd-client", "scope": f"repository:{REPO}:pull"})
    assert r.status_code == 200, r.text
    assert "refresh_token" not in r.json()
    with w.http(r.json()["access_token"]) as http:
        assert http.get(f"/v2/{REPO}/manifests/1").status_code == 200
        # A refresh token is no pull token.
        assert http.get(f"/v2/{REPO}/manifests/1", headers={
            "Authorization": f"Bearer {answer['refresh_token']}"}).status_code == 401
    # GET's offline_token=true gives one too; without access_type=offline, the form gives none.
    r = httpx.get(f"{w.url}/v2/token", params={"offline_token": "true", "scope": f"repository:{REPO}:pull"},
                  auth=("", w.node), timeout=30)
    assert r.status_code == 200 and r.json()["refresh_token"]
    r = httpx.post(f"{w.url}/v2/token", data={**form, "access_type": ""}, timeout=30)
    assert r.status_code == 200 and "refresh_token" not in r.json()


def test_bad_oauth2_forms_and_grants_are_400_with_the_oauth2_error(oci_world):
    w = oci_world
    pull = w.pull_token(w.node, f"repository:{REPO}:pull")
    node_2 = role_token(w.container, "node-2", TENANT, "node")
    refresh = httpx.post(f"{w.url}/v2/token", timeout=30, data={
        "grant_type": "password", "password": node_2, "access_type": "offline"}).json()["refresh_token"]
    with w.container.session_factory() as session:
        identity.revoke_token(session, w.admin, token_id_of(session, node_2), clock=w.container.clock)
        session.commit()
    for data, error in (({}, "invalid_request"),
                        ({"grant_type": "password"}, "invalid_request"),
                        ({"grant_type": "password", "password": "mr_not-a-token"}, "invalid_grant"),
                        ({"grant_type": "authorization_code", "code": "x"}, "unsupported_grant_type"),
                        ({"grant_type": "refresh_token"}, "invalid_request"),
                        ({"grant_type": "refresh_token", "refresh_token": "junk"}, "invalid_grant"),
                        # A pull token is no refresh token; a refresh token dies with its modelreg token.
                        ({"grant_type": "refresh_token", "refresh_token": pull}, "invalid_grant"),
                        ({"grant_type": "refresh_token", "refresh_token": refresh}, "invalid_grant"),
                        ({"grant_type": "password", "password": w.node, "scope": "repository:BAD"}, "invalid_scope")):
        r = httpx.post(f"{w.url}/v2/token", data=data, timeout=30)
        assert (r.status_code, r.json()["error"]) == (400, error), (data, r.text)
        assert r.json()["error_description"]


def test_bad_credentials_are_unauthorized(oci_world):
    w = oci_world
    acme = w.pull_token(w.node, f"repository:{REPO}:pull")
    header, payload, signature = acme.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["access"].append({"type": "repository", "name": "other/secret", "actions": ["pull"]})
    forged = ".".join([header, base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("="), signature])
    for bad in ("mr_not-a-token", forged, acme[:-4] + "AAAA"):
        with w.http(bad) as http:
            r = http.get(f"/v2/{REPO}/manifests/1")
            assert (r.status_code, r.json()["errors"][0]["code"]) == (401, "UNAUTHORIZED"), bad
    r = httpx.get(f"{w.url}/v2/token", params={"scope": f"repository:{REPO}:pull"}, auth=("x", "mr_wrong"))
    assert r.status_code == 401 and r.json()["errors"][0]["code"] == "UNAUTHORIZED"
    assert httpx.get(f"{w.url}/v2/token").status_code == 401


def test_every_write_method_is_unsupported(oci_world):
    w = oci_world
    with w.http(w.node) as http:
        for method, path in (("POST", f"/v2/{REPO}/blobs/uploads/"), ("PUT", f"/v2/{REPO}/manifests/9"),
                             ("PATCH", f"/v2/{REPO}/blobs/uploads/x"), ("DELETE", f"/v2/{REPO}/manifests/1"),
                             ("DELETE", f"/v2/{REPO}/blobs/{_sha256(w.files['README.md'])}"),
                             ("PUT", f"/v2/{REPO}/blobs/uploads/x?digest=sha256:00"), ("POST", "/v2/")):
            r = http.request(method, path, content=b"{}")
            assert r.status_code == 405, (method, path)
            assert r.json()["errors"][0]["code"] == "UNSUPPORTED"
    # oras finds the empty config blob present (the referrers' config, docs/oci.md), skips its upload and
    # is refused at the manifest's PUT, whose 405 it reports by its reason phrase.
    with pytest.raises(ValueError, match="UNSUPPORTED|Method Not Allowed"):
        _oras(w, w.node).push(target=f"{w.host}/{REPO}:pushed", files=[])
    with w.http(w.node) as http:
        assert http.get(f"/v2/{REPO}/manifests/1").status_code == 200


# --- listings ---------------------------------------------------------------------------------------


def test_tags_and_catalog_are_paged_with_link(oci_world):
    w = oci_world
    with w.http(w.node) as http:
        first = http.get(f"/v2/{REPO}/tags/list", params={"n": 1})
        assert first.json()["tags"] == ["1"]
        assert first.headers["link"] == f'</v2/{REPO}/tags/list?n=1&last=1>; rel="next"'
        second = http.get(f"/v2/{REPO}/tags/list", params={"n": 1, "last": "1"})
        assert second.json()["tags"] == ["1-image"] and "last=1-image" in second.headers["link"]
        third = http.get(f"/v2/{REPO}/tags/list", params={"n": 2, "last": "1-image"})
        assert third.json()["tags"] == ["prod", "prod-image"] and "link" not in third.headers
        assert http.get(f"/v2/{REPO}/tags/list", params={"n": 0}).json()["tags"] == []
        assert http.get(f"/v2/{REPO}/tags/list", params={"n": 1001}).status_code == 400
        assert http.get("/v2/_catalog").json() == {"repositories": [REPO]}
    with w.http(role_token(w.container, "root", "acme", "admin")) as http:
        # An admin of acme only: other's repository is not listed.
        assert http.get("/v2/_catalog").json() == {"repositories": [REPO]}
    with w.http(w.pull_token(w.node, f"repository:{REPO}:pull")) as http:
        r = http.get("/v2/_catalog")
        assert (r.status_code, r.json()["errors"][0]["code"]) == (401, "DENIED")
    with w.http(w.pull_token(w.node, "registry:catalog:*")) as http:
        assert http.get("/v2/_catalog", params={"n": 1}).json() == {"repositories": [REPO]}


# --- provenance -------------------------------------------------------------------------------------


def test_manifest_pulls_are_recorded_and_provenance_names_the_puller(oci_world, tmp_path):
    w = oci_world
    _oras(w, w.node).pull(target=f"{w.host}/{REPO}:prod", outdir=str(tmp_path / "pulled"))
    with w.http(w.node) as http:
        http.head(f"/v2/{REPO}/manifests/1")  # a HEAD is no pull
        http.get(f"/v2/{REPO}/manifests/1")
    with w.container.session_factory() as session:
        doc = provenance.nodes(session, w.admin, TENANT, NAME, "1")
    (row,) = [n for n in doc["nodes"] if n["principal"] == "node-1"]
    assert (row["oci_pulls"], row["hf_downloads"], row["count"]) == (2, 0, 0)
