"""LoRA adapters (issue 34, part 1) through the API and the real pipeline, on SQLite and PostgreSQL: acme/llm@1 (the
tiny Llama, approved and in prod) is the base; an adapter PEFT made for it is submitted ``adapter_of`` it, bound to
its weights digest, checked at seal, signed with the binding, scanned, evaluated and approved. An adapter for
another base fails at seal with every reason; a pickle adapter with a planted payload is flagged unsafe and never
served; a base that is missing, in a tenant the submitter cannot read, unsealed, revoked or an adapter itself is
refused at submission (problem+json, nothing created)."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from registry.db.models import AdapterBinding, AuditEvent, Principal, RoleBinding, Tenant
from registry.domain.errors import AdapterBindingMismatchError, SignatureError
from registry.services import adapters, approvals, revocations, versions
from registry.services.versions import SubmitRequest
from tests.support.registry import drain, make_admin, person
from tests.support.release_unit import NAME, TENANT, build_in_prod
from tests.support.releases import submit_directory
from tests.support.tiny_adapter import tiny_adapter_files
from tests.support.tiny_llm import tiny_llm_files

pytestmark = pytest.mark.seeded(builder=build_in_prod)

ADAPTER = "llm-support"
PROBLEMS = "https://modelreg.dev/problems/"


def api(container) -> TestClient:
    return TestClient(create_app(container), raise_server_exceptions=False)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def submit(client: TestClient, token: str, files: dict[str, bytes], adapter_of: str | None, *,
           tenant: str = TENANT, name: str = ADAPTER, label: str = "adapter"):
    """Upload ``files`` as blobs of ``tenant``; submit them as a version of ``tenant/name`` bound to ``adapter_of``."""
    entries = []
    for path, data in sorted(files.items()):
        digest = hashlib.sha256(data).hexdigest()
        r = client.put(f"/v1/blobs/sha256/{digest}", params={"tenant": tenant}, content=data, headers=auth(token))
        assert r.status_code in (200, 201), r.text
        entries.append({"path": path, "size": len(data), "sha256": digest})
    body = {"source": f"upload:{label}", "files": entries, **({} if adapter_of is None else {"adapter_of": adapter_of})}
    return client.post(f"/v1/models/{tenant}/{name}/versions", json=body, headers=auth(token))


def shown(client: TestClient, token: str, number: int, name: str = ADAPTER) -> dict:
    r = client.get(f"/v1/models/{TENANT}/{name}/versions/{number}", headers=auth(token))
    assert r.status_code == 200, r.text
    return r.json()


def base_row(container, number: int = 1) -> tuple[str, str]:
    """acme/llm@number's weights component digest and statement digest."""
    with container.session_factory() as session:
        version = versions.find_version_unchecked(session, TENANT, NAME, number)
        return adapters.weights_digest_of(session, version), version.manifest_digest


def events(container, action: str, subject: str) -> list[dict]:
    with container.session_factory() as session:
        return [e.details for e in session.scalars(select(AuditEvent).where(
            AuditEvent.action == action, AuditEvent.subject == subject).order_by(AuditEvent.id))]


