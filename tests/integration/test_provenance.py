"""The ten provenance questions through the HTTP API, on SQLite and PostgreSQL, on one realistic history
(``tests/support/provenance_world.py``): each answer is held to what the history's people did, and to what
the registry's other endpoints say of the same versions."""

from __future__ import annotations

import datetime as dt

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import select, update

from api.app import create_app
from registry import audit
from registry.auth import issue_token
from registry.bootstrap import bootstrap
from registry.db.models import AuditEvent, Principal, ReleaseIssuance
from registry.settings import Settings
from tests.support import db as dbsupport
from tests.support.hf_upstream import HfUpstream
from tests.support.provenance_world import build, hub_repos
from tests.support.registry import drain


@pytest.fixture(scope="module")
def hub():
    with HfUpstream() as upstream:
        upstream.shas = hub_repos(upstream)
        yield upstream


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request, hub, tmp_path_factory, signing_key_pem):
    """The history, built once per database (it runs the whole pipeline seven times)."""
    tmp = tmp_path_factory.mktemp(f"provenance-{request.param}")
    if request.param == "sqlite":
        url = dbsupport.sqlite_copy(request.getfixturevalue("sqlite_template"), tmp)
    else:
        url = request.getfixturevalue("pg_url")
        dbsupport.truncate_all(url)
    settings = Settings(signing_key_pem=SecretStr(signing_key_pem), local_source_roots=[tmp], data_dir=tmp / "data",
                        database_url=url, blob_store_url=(tmp / "blobs").as_uri(),
                        presign_secret=SecretStr("test-presign-secret-0123456789ab"),
                        hf_allowed_endpoints=[hub.url],
                        job_backoff_base_seconds=0.05, job_backoff_max_seconds=0.2)
    container = bootstrap(settings)
    with container.session_factory() as session:
        root = Principal(name="root", is_admin=True)
        session.add(root)
        session.flush()
        token = issue_token(session, root).token
        session.commit()
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        w = build(client, token, hub, hub.shas, settle=lambda: drain(container))
        w.container = container
        yield w
    container.dispose()


