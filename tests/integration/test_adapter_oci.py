"""Adapters through ``/v2``, and their base's revocation on ``/hf`` and ``/v2``, on SQLite and PostgreSQL.

The world (``tests/support/adapter_served.py``): acme/llm@1 (the tiny Llama) in ``prod``, acme/llm@2 (other
weights) approved, acme/llm-support@1 (PEFT's LoRA for @1) approved and in ``prod``, every OCI artifact built.
oras-py pulls the adapter as a ModelPack artifact (its files as signed) whose manifest, in both shapes, names the
bound base's manifest of the same shape and the bound weights digest; the base pulls by that reference. Revoking
the base, or any version of its model holding the bound weights, takes the adapter off both channels at once
(another tenant revoking its copy of the same weights does not); a base alias moved to other weights takes the
adapter's alias of that name off ``/v2`` (its version number stays). A reader who cannot read the base's tenant is
told no more of the base than the binding says.
"""

from __future__ import annotations

import hashlib
import json

import httpx
import oras.client
import pytest
from sqlalchemy import select

from api.app import create_app
from registry.db.models import Principal, RoleBinding, Tenant
from registry.domain.aliases import make_target
from registry.domain.modelpack import ANNOTATION_ADAPTER_BASE, ANNOTATION_ADAPTER_BASE_WEIGHTS
from registry.services import aliases, revocations
from tests.support.adapter_served import ADAPTER_REPO, BASE_REPO, build_served_adapter, promote
from tests.support.adapter_submissions import api, base_row, submit_adapter
from tests.support.live_app import serve_in_thread
from tests.support.registry import drain, make_admin, person, role_token
from tests.support.release_unit import NAME, TENANT, approve, edited, submit
from tests.support.releases import approve_standin, awaiting_version

pytestmark = pytest.mark.seeded(builder=build_served_adapter)

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


@pytest.fixture
def live(container, seeded):
    with serve_in_thread(create_app(container)) as url:
        yield {"url": url, "host": url.removeprefix("http://"), "token": seeded["node"]}


def _http(live) -> httpx.Client:
    return httpx.Client(base_url=live["url"], headers={"Authorization": f"Bearer {live['token']}"}, timeout=30)


def _oras(live) -> oras.client.OrasClient:
    client = oras.client.OrasClient(hostname=live["host"], insecure=True)
    client.auth.set_basic_auth("anyone", live["token"])
    return client


