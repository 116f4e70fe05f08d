"""An adapter's binding to its base (issue 34, part 1) through the API and the real pipeline, on SQLite and
PostgreSQL: acme/llm@1 (the tiny Llama, approved and in prod) is the base; an adapter PEFT made for it is submitted
``adapter_of`` it, bound to its weights digest, signed with the binding, scanned, evaluated and approved, from an
upload, a hub or a derive alike. A base that is missing, in a tenant the submitter cannot read, unsealed, revoked or
an adapter itself is refused at submission (problem+json, nothing created), and one revoked before the adapter's
seal fails it there."""

from __future__ import annotations

import base64
import json

import pytest
from sqlalchemy import select

from registry.db.models import AdapterBinding, EvalResult, Principal, RoleBinding, Tenant
from registry.domain.errors import AdapterBindingMismatchError, SignatureError
from registry.services import adapters, revocations, versions
from registry.services.versions import SubmitRequest
from tests.support.adapter_submissions import (
    ADAPTER,
    PROBLEMS,
    api,
    approve_adapter,
    auth,
    base_row,
    events,
    shown,
    submit_adapter,
    version_digest,
)
from tests.support.registry import drain, make_admin, person
from tests.support.release_unit import NAME, TENANT, build_in_prod
from tests.support.releases import submit_directory
from tests.support.tiny_adapter import tiny_adapter_files
from tests.support.tiny_llm import tiny_llm_files

pytestmark = pytest.mark.seeded(builder=build_in_prod)


def test_an_adapter_is_bound_to_its_bases_weights_checked_signed_and_approved(container, people, in_prod):
    sam = people["tokens"]["sam"]
    weights, manifest = base_row(container)
    with api(container) as client:
        r = submit_adapter(client, sam, tiny_adapter_files("lora"), "acme/llm@1")
        assert r.status_code == 202, r.text
        assert r.json()["adapter_of"] == {"model": "acme/llm", "version": 1, "weights_digest": weights,
                                          "manifest_digest": manifest, "requested": "acme/llm@1", "check": None}
        drain(container)
        doc = shown(client, sam, 1)
        assert doc["state"] == "awaiting_approval", doc["failure_detail"]
        # The same files bound to the same base, named by alias or digest: the one version.
        for ref in ("acme/llm@prod", f"sha256:{manifest}", "modelreg://acme/llm@1"):
            again = submit_adapter(client, sam, tiny_adapter_files("lora"), ref)
            assert (again.status_code, again.json()["version"]) == (200, 1), again.text
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
    with container.session_factory() as session:
        evals = session.scalars(select(EvalResult).where(EvalResult.version_id == version.id)).all()
        assert [(e.suite, e.status) for e in evals] == [("sanity", "completed")]
    assert approve_adapter(container, people, 1) == "approved"


def test_a_base_that_cannot_be_bound_is_refused_at_submission_and_nothing_is_created(container, people, in_prod,
                                                                                   tmp_path):
    sam = people["tokens"]["sam"]
    admin = people["admin"]
    files = tiny_adapter_files("lora")
    # Another tenant's sealed model: globex/llm@1, which sam cannot read.
    globex = make_admin(container, "globex")
    submit_directory(container, globex, tmp_path / "globex", "globex", "llm", tiny_llm_files(1))
    _, globex_manifest = version_digest(container, "globex", "llm", 1)
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
            r = submit_adapter(client, sam, files, ref)
            assert (r.status_code, r.json().get("type")) == (status, PROBLEMS + problem), (ref, r.text)
            assert r.headers["content-type"] == "application/problem+json"
        assert submit_adapter(client, sam, files, "acme/llm@2").json()["reason"] == "not-sealed"
        # Nothing half-written: no model, no version, no binding.
        assert client.get(f"/v1/models/{TENANT}/{ADAPTER}/versions", headers=auth(sam)).status_code == 404
        # An adapter is a version of its own model.
        same = submit_adapter(client, sam, files, "acme/llm@1", name=NAME)
        assert (same.status_code, same.json()["reason"]) == (409, "same-model")
        # An adapter is no base.
        assert submit_adapter(client, sam, files, "acme/llm@1").status_code == 202
        drain(container)
        # The same files bound to another base version (acme/llm@2, sealed now) are another version.
        rebound = submit_adapter(client, sam, files, "acme/llm@2")
        assert rebound.status_code == 202, rebound.text
        assert (rebound.json()["version"], rebound.json()["adapter_of"]["version"]) == (2, 2)
        nested = submit_adapter(client, sam, tiny_adapter_files("other_shapes"), "acme/llm-support@1", name="nested")
        assert (nested.status_code, nested.json()["reason"]) == (409, "adapter"), nested.text
        # A principal who may read in globex (a submitter there) may bind to its model.
        reader = person(container, "rae", TENANT, ("submitter", ""))
        with container.session_factory() as session:
            rae = session.scalar(select(Principal).where(Principal.name == "rae"))
            globex_id = session.scalar(select(Tenant.id).where(Tenant.name == "globex"))
            session.add(RoleBinding(principal_id=rae.id, tenant_id=globex_id, role="submitter", capacity=""))
            session.commit()
        crossed = submit_adapter(client, reader, files, "globex/llm@1", name="globex-support")
        assert crossed.status_code == 202, crossed.text
        assert crossed.json()["adapter_of"]["model"] == "globex/llm"
        # A revoked base: by number and through the alias that points at it.
        with container.session_factory() as session:
            revocations.revoke(session, admin, TENANT, NAME, 1, "bad weights", clock=container.clock)
        for ref in ("acme/llm@1", "acme/llm@prod"):
            r = submit_adapter(client, sam, tiny_adapter_files("pickle"), ref)
            assert (r.status_code, r.json()["reason"]) == (409, "revoked"), (ref, r.text)


def test_a_base_revoked_before_the_adapter_is_sealed_fails_the_adapter(container, people, in_prod):
    sam = people["tokens"]["sam"]
    with api(container) as client:
        assert submit_adapter(client, sam, tiny_adapter_files("lora"), "acme/llm@1").status_code == 202
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
        assert submit_adapter(client, sam, tiny_adapter_files("lora"), "acme/llm@1").status_code == 202
        drain(container)
        r = client.post(f"/v1/models/{TENANT}/{ADAPTER}/versions/1/derive",
                        json={"prompts": {"support": "Help {{ customer }}.\n"}}, headers=auth(sam))
        assert r.status_code == 202, r.text
        assert r.json()["adapter_of"]["version"] == 1 and r.json()["derived_from"] == 1
        drain(container)
        assert shown(client, sam, 2)["state"] == "awaiting_approval"