def ok(response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


def test_origin_of_an_alias_and_of_a_version(world):
    doc = ok(world.ask("aud-acme", "acme/llm/origin", ref="prod"))
    # prod was rolled back to version 1: submitted from the v1.0 tag, which resolved to its commit.
    assert (doc["version"], doc["ref"]["alias"], doc["ref"]["canary"]) == (1, "prod", None)
    assert doc["source"] == {"kind": "hf", "repo": "org/llm", "endpoint": world.hub.url}
    assert (doc["requested_revision"], doc["resolved_revision"]) == ("v1.0", world.shas["v1.0"])
    assert doc["submitted_by"] == "sam" and doc["revocation"] is None
    submitted = dt.datetime.fromisoformat(world.version("acme/llm", 1)["created_at"].replace("Z", "+00:00"))
    assert dt.datetime.fromisoformat(doc["submitted_at"]) == submitted
    staging = ok(world.ask("aud-acme", "acme/llm/origin", ref="staging"))["ref"]
    # An alias with a canary: the answer is of its main version, and says which version the canary is.
    assert (staging["version"], staging["canary"]["version"], staging["canary"]["tenants"]) == (2, 1, ["beta"])
    three = ok(world.ask("aud-acme", "acme/llm/origin", ref="3"))
    assert (three["requested_revision"], three["resolved_revision"]) == ("main", world.shas["main-3"])
    assert three["state"] == "revoked" and three["revocation"]["by"] == "sec"
    assert three["revocation"]["reason"] == "unsafe tokenizer"


def test_files_and_the_key_that_signed_them(world):
    doc = ok(world.ask("aud-acme", "acme/llm/files", ref="2"))
    version = world.version("acme/llm", 2)
    assert doc["files"] == [{"path": f["path"], "size": f["size"], "sha256": f["sha256"]} for f in version["files"]]
    assert doc["manifest_digest"] == version["manifest_digest"]
    key = doc["signed_by"]
    assert key["key_id"] == version["signing_key_id"]
    published = ok(world.client.get("/v1/keys"))["keys"]
    assert {k["key_id"]: k["public_key_pem"] for k in published}[key["key_id"]] == key["public_key_pem"]
    assert key["algorithm"] == "ecdsa-p256-sha256" and key["trust_root_versions"] == [1]
    assert len(key["fingerprint_sha256"]) == 64
    # Paged: two at a time, the same files in the same order.
    pages, cursor = [], None
    while True:
        page = ok(world.ask("aud-acme", "acme/llm/files", ref="2", limit=2, **({"cursor": cursor} if cursor else {})))
        pages += page["files"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == doc["files"]


def test_scans_per_file_with_scanner_names_and_versions(world):
    doc = ok(world.ask("aud-acme", "acme/llm/scans", ref="1"))
    served = ok(world.client.get("/v1/models/acme/llm/versions/1/scans", headers=world.auth("aud-acme")))
    assert doc["files"] == served["files"]
    assert {f["path"] for f in doc["files"]} == {f["path"] for f in world.version("acme/llm", 1)["files"]}
    for f in doc["files"]:
        assert f["verdict"] == "safe", f
        assert f["scans"] and all(s["scanner"] and s["scanner_version"] for s in f["scans"])


def test_evals_with_suite_and_runner_versions(world):
    doc = ok(world.ask("aud-acme", "acme/llm/evals", ref="prod"))
    assert [(e["suite"], e["runner"], e["status"]) for e in doc["evals"]] == [("sanity", "weights-sanity", "completed")]
    e = doc["evals"][0]
    assert len(e["suite_version"]) == 64 and e["runner_version"]
    served = ok(world.client.get("/v1/models/acme/llm/versions/1/evals", headers=world.auth("aud-acme")))
    assert served["evals"][0]["suite_version"] == e["suite_version"]


def test_license_where_it_was_found_and_who_approved_it(world):
    nc = ok(world.ask("aud-acme", "acme/nc/license", ref="1"))
    assert nc["license"] == "CC-BY-NC-4.0" or nc["license"].lower() == "cc-by-nc-4.0"
    assert not nc["allow_listed"] and nc["license_capacity"] == "legal"
    assert "card" in {f["source"] for f in nc["findings"]}
    assert [(a["principal"], a["capacity"]) for a in nc["approved_by"]] == [("lex", "legal")]
    mit = ok(world.ask("aud-acme", "acme/llm/license", ref="1"))
    assert mit["license"].lower() == "mit" and mit["allow_listed"] and mit["approved_by"] == []
    assert mit["policy_decision"]["outcome"] == "approved"


def test_approvals_and_separation_of_duties(world):
    doc = ok(world.ask("aud-acme", "acme/llm/approvals", ref="2"))
    assert [(a["principal"], a["capacity"], a["decision"]) for a in doc["approvals"]] == [
        ("sec", "security", "approve"), ("mia", "ml", "approve")]
    assert all(a["at"] for a in doc["approvals"])
    sod = doc["separation_of_duties"]
    assert sod == {"held": True, "reasons": [], "required_capacities": ["security", "ml"], "submitter": "sam"}
    pending = ok(world.ask("aud-acme", "acme/llm/approvals", ref="4"))["separation_of_duties"]
    assert not pending["held"] and pending["reasons"] == ["no approval in capacity ml by anyone but the submitter"]


def test_alias_history_and_what_it_pointed_at_then(world):
    doc = ok(world.ask("aud-acme", "acme/llm/aliases/prod"))
    moves = [(m["action"], m["by"], m["from_version"], m["to_version"], m["to_canary"]) for m in doc["moves"]]
    assert moves == [("promote", "mia", None, 1, None),
                     ("promote", "mia", 1, 2, {"version": 3, "tenants": ["beta"]}),
                     ("rollback", "mia", 2, 1, None)]
    assert doc["version"] == 1 and doc["canary"] is None
    for when, version, canary in (("before", None, None), ("prod-1", 1, None),
                                  ("prod-2", 2, {"version": 3, "tenants": ["beta"]}), ("rollback", 1, None)):
        at = ok(world.ask("aud-acme", "acme/llm/aliases/prod", at=world.times[when]))["at"]
        assert (at["version"], at["canary"]) == (version, canary), when
    page = ok(world.ask("aud-acme", "acme/llm/aliases/prod", limit=2))
    rest = ok(world.ask("aud-acme", "acme/llm/aliases/prod", limit=2, cursor=page["next_cursor"]))
    assert page["moves"] + rest["moves"] == doc["moves"] and rest["next_cursor"] is None
    naive = world.ask("aud-acme", "acme/llm/aliases/prod", at="2026-01-01T00:00:00")
    assert naive.status_code == 422 and naive.json()["type"].endswith("/invalid-input")
    missing = world.ask("aud-acme", "acme/llm/aliases/preview")
    assert missing.status_code == 404 and missing.json()["type"].endswith("/alias-not-found")


def test_nodes_that_received_a_version_and_nodes_left_on_a_revoked_one(world):
    with world.container.session_factory() as session:
        issued = session.execute(select(ReleaseIssuance.principal, ReleaseIssuance.version)
                                 .where(ReleaseIssuance.model == "acme/llm")).all()
    two = ok(world.ask("aud-acme", "acme/llm/nodes", ref="2"))
    assert [(n["principal"], n["count"], n["refs"]) for n in two["nodes"]] == [("node-1", 1, ["prod"]),
                                                                               ("node-3", 1, ["2"])]
    assert sum(n["count"] for n in two["nodes"]) == sum(1 for _, v in issued if v == 2)
    three = ok(world.ask("aud-acme", "acme/llm/nodes", ref="3"))
    assert [(n["principal"], n["count"], n["for_tenants"]) for n in three["nodes"]] == [("node-2", 2, ["beta"])]
    assert three["nodes"][0]["first_at"] <= three["nodes"][0]["last_at"]
    revoked = ok(world.client.get("/v1/provenance/revoked-nodes", headers=world.auth("aud-acme"),
                                  params={"tenant": "acme"}))
    # node-1 last got version 1 (after the rollback), node-3 version 2: only node-2 is left on a revoked one.
    assert [(n["principal"], n["model"], n["version"]) for n in revoked["nodes"]] == [("node-2", "acme/llm", 3)]
    assert revoked["nodes"][0]["revocation"]["reason"] == "unsafe tokenizer"
    assert ok(world.client.get("/v1/provenance/revoked-nodes", headers=world.auth("aud-globex"),
                               params={"tenant": "globex"}))["nodes"] == []


def test_versions_holding_a_blob_only_in_the_tenants_the_auditor_audits(world):
    shared = f"sha256:{world.shared_digest}"
    acme = ok(world.client.get(f"/v1/provenance/blobs/{shared}", headers=world.auth("aud-acme")))
    assert [(v["model"], v["version"]) for v in acme["versions"]] == [("acme/llm", 1)]
    globex = ok(world.client.get(f"/v1/provenance/blobs/{shared}", headers=world.auth("aud-globex")))
    assert [(v["model"], v["version"]) for v in globex["versions"]] == [("globex/llm", 1)]
    assert acme["versions"][0]["path"] == globex["versions"][0]["path"]
    admin = ok(world.client.get(f"/v1/provenance/blobs/{shared}", headers=world.auth("admin")))
    assert {(v["model"], v["version"]) for v in admin["versions"]} == {("acme/llm", 1), ("globex/llm", 1)}
    # globex's own weights: acme's auditor learns nothing of them, not even that they exist.
    hidden = world.client.get(f"/v1/provenance/blobs/sha256:{world.globex_only_digest}", headers=world.auth("aud-acme"))
    unknown = world.client.get(f"/v1/provenance/blobs/sha256:{'0' * 64}", headers=world.auth("aud-acme"))
    assert ok(hidden)["versions"] == [] and hidden.json()["versions"] == unknown.json()["versions"]
    refused = world.client.get(f"/v1/provenance/blobs/{shared}", headers=world.auth("node-1"))
    assert refused.status_code == 403 and refused.json()["type"].endswith("/permission-denied")


def test_an_auditor_of_one_tenant_sees_nothing_of_another(world):
    for question in ("origin", "files", "scans", "evals", "license", "approvals", "nodes"):
        there = world.ask("aud-acme", f"globex/llm/{question}", ref="1")
        absent = world.ask("aud-acme", f"globex/none/{question}", ref="1")
        assert there.status_code == 403, (question, there.text)
        assert (there.status_code, there.content) == (absent.status_code, absent.content), question
        assert "globex/llm" not in there.text
    assert world.ask("aud-acme", "globex/llm/aliases/prod").status_code == 403
    revoked = world.client.get("/v1/provenance/revoked-nodes", headers=world.auth("aud-acme"),
                               params={"tenant": "globex"})
    assert revoked.status_code == 403
    # Its own tenant's questions are answered; the submitter, who is no auditor, is refused them.
    assert world.ask("aud-globex", "globex/llm/origin", ref="prod").status_code == 200
    assert world.ask("sam", "acme/llm/origin", ref="1").status_code == 403


def test_bad_refs_and_pages_are_problems(world):
    for ref in ("01", "Prod", "1" * 12, ""):
        r = world.ask("aud-acme", "acme/llm/origin", ref=ref)
        assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", ref
    assert world.ask("aud-acme", "acme/llm/origin", ref="99").json()["type"].endswith("/version-not-found")
    assert world.ask("aud-acme", "acme/llm/origin", ref="preview").json()["type"].endswith("/alias-not-found")
    assert world.ask("aud-acme", "acme/llm/files", ref="1", limit=1001).status_code == 422
    for cursor in ("not-a-move", "bm90LWEtbW92ZQ", "AA", "_w", "x" * 1501):
        r = world.ask("aud-acme", "acme/llm/aliases/prod", cursor=cursor)
        assert r.status_code == 422 and r.json()["type"].endswith("/invalid-input"), cursor
    for at in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"):
        answer = ok(world.ask("aud-acme", "acme/llm/aliases/prod", at=at))
        assert answer["at"]["version"] == (None if at[0] == "0" else 1)


def test_the_audit_log_against_saved_checkpoints(world):
    container = world.container
    with container.session_factory() as session:
        assert audit.checkpoint(session, container.signing_key) is not None
    saved = ok(world.client.get("/v1/audit/checkpoints", headers=world.auth("aud-acme")))
    newest = max(c["event_id"] for c in saved)
    # Events after the checkpoint: more decisions.
    world.call("gsec", "POST", "/v1/models/globex/solo/versions/1/approvals",
               json={"decision": "approve", "capacity": "security"})

    def check(checkpoints):
        return world.client.post("/v1/provenance/audit-log", headers=world.auth("aud-acme"),
                                 json={"checkpoints": checkpoints})

    doc = ok(check(saved))
    assert doc["intact"] and doc["broken"] is None and doc["checkpoints"] == len(saved)
    assert doc["newest_checkpoint"]["event_id"] == newest and doc["events_since_checkpoint"] >= 1
    assert doc["events"] == newest + doc["events_since_checkpoint"]

    forged = [{**saved[-1], "envelope": {**saved[-1]["envelope"], "payload": saved[0]["envelope"]["payload"][::-1]}}]
    r = check(forged)
    assert r.status_code == 422 and r.json()["type"].endswith("/audit-checkpoint-invalid")
    assert check([{"envelope": "x"}] * 2).status_code == 422
    assert world.client.post("/v1/provenance/audit-log", headers=world.auth("node-1"),
                             json={"checkpoints": saved}).status_code == 403

    # Someone with the database rewrites an event before the checkpoint: the chain no longer holds.
    with container.session_factory() as session:
        original = session.scalar(select(AuditEvent.actor).where(AuditEvent.id == 3))
        session.execute(update(AuditEvent).where(AuditEvent.id == 3).values(actor="mallory"))
        session.commit()
    try:
        broken = ok(check(saved))
        assert not broken["intact"] and broken["broken"]["event_id"] == 3
        assert broken["broken"]["problem"] == "altered"
    finally:
        with container.session_factory() as session:
            session.execute(update(AuditEvent).where(AuditEvent.id == 3).values(actor=original))
            session.commit()
    assert ok(check(saved))["intact"]