def test_an_adapter_is_bound_to_its_bases_weights_checked_signed_and_approved(container, people, in_prod):
    sam = people["tokens"]["sam"]
    weights, manifest = base_row(container)
    with api(container) as client:
        r = submit(client, sam, tiny_adapter_files("lora"), "acme/llm@1")
        assert r.status_code == 202, r.text
        assert r.json()["adapter_of"] == {"model": "acme/llm", "version": 1, "weights_digest": weights,
                                          "manifest_digest": manifest, "requested": "acme/llm@1", "check": None}
        drain(container)
        doc = shown(client, sam, 1)
        # The same files bound to the same base, named by alias or digest: the one version.
        for ref in ("acme/llm@prod", f"sha256:{manifest}", "modelreg://acme/llm@1"):
            again = submit(client, sam, tiny_adapter_files("lora"), ref)
            assert (again.status_code, again.json()["version"]) == (200, 1), again.text
    assert doc["state"] == "awaiting_approval", doc["failure_detail"]
    assert doc["adapter_of"]["check"] == {"peft_type": "LORA", "refusals": [], "refused_total": 0, "findings": []}
    assert doc["adapter_of"]["weights_digest"] == weights

    with container.session_factory() as session:
        version = versions.find_version_unchecked(session, TENANT, ADAPTER, 1)
        key = container.ports.signer.public_key
        # The signature covers the binding: the statement names the base version and its weights digest.
        assert adapters.signed_binding(version.manifest_bundle, key) == {
            "model": "acme/llm", "version": 1, "weights_digest": weights, "manifest_digest": manifest}
        adapters.verify_binding(version, key)
        # A binding edited in the signed payload no longer verifies...
        tampered = json.loads(json.dumps(version.manifest_bundle))
        statement = json.loads(base64.b64decode(tampered["dsseEnvelope"]["payload"]))
        statement["predicate"]["modelreg"]["adapter_of"]["weights_digest"] = "0" * 64
        tampered["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
        with pytest.raises(SignatureError):
            adapters.signed_binding(tampered, key)
        # ...and a binding edited in the database is not the one signed.
        session.get(AdapterBinding, version.id).weights_digest = "0" * 64
        with pytest.raises(AdapterBindingMismatchError) as mismatch:
            adapters.verify_binding(version, key)
        assert mismatch.value.details["signed"]["weights_digest"] == weights
        session.rollback()
        assert [v.number for v in adapters.adapters_bound_to_unchecked(session, weights)] == [1]
    assert events(container, "version.submitted", f"{TENANT}/{ADAPTER}@1")[0]["adapter_of"]["weights_digest"] == weights

    # The same pipeline as any version: scanned, evaluated, approved by the three capacities.
    with api(container) as client:
        scans = client.get(f"/v1/models/{TENANT}/{ADAPTER}/versions/1/scans", headers=auth(sam)).json()
    assert {f["path"]: f["verdict"] for f in scans["files"]} == {
        "adapter_config.json": "safe", "adapter_model.safetensors": "safe"}
    assert approve_adapter(container, people, 1) == "approved"


def approve_adapter(container, people, number: int) -> str:
    for who, capacity in (("sec", "security"), ("mia", "ml"), ("lex", "legal")):
        with container.session_factory() as session:
            status = approvals.decide(session, people[who], TENANT, ADAPTER, number,
                                      approvals.ApprovalRequest("approve", capacity, "", []), ports=container.ports)
    return status.state


@pytest.mark.parametrize("variant,codes", [
    ("other_shapes", {"adapter.shape"}),
    ("other_modules", {"adapter.target-module", "adapter.module-missing"}),
])
def test_an_adapter_made_for_another_base_fails_at_seal_with_every_reason(container, people, in_prod, variant, codes):
    sam = people["tokens"]["sam"]
    with api(container) as client:
        assert submit(client, sam, tiny_adapter_files(variant), "acme/llm@1").status_code == 202
        drain(container)
        doc = shown(client, sam, 1)
    assert (doc["state"], doc["failure_reason"]) == ("failed", "adapter_incompatible")
    detail = doc["failure_detail"]
    assert {r["code"] for r in detail["reasons"]} == codes
    assert detail["total"] == len(detail["reasons"]) == (8 if variant == "other_shapes" else 3)
    assert detail["message"].startswith("the adapter does not fit its base acme/llm@1: ")
    assert doc["adapter_of"]["check"]["refusals"] == detail["reasons"]
    assert doc["manifest_digest"] is None, "a refused adapter is never signed"
    [failed] = events(container, "version.failed", f"{TENANT}/{ADAPTER}@1")
    assert failed["reason"] == "adapter_incompatible" and failed["reasons"] == detail["reasons"]


def test_a_pickle_adapter_is_checked_by_its_config_and_a_planted_payload_is_flagged_unsafe_and_never_served(
        container, people, in_prod):
    sam = people["tokens"]["sam"]
    with api(container) as client:
        assert submit(client, sam, tiny_adapter_files("pickle"), "acme/llm@1", label="clean").status_code == 202
        assert submit(client, sam, tiny_adapter_files("pickle_payload"), "acme/llm@1",
                      label="planted").status_code == 202
        drain(container)
        clean, planted = shown(client, sam, 1), shown(client, sam, 2)
        scans = client.get(f"/v1/models/{TENANT}/{ADAPTER}/versions/2/scans", headers=auth(sam)).json()
        manifest = client.get(f"/v1/models/{TENANT}/{ADAPTER}/manifest", params={"ref": "2"}, headers=auth(sam))
    # Its tensors are not unpickled to be checked: the check says so, and the scanner judges the file.
    assert clean["state"] == "awaiting_approval"
    assert [f["code"] for f in clean["adapter_of"]["check"]["findings"]] == ["adapter.weights-unchecked"]
    assert planted["adapter_of"]["check"]["refusals"] == []
    verdicts = {f["path"]: f["verdict"] for f in scans["files"]}
    assert verdicts["adapter_model.bin"] == "unsafe"
    assert (planted["state"], planted["failure_reason"]) == ("failed", "unsafe_file")
    # Never served: no approval reaches it, and no release is issued.
    assert manifest.status_code == 409 and manifest.json()["type"] == PROBLEMS + "not-approved"
    with container.session_factory() as session, pytest.raises(Exception) as refused:
        approvals.decide(session, people["sec"], TENANT, ADAPTER, 2,
                         approvals.ApprovalRequest("approve", "security", "", ["adapter_model.bin"]),
                         ports=container.ports)
    assert getattr(refused.value, "code", None) == "not-awaiting-approval"


def test_a_base_that_cannot_be_bound_is_refused_at_submission_and_nothing_is_created(container, people, in_prod,
                                                                                   tmp_path):
    sam = people["tokens"]["sam"]
    admin = people["admin"]
    files = tiny_adapter_files("lora")
    # Another tenant's sealed model: globex/llm@1, which sam cannot read.
    globex = make_admin(container, "globex")
    submit_directory(container, globex, tmp_path / "globex", "globex", "llm", tiny_llm_files(1))
    _, globex_manifest = _manifest_of(container, "globex", "llm", 1)
    # acme/llm@2, submitted and not sealed yet.
    submit_directory(container, admin, tmp_path / "v2", TENANT, NAME, tiny_llm_files(2), run_jobs=False)
    refusals = {
        "acme/nope@1": (404, "adapter-base-not-found"),
        "acme/llm@9": (404, "adapter-base-not-found"),
        "acme/llm@staging": (404, "adapter-base-not-found"),
        "sha256:" + "0" * 64: (404, "adapter-base-not-found"),
        "globex/llm@1": (404, "adapter-base-not-found"),
        f"sha256:{globex_manifest}": (404, "adapter-base-not-found"),
        "acme/llm@2": (409, "adapter-base-unusable"),
        "acme/llm": (422, "invalid-input"),
        "acme/llm@01": (422, "invalid-ref"),
        "sha256:ABC": (422, "invalid-input"),
    }
    with api(container) as client:
        for ref, (status, problem) in refusals.items():
            r = submit(client, sam, files, ref)
            assert (r.status_code, r.json()["type"]) == (status, PROBLEMS + problem), (ref, r.text)
            assert r.headers["content-type"] == "application/problem+json"
        assert submit(client, sam, files, "acme/llm@2").json()["reason"] == "not-sealed"
        # Nothing half-written: no model, no version, no binding.
        assert client.get(f"/v1/models/{TENANT}/{ADAPTER}/versions", headers=auth(sam)).status_code == 404
        # An adapter is a version of its own model.
        same = submit(client, sam, files, "acme/llm@1", name=NAME)
        assert (same.status_code, same.json()["reason"]) == (409, "same-model")
        # An adapter is no base.
        assert submit(client, sam, files, "acme/llm@1").status_code == 202
        drain(container)
        nested = submit(client, sam, tiny_adapter_files("other_shapes"), "acme/llm-support@1", name="nested")
        assert (nested.status_code, nested.json()["reason"]) == (409, "adapter"), nested.text
        # A principal who may read in globex (a submitter there) may bind to its model.
        reader = person(container, "rae", TENANT, ("submitter", ""))
        with container.session_factory() as session:
            rae = session.scalar(select(Principal).where(Principal.name == "rae"))
            globex_id = session.scalar(select(Tenant.id).where(Tenant.name == "globex"))
            session.add(RoleBinding(principal_id=rae.id, tenant_id=globex_id, role="submitter", capacity=""))
            session.commit()
        crossed = submit(client, reader, files, "globex/llm@1", name="globex-support")
        assert crossed.status_code == 202, crossed.text
        assert crossed.json()["adapter_of"]["model"] == "globex/llm"
        # A revoked base: by number and through the alias that points at it.
        with container.session_factory() as session:
            revocations.revoke(session, admin, TENANT, NAME, 1, "bad weights", clock=container.clock)
        for ref in ("acme/llm@1", "acme/llm@prod"):
            r = submit(client, sam, tiny_adapter_files("pickle"), ref)
            assert (r.status_code, r.json()["reason"]) == (409, "revoked"), (ref, r.text)


def _manifest_of(container, tenant: str, name: str, number: int) -> tuple[str, str]:
    with container.session_factory() as session:
        version = versions.find_version_unchecked(session, tenant, name, number)
        return version.state, version.manifest_digest


def test_a_base_revoked_before_the_adapter_is_sealed_fails_the_adapter(container, people, in_prod):
    sam = people["tokens"]["sam"]
    with api(container) as client:
        assert submit(client, sam, tiny_adapter_files("lora"), "acme/llm@1").status_code == 202
        with container.session_factory() as session:
            revocations.revoke(session, people["admin"], TENANT, NAME, 1, "bad weights", clock=container.clock)
        drain(container)
        doc = shown(client, sam, 1)
    assert (doc["state"], doc["failure_reason"]) == ("failed", "adapter_base_unusable")
    assert doc["failure_detail"]["reason"] == "revoked"


def test_an_adapter_from_a_hub_is_bound_as_one_uploaded(container, people, in_prod):
    from tests.support.hf_upstream import HfUpstream

    with HfUpstream() as hub:
        container.settings.hf_allowed_endpoints.append(hub.url)
        hub.add_repo("org/llm-support")
        hub.commit("org/llm-support", tiny_adapter_files("lora"))
        with container.session_factory() as session:
            version, created = versions.submit(
                session, people["admin"], TENANT, ADAPTER,
                SubmitRequest(source="hf://org/llm-support", hf_endpoint=hub.url, adapter_of="acme/llm@prod"),
                open_source=container.open_source, limits=container.limits(), ports=container.ports)
            number = version.number
        drain(container)
    with container.session_factory() as session:
        version = versions.find_version_unchecked(session, TENANT, ADAPTER, number)
        assert version.state == "awaiting_approval", version.failure_detail
        assert adapters.binding_document(version)["requested"] == "acme/llm@prod"
        adapters.verify_binding(version, container.ports.signer.public_key)


def test_a_unit_derived_from_an_adapter_is_bound_to_the_same_base(container, people, in_prod):
    sam = people["tokens"]["sam"]
    with api(container) as client:
        assert submit(client, sam, tiny_adapter_files("lora"), "acme/llm@1").status_code == 202
        drain(container)
        r = client.post(f"/v1/models/{TENANT}/{ADAPTER}/versions/1/derive",
                        json={"prompts": {"support": "Help {{ customer }}.\n"}}, headers=auth(sam))
        assert r.status_code == 202, r.text
        assert r.json()["adapter_of"]["version"] == 1 and r.json()["derived_from"] == 1
        drain(container)
        assert shown(client, sam, 2)["state"] == "awaiting_approval"