def _pulled(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _digest(http: httpx.Client, repository: str, ref: str) -> str:
    r = http.head(f"/v2/{repository}/manifests/{ref}")
    assert r.status_code == 200, (repository, ref)
    return r.headers["docker-content-digest"]


def test_oras_pulls_the_adapter_whose_manifests_name_the_bound_bases_in_both_shapes(container, seeded, live,
                                                                                   tmp_path):
    client = _oras(live)
    client.pull(target=f"{live['host']}/{ADAPTER_REPO}:prod", outdir=str(tmp_path / "adapter"))
    # /v2 serves the files as signed: the base is named by the manifest, not written into the config.
    assert _pulled(tmp_path / "adapter") == seeded["adapter"]
    weights, _ = base_row(container)
    with _http(live) as http:
        assert http.get(f"/v2/{ADAPTER_REPO}/tags/list").json()["tags"] == ["1", "1-image", "prod", "prod-image"]
        for ref, base_ref in (("prod", "1"), ("1", "1"), ("prod-image", "1-image"), ("1-image", "1-image")):
            served = http.get(f"/v2/{ADAPTER_REPO}/manifests/{ref}", headers={"Accept": OCI_MANIFEST})
            assert served.status_code == 200, served.text
            # In the bytes the digest names (what a signature over the manifest would cover), not a side answer.
            assert served.headers["docker-content-digest"] == "sha256:" + hashlib.sha256(served.content).hexdigest()
            annotations = json.loads(served.content)["annotations"]
            assert annotations[ANNOTATION_ADAPTER_BASE] == f"{BASE_REPO}@{_digest(http, BASE_REPO, base_ref)}", ref
            assert annotations[ANNOTATION_ADAPTER_BASE_WEIGHTS] == f"sha256:{weights}"
            assert client.get_manifest(f"{live['host']}/{ADAPTER_REPO}:{ref}")["annotations"] == annotations
        base_manifest = json.loads(http.get(f"/v2/{BASE_REPO}/manifests/1").content)
    assert ANNOTATION_ADAPTER_BASE not in base_manifest.get("annotations", {})
    # The raw shape's reference pulls the very base, as submitted.
    reference = client.get_manifest(f"{live['host']}/{ADAPTER_REPO}:prod")["annotations"][ANNOTATION_ADAPTER_BASE]
    # (A client of its own: oras-py reuses the pull token it holds, which names the adapter's repository only.)
    _oras(live).pull(target=f"{live['host']}/{reference}", outdir=str(tmp_path / "base"))
    assert _pulled(tmp_path / "base") == seeded["files"]


def _off_both_channels(live, adapter_digest: str, blob: str, reason: str) -> None:
    with _http(live) as http:
        for ref in ("prod", "1", "1-image", adapter_digest):
            r = http.get(f"/v2/{ADAPTER_REPO}/manifests/{ref}")
            assert r.status_code == 404, (ref, "served", r.status_code)
            assert r.json()["errors"][0]["code"] == "MANIFEST_UNKNOWN", ref
            if not ref.startswith("sha256:"):
                assert reason in r.json()["errors"][0]["message"], ref
        assert http.get(f"/v2/{ADAPTER_REPO}/tags/list").json()["tags"] == []
        r = http.get(f"/v2/{ADAPTER_REPO}/blobs/{blob}")
        assert r.status_code == 404 and r.json()["errors"][0]["code"] == "BLOB_UNKNOWN", r.status_code
        assert http.get(f"/v2/{ADAPTER_REPO}/referrers/{adapter_digest}").json()["manifests"] == []
        for revision in ("prod", "1"):
            r = http.get(f"/hf/api/models/{ADAPTER_REPO}/revision/{revision}")
            assert r.status_code == 404, (revision, "served", r.status_code)
            assert r.headers["x-error-code"] == "RevisionNotFound", revision
            assert reason in r.json()["detail"]
            r = http.get(f"/hf/{ADAPTER_REPO}/resolve/{revision}/adapter_model.safetensors")
            assert r.status_code == 404, revision


def _served_before(live) -> tuple[str, str]:
    with _http(live) as http:
        digest = _digest(http, ADAPTER_REPO, "1")
        manifest = json.loads(http.get(f"/v2/{ADAPTER_REPO}/manifests/1").content)
        assert len(http.get(f"/v2/{ADAPTER_REPO}/referrers/{digest}").json()["manifests"]) > 0
        assert http.get(f"/hf/api/models/{ADAPTER_REPO}/revision/1").status_code == 200
    blob = next(layer["digest"] for layer in manifest["layers"]
                if layer["annotations"]["org.opencontainers.image.title"] == "adapter_model.safetensors")
    return digest, blob


def test_a_revoked_base_takes_its_adapter_off_hf_and_v2(container, seeded, live):
    digest, blob = _served_before(live)
    with container.session_factory() as session:
        revocations.revoke(session, seeded["people"]["admin"], TENANT, NAME, 1, "poisoned weights",
                           clock=container.clock)
    _off_both_channels(live, digest, blob, "its base acme/llm@1 is not served: version 1 is revoked")


def test_revoking_another_version_that_holds_the_bound_weights_leaves_the_adapter_served(container, seeded, live,
                                                                                         tmp_path):
    # Revocation follows the binding to its version (ADR 0018), on /hf and /v2 as for releases: acme/llm@3 holds
    # @1's weights with another generation config; revoking it leaves the adapter bound to @1 served.
    people = seeded["people"]
    files = edited(seeded["files"], "generation_config.json", lambda doc: doc.update(temperature=0.5))
    number = submit(container, people["admin"], tmp_path / "v3", files)
    assert approve(container, people, number) == "approved"
    digest, blob = _served_before(live)
    with container.session_factory() as session:
        revocations.revoke(session, people["admin"], TENANT, NAME, number, "its template", clock=container.clock)
    assert _served_before(live) == (digest, blob)
    with container.session_factory() as session:
        revocations.revoke(session, people["admin"], TENANT, NAME, 1, "its template too", clock=container.clock)
    _off_both_channels(live, digest, blob, "its base acme/llm@1 is not served: version 1 is revoked")


def test_a_base_alias_moved_to_other_weights_takes_the_adapters_alias_off_v2(container, seeded, live):
    promote(container, seeded["people"], NAME, 2)
    with _http(live) as http:
        assert http.get(f"/v2/{ADAPTER_REPO}/tags/list").json()["tags"] == ["1", "1-image"]
        for ref in ("prod", "prod-image"):
            r = http.get(f"/v2/{ADAPTER_REPO}/manifests/{ref}")
            assert r.status_code == 404, (ref, "served", r.status_code)
            assert r.json()["errors"][0]["code"] == "MANIFEST_UNKNOWN", ref
            assert "its base's alias acme/llm@prod gives acme/llm@2" in r.json()["errors"][0]["message"]
        assert http.get(f"/v2/{ADAPTER_REPO}/manifests/1").status_code == 200
    promote(container, seeded["people"], NAME, 1)
    with _http(live) as http:
        assert http.get(f"/v2/{ADAPTER_REPO}/manifests/prod").status_code == 200


def test_another_tenants_revocation_of_the_same_weights_leaves_the_adapter_served(container, seeded, live, tmp_path):
    # globex/llm@1 holds acme/llm@1's very weights; globex revokes it.
    globex = make_admin(container, "globex")
    number = awaiting_version(container, globex, tmp_path / "globex", "globex", "llm", files=seeded["files"])
    approve_standin(container, "globex", "llm", number)
    with container.session_factory() as session:
        revocations.revoke(session, globex, "globex", "llm", number, "ours leaked", clock=container.clock)
    with _http(live) as http:
        assert http.get(f"/v2/{ADAPTER_REPO}/manifests/1").status_code == 200
        assert http.get(f"/v2/{ADAPTER_REPO}/tags/list").json()["tags"] == ["1", "1-image", "prod", "prod-image"]
        assert http.get(f"/hf/api/models/{ADAPTER_REPO}/revision/prod").status_code == 200


def test_a_reader_who_cannot_read_the_bases_tenant_is_told_no_more_than_the_binding(container, seeded, live,
                                                                                   tmp_path):
    # beta/support@1: the same LoRA bound to acme/llm@1 by a submitter who reads acme; beta's node reads beta only.
    people = seeded["people"]
    submitter = person(container, "bea", "beta", ("submitter", ""))
    with container.session_factory() as session:
        bea = session.scalars(select(Principal).where(Principal.name == "bea")).one()
        acme = session.scalars(select(Tenant).where(Tenant.name == TENANT)).one()
        session.add(RoleBinding(principal_id=bea.id, tenant_id=acme.id, role="auditor", capacity=""))
        session.commit()
    with api(container) as client:
        r = submit_adapter(client, submitter, seeded["adapter"], f"{BASE_REPO}@1", tenant="beta", name="support")
        assert r.status_code == 202, r.text
    drain(container)
    approve_standin(container, "beta", "support", 1)
    with container.session_factory() as session:
        aliases.promote(session, make_admin(container, "beta"), "beta", "support", "prod", make_target(1),
                        policy=container.policy, clock=container.clock)
    beta_node = role_token(container, "beta-node", "beta", "node")
    files = edited(seeded["files"], "generation_config.json", lambda doc: doc.update(temperature=0.5))
    number = submit(container, people["admin"], tmp_path / "v3", files)
    assert approve(container, people, number) == "approved"
    promote(container, people, NAME, 2)
    with httpx.Client(base_url=live["url"], headers={"Authorization": f"Bearer {beta_node}"}) as http:
        moved = http.get("/hf/api/models/beta/support/revision/prod")
        assert moved.status_code == 404
        assert "its base's alias acme/llm@prod gives weights that are not the ones it is bound to" \
            in moved.json()["detail"]
        assert http.get("/hf/api/models/beta/support/revision/1").status_code == 200
        with container.session_factory() as session:
            revocations.revoke(session, people["admin"], TENANT, NAME, 1, "a secret reason", clock=container.clock)
        for answer in (http.get("/hf/api/models/beta/support/revision/1").json()["detail"],
                       http.get("/v2/beta/support/manifests/1").json()["errors"][0]["message"]):
            assert "its base acme/llm@1 is not served" in answer
            assert "secret" not in answer and "acme/llm@2" not in answer
