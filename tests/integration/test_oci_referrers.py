"""Referrers of a version's model manifest through ``/v2``, and anonymous pull per tenant, on a live modelreg.

The world of ``tests/support/oci_world.py`` (fixture ``oci_world``): tenant ``acme`` holds ``llm`` (version 1
approved, 2 approved then revoked, 3 awaiting approval); tenant ``other`` holds ``secret``, approved. The
referrers API is read with plain httpx (oras-py has no ``discover``); each referrer is then pulled by digest
with oras-py, and one is inspected with Debian's skopeo. Everything runs on SQLite and PostgreSQL; the pulls
also on local and S3.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import types
from pathlib import Path

import httpx
import oras.client
import oras.provider
import pytest

from registry.auth import issue_token
from registry.cli import main
from registry.db.models import AuditEvent, Principal
from registry.domain.oci_referrers import CYCLONEDX, EMPTY_DIGEST, IN_TOTO, OCI_INDEX, SCAN_REPORT, SIGNATURE
from registry.services import exports, provenance, revocations
from tests.support.oci_world import REPO, World, build_world

# oci_world: a copy of tests/support/oci_world.py's world, built once per worker and database.
pytestmark = pytest.mark.seeded(builder=build_world)

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SKOPEO = "/usr/bin/skopeo"


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _subject(w: World, number: int = 1) -> str:
    with w.http(w.node) as http:
        return http.head(f"/v2/{REPO}/manifests/{number}").headers["docker-content-digest"]


def _referrers(w: World, digest: str, token: str | None = None, **params: str) -> httpx.Response:
    with w.http(token or w.node) as http:
        return http.get(f"/v2/{REPO}/referrers/{digest}", params=params)


def _sysadmin_token(w: World) -> str:
    with w.container.session_factory() as session:
        token = issue_token(session, session.get(Principal, w.admin.id)).token
        session.commit()
    return token


# --- referrers ----------------------------------------------------------------------------------------


def test_the_referrers_index_lists_each_document_and_oras_pulls_each_by_digest(oci_store_world, tmp_path):
    w = oci_store_world
    subject = _subject(w)
    with w.http(w.node) as http:
        subject_size = len(http.get(f"/v2/{REPO}/manifests/1").content)
    r = _referrers(w, subject, w.pull_token(w.node, f"repository:{REPO}:pull"))
    assert r.status_code == 200 and r.headers["content-type"] == OCI_INDEX
    assert "oci-filters-applied" not in r.headers
    index = r.json()
    assert (index["schemaVersion"], index["mediaType"]) == (2, OCI_INDEX)
    # Two Sigstore bundles (the model-signing DSSE one and the registry's message signature over the manifest),
    # told apart as cosign's bundle spec says, by their dev.sigstore.bundle.content annotation.
    by_kind = {(d["artifactType"], d["annotations"].get("dev.sigstore.bundle.content")): d
               for d in index["manifests"]}
    assert len(by_kind) == len(index["manifests"])
    assert {(SIGNATURE, "dsse-envelope"), (SIGNATURE, "message-signature"), (CYCLONEDX, None), (IN_TOTO, None),
            (SCAN_REPORT, None)} <= set(by_kind)
    client = oras.client.OrasClient(hostname=w.host, insecure=True)
    client.auth.set_basic_auth("anyone", w.node)
    pulled: dict[str, bytes] = {}
    for (artifact_type, content), descriptor in by_kind.items():
        assert descriptor["mediaType"] == OCI_MANIFEST
        assert descriptor["annotations"]["dev.modelreg.version"] == f"{REPO}@1"
        manifest = client.get_manifest(f"{w.host}/{REPO}@{descriptor['digest']}")
        # The descriptor is the manifest's: its artifactType, annotations, and the digest of its exact bytes.
        assert (manifest["artifactType"], manifest.get("annotations")) == (artifact_type, descriptor["annotations"])
        assert manifest["subject"] == {"mediaType": OCI_MANIFEST, "digest": subject, "size": subject_size}
        assert manifest["config"]["digest"] == EMPTY_DIGEST and len(manifest["layers"]) == 1
        out = tmp_path / f"{artifact_type.replace('/', '_')}-{content}"
        client.pull(target=f"{w.host}/{REPO}@{descriptor['digest']}", outdir=str(out))
        (path,) = [p for p in out.rglob("*") if p.is_file()]
        assert path.name == manifest["layers"][0]["annotations"]["org.opencontainers.image.title"]
        assert _sha256(path.read_bytes()) == manifest["layers"][0]["digest"]
        pulled[artifact_type if content is None else content] = path.read_bytes()
    with w.http(_sysadmin_token(w)) as http:
        # The signature is the version's bundle (fetch's model.sig), the provenance names every file.
        assert json.loads(pulled["dsse-envelope"]) == http.get(f"/v1/models/{REPO}/versions/1/signature").json()
        assert http.get(f"/v2/{REPO}/blobs/{EMPTY_DIGEST}").content == b"{}"
    # The registry's bundle signs the subject itself (verified by @sigstore/verify: test_oci_signatures.py).
    digest = json.loads(pulled["message-signature"])["messageSignature"]["messageDigest"]
    assert "sha256:" + base64.b64decode(digest["digest"]).hex() == subject
    exports.validate_bom(pulled[CYCLONEDX])
    statement = json.loads(pulled[IN_TOTO])
    assert {s["name"]: "sha256:" + s["digest"]["sha256"] for s in statement["subject"]} == \
        {p: _sha256(b) for p, b in w.files.items()}
    assert {f["path"] for f in json.loads(pulled[SCAN_REPORT])["files"]} == set(w.files)
    # Built again from the same rows, the same bytes: a listed referrer stays pullable by its digest.
    assert _referrers(w, subject).json() == index


def test_artifact_type_filtering_says_it_was_applied(oci_world):
    w = oci_world
    r = _referrers(w, _subject(w), artifactType=CYCLONEDX)
    assert r.status_code == 200 and r.headers["oci-filters-applied"] == "artifactType"
    assert [d["artifactType"] for d in r.json()["manifests"]] == [CYCLONEDX]
    r = _referrers(w, _subject(w), artifactType="application/vnd.example.none")
    assert (r.headers["oci-filters-applied"], r.json()["manifests"]) == ("artifactType", [])


def test_skopeo_inspects_a_referrer_by_digest(oci_world):
    if not Path(SKOPEO).exists() or shutil.which(SKOPEO) is None:
        pytest.skip("Debian's skopeo is not installed")
    w = oci_world
    descriptor = next(d for d in _referrers(w, _subject(w)).json()["manifests"] if d["artifactType"] == IN_TOTO)
    done = subprocess.run([SKOPEO, "inspect", "--raw", "--tls-verify=false", "--creds", f"anyone:{w.node}",
                           f"docker://{w.host}/{REPO}@{descriptor['digest']}"], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert _sha256(done.stdout) == descriptor["digest"] and json.loads(done.stdout)["artifactType"] == IN_TOTO


def test_a_digest_no_released_version_has_is_an_empty_index_and_a_bad_one_is_refused(oci_world):
    w = oci_world
    for digest in (_sha256(b"nobody's manifest"), _sha256(w.files["README.md"])):
        r = _referrers(w, digest)
        assert r.status_code == 200 and r.json() == {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}
    r = _referrers(w, "sha256:abc")
    assert (r.status_code, r.json()["errors"][0]["code"]) == (400, "DIGEST_INVALID")
    with w.http(w.node) as http:
        r = http.get(f"/v2/acme/nothing/referrers/{_subject(w)}")
        assert (r.status_code, r.json()["errors"][0]["code"]) == (404, "NAME_UNKNOWN")


def test_a_revoked_versions_referrers_vanish(oci_world):
    w = oci_world
    subject = _subject(w)
    descriptors = _referrers(w, subject).json()["manifests"]
    with w.http(w.node) as http:
        layers = [http.get(f"/v2/{REPO}/manifests/{d['digest']}").json()["layers"][0]["digest"] for d in descriptors]
    with w.container.session_factory() as session:
        revocations.revoke(session, w.admin, "acme", "llm", 1, "a bad batch", clock=w.container.clock)
    assert _referrers(w, subject).json()["manifests"] == []
    with w.http(w.node) as http:
        for d, layer in zip(descriptors, layers):
            r = http.get(f"/v2/{REPO}/manifests/{d['digest']}")
            assert (r.status_code, r.json()["errors"][0]["code"]) == (404, "MANIFEST_UNKNOWN")
            r = http.get(f"/v2/{REPO}/blobs/{layer}")
            assert (r.status_code, r.json()["errors"][0]["code"]) == (404, "BLOB_UNKNOWN")


def test_another_tenants_referrers_are_denied_and_not_served_through_its_own_repository(oci_world):
    w = oci_world
    subject = _subject(w)
    descriptor = _referrers(w, subject).json()["manifests"][0]
    r = _referrers(w, subject, w.outsider)
    assert (r.status_code, r.json()["errors"][0]["code"]) == (403, "DENIED")
    with w.http(w.outsider) as http:
        # Under its own repository, acme's subject has no referrers and acme's referrer is no manifest.
        assert http.get(f"/v2/other/secret/referrers/{subject}").json()["manifests"] == []
        r = http.get(f"/v2/other/secret/manifests/{descriptor['digest']}")
        assert (r.status_code, r.json()["errors"][0]["code"]) == (404, "MANIFEST_UNKNOWN")
    with w.http() as anonymous:
        r = anonymous.get(f"/v2/{REPO}/referrers/{subject}")
    assert (r.status_code, r.json()["errors"][0]["code"]) == (401, "UNAUTHORIZED")
    assert r.headers["www-authenticate"] == (f'Bearer realm="{w.url}/v2/token",service="{w.host}",'
                                             f'scope="repository:{REPO}:pull"')


def test_a_referrer_pull_is_no_model_pull(oci_world):
    w = oci_world
    descriptor = _referrers(w, _subject(w)).json()["manifests"][0]
    with w.http(w.node) as http:
        assert http.get(f"/v2/{REPO}/manifests/{descriptor['digest']}").status_code == 200
    with w.container.session_factory() as session:
        doc = provenance.nodes(session, w.admin, "acme", "llm", "1")
    assert [n for n in doc["nodes"] if n["principal"] == "node-1"] == []


# --- anonymous pull per tenant ----------------------------------------------------------------------


def _anonymous_refusal(r: httpx.Response, repository: str | None) -> None:
    assert r.status_code == 401, (r.request.url, r.status_code, r.text[:200])
    assert r.json()["errors"][0]["code"] == "UNAUTHORIZED", r.text
    if repository is not None:
        assert r.headers["www-authenticate"].endswith(f',scope="repository:{repository}:pull"')


def test_anonymous_pull_is_off_until_an_administrator_turns_it_on_for_one_tenant(oci_world, tmp_path):
    w = oci_world
    subject = _subject(w)
    with w.http() as anonymous:
        for path in (f"/v2/{REPO}/manifests/1", f"/v2/{REPO}/tags/list", f"/v2/{REPO}/referrers/{subject}"):
            _anonymous_refusal(anonymous.get(path), REPO)
        assert anonymous.get("/v2/token", params={"scope": f"repository:{REPO}:pull"}).status_code == 401
    admin = _sysadmin_token(w)
    # Only administrators: acme's own admin role is not enough.
    tenant_admin = w.http(w.node).put("/v1/tenants/acme/oci-anonymous-pull", json={"enabled": True})
    assert tenant_admin.status_code == 403
    assert main(["tenant", "anonymous-pull", "acme", "on", "--url", w.url, "--token", admin]) == 0
    with w.container.session_factory() as session:
        event = session.query(AuditEvent).filter_by(action="tenant.oci_anonymous_pull").one()
        assert (event.actor, event.details) == (w.admin.name, {"enabled": True, "previous": False})

    # oras-py with no credentials at all: 401, then /v2/token without credentials, then the pull.
    client = oras.client.OrasClient(hostname=w.host, insecure=True)
    client.pull(target=f"{w.host}/{REPO}:prod", outdir=str(tmp_path / "anonymous"))
    assert {p.relative_to(tmp_path / "anonymous").as_posix(): p.read_bytes()
            for p in (tmp_path / "anonymous").rglob("*") if p.is_file()} == w.files
    with w.http() as anonymous:
        assert anonymous.get(f"/v2/{REPO}/referrers/{subject}").json()["manifests"]
        # Never a revoked or unapproved version, never another tenant, never the catalog.
        for ref in ("2", "3", "next"):
            r = anonymous.get(f"/v2/{REPO}/manifests/{ref}")
            assert (r.status_code, r.json()["errors"][0]["code"]) == (404, "MANIFEST_UNKNOWN"), ref
        assert anonymous.get(f"/v2/{REPO}/tags/list").json()["tags"] == ["1", "1-image", "prod", "prod-image"]
        _anonymous_refusal(anonymous.get("/v2/other/secret/manifests/1"), "other/secret")
        _anonymous_refusal(anonymous.get("/v2/_catalog"), None)
        _anonymous_refusal(anonymous.get("/v2/"), None)
        token = anonymous.get("/v2/token", params=[("scope", f"repository:{REPO}:pull"),
                                                    ("scope", "repository:other/secret:pull"),
                                                    ("scope", "registry:catalog:*")]).json()["token"]
    with w.http(token) as pull:
        assert pull.get(f"/v2/{REPO}/manifests/1").status_code == 200
        r = pull.get("/v2/other/secret/manifests/1")
        assert (r.status_code, r.json()["errors"][0]["code"]) == (401, "DENIED")
        assert pull.get("/v2/_catalog").status_code == 401
    # oras-py retries a failed request five times with waits of 3 to 83 s (131 s in all); the refusal is final,
    # so this client asks once.
    client.do_request = types.MethodType(oras.provider.Registry.do_request.__wrapped__, client)
    with pytest.raises(ValueError):
        client.pull(target=f"{w.host}/other/secret:1", outdir=str(tmp_path / "refused"))

    # Turned off again: the anonymous token issued before is refused on its next use.
    assert main(["tenant", "anonymous-pull", "acme", "off", "--url", w.url, "--token", admin]) == 0
    with w.http(token) as pull:
        r = pull.get(f"/v2/{REPO}/manifests/1")
        assert (r.status_code, r.json()["errors"][0]["code"]) == (401, "DENIED")
    with w.http() as anonymous:
        _anonymous_refusal(anonymous.get(f"/v2/{REPO}/manifests/1"), REPO)
    assert main(["tenant", "anonymous-pull", "acme", "maybe", "--url", w.url, "--token", admin]) != 0
