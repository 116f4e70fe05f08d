"""Aliases, canaries, rollback and revocation through the HTTP API, on SQLite and PostgreSQL.

Versions go through the real pipeline to ``awaiting_approval``; ``approve_standin`` then makes them
approved through ``lifecycle.advance`` (a stand-in for the approvals flow, merged separately).
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from registry.db.models import AliasMove, AuditEvent, PolicyDecision, ScanResult, Version
from registry.scanning import SCANNER_VERSION
from registry.services import scans
from registry.services.stages import scanning as scanning_stage
from registry.sources.local import LocalDirectorySource
from tests.support import scan_samples
from tests.support.registry import drain, make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version
from tests.support.tiny_model import tiny_model_files

T, M = "acme", "llm"
BASE = f"/v1/models/{T}/{M}"


def build_world(container, root):
    """acme/llm versions 1 and 2 approved, 3 awaiting approval; a token per kind of caller."""
    admin = make_admin(container, T)
    for seed in (1, 2, 3):
        awaiting_version(container, admin, root / f"v{seed}", T, M, seed=seed)
    for number in (1, 2):
        approve_standin(container, T, M, number)
    for tenant in ("beta", "gamma", "delta"):  # the tenants aliases are resolved for (canaries', another)
        make_admin(container, tenant)
    tokens = {
        "ml": role_token(container, "mia", T, "approver", "ml"),
        "security": role_token(container, "sam", T, "approver", "security"),
        "submitter": role_token(container, "sub", T, "submitter"),
        "node": role_token(container, "nod", T, "node"),
        "tenant-admin": role_token(container, "tad", T, "admin"),
        "registry-admin": role_token(container, "root", "other", "auditor"),
    }
    with container.session_factory() as session:
        from registry.db.models import Principal

        session.query(Principal).filter_by(name="root").one().is_admin = True
        session.commit()
    return tokens


pytestmark = pytest.mark.seeded(builder=build_world)


@pytest.fixture
def world(container, seeded):
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        yield client, seeded


def _as(tokens, who):
    return {"Authorization": f"Bearer {tokens[who]}"}


def _resolve(client, tokens, who="node", **params):
    return client.get(f"{BASE}/aliases/prod/resolve", headers=_as(tokens, who), params=params)


def test_promote_to_prod_and_to_a_canary(world, container):
    client, tokens = world
    r = client.put(f"{BASE}/aliases/prod", headers=_as(tokens, "ml"), json={"version": 1, "comment": "first"})
    assert r.status_code == 200, r.text
    assert (r.json()["version"], r.json()["canary"], r.json()["updated_by"]) == (1, None, "mia")
    assert _resolve(client, tokens).json() | {"manifest_digest": None} == {
        "model": f"{T}/{M}", "alias": "prod", "for_tenant": T, "version": 1, "canary": False,
        "manifest_digest": None}
    r = client.put(f"{BASE}/aliases/prod", headers=_as(tokens, "ml"),
                   json={"version": 1, "canary": {"version": 2, "tenants": ["beta", "gamma"]},
                         "comment": "try 2"})
    assert r.status_code == 200, r.text
    assert r.json()["canary"] == {"version": 2, "tenants": ["beta", "gamma"]}
    # A canary tenant resolves the canary version; every other tenant the main one.
    for tenant in ("beta", "gamma"):
        found = _resolve(client, tokens, for_tenant=tenant).json()
        assert (found["version"], found["canary"]) == (2, True), tenant
    for params in ({"for_tenant": "delta"}, {"for_tenant": T}, {}):
        found = _resolve(client, tokens, **params).json()
        assert (found["version"], found["canary"]) == (1, False), params
    with container.session_factory() as session:
        v2 = session.scalar(select(Version).where(Version.number == 2))
        assert _resolve(client, tokens, for_tenant="beta").json()["manifest_digest"] == v2.manifest_digest
    # The history says who, when, from, to and why, newest first, with the policy that allowed each move.
    listed = client.get(f"{BASE}/aliases", headers=_as(tokens, "submitter")).json()
    assert [a["name"] for a in listed] == ["prod"]
    history = listed[0]["history"]
    assert [(m["action"], m["by"], m["from_version"], m["to_version"], m["comment"]) for m in history] == [
        ("promote", "mia", 1, 1, "try 2"), ("promote", "mia", None, 1, "first")]
    assert history[0]["from_canary"] is None
    assert history[0]["to_canary"] == {"version": 2, "tenants": ["beta", "gamma"]}
    with container.session_factory() as session:
        allowed = session.scalars(select(PolicyDecision).where(PolicyDecision.kind == "promotion")).all()
        assert [d.allowed for d in allowed] == [True, True]
        assert {(d.bundle_digest, d.input_digest) for d in allowed} == {
            (m["bundle_digest"], m["input_digest"]) for m in history}
        events = session.scalars(select(AuditEvent).where(AuditEvent.action == "alias.promoted")).all()
        assert [e.subject for e in events] == [f"{T}/{M}@prod"] * 2
        assert events[1].details["to_canary"]["version"] == 2
    # Pointing it where it points already moves nothing.
    r = client.put(f"{BASE}/aliases/prod", headers=_as(tokens, "ml"),
                   json={"version": 1, "canary": {"version": 2, "tenants": ["gamma", "beta"]}})
    assert r.status_code == 200 and len(r.json()["history"]) == 2


def test_rollback_restores_the_previous_version_in_one_call(world, container):
    client, tokens = world
    for version in (1, 2):
        r = client.put(f"{BASE}/aliases/prod", headers=_as(tokens, "ml"), json={"version": version})
        assert r.status_code == 200, r.text
    assert _resolve(client, tokens).json()["version"] == 2
    r = client.post(f"{BASE}/aliases/prod/rollback", headers=_as(tokens, "ml"), json={"comment": "2 is slow"})
    assert r.status_code == 200, r.text
    assert r.json()["version"] == 1 and _resolve(client, tokens).json()["version"] == 1
    assert (r.json()["history"][0]["action"], r.json()["history"][0]["from_version"],
            r.json()["history"][0]["comment"]) == ("rollback", 2, "2 is slow")
    # 1 was the alias's first target: a second rollback has nowhere to go, and says so.
    r = client.post(f"{BASE}/aliases/prod/rollback", headers=_as(tokens, "ml"))
    assert r.status_code == 409 and r.json()["type"].endswith("/nothing-to-roll-back")
    assert _resolve(client, tokens).json()["version"] == 1
    r = client.post(f"{BASE}/aliases/staging/rollback", headers=_as(tokens, "ml"))
    assert r.status_code == 404 and r.json()["type"].endswith("/alias-not-found")
    with container.session_factory() as session:
        assert [e.details["to"] for e in session.scalars(select(AuditEvent).where(
            AuditEvent.action == "alias.rolled_back"))] == [1]


def test_a_canary_rollout_rolls_back_to_the_canary(world):
    client, tokens = world
    moves = [{"version": 1}, {"version": 1, "canary": {"version": 2, "tenants": ["beta"]}}, {"version": 2}]
    for body in moves:
        assert client.put(f"{BASE}/aliases/prod", headers=_as(tokens, "ml"), json=body).status_code == 200
    back = client.post(f"{BASE}/aliases/prod/rollback", headers=_as(tokens, "ml")).json()
    assert (back["version"], back["canary"]) == (1, {"version": 2, "tenants": ["beta"]})


def test_promoting_a_version_not_approved_is_refused_by_policy(world, container):
    client, tokens = world
    for body in ({"version": 3}, {"version": 1, "canary": {"version": 3, "tenants": ["beta"]}}):
        r = client.put(f"{BASE}/aliases/prod", headers=_as(tokens, "registry-admin"), json=body)
        assert r.status_code == 403 and r.json()["type"].endswith("/promotion-denied"), r.text
        assert any("not-approved" in u["code"] for u in r.json()["unmet"])
        assert "awaiting_approval" in r.json()["detail"]
    with container.session_factory() as session:
        denied = session.scalars(select(PolicyDecision).where(PolicyDecision.kind == "promotion")).all()
        assert [d.allowed for d in denied] == [False, False]
        assert all(len(d.input_digest) == 64 for d in denied)
        assert session.scalars(select(AliasMove)).all() == []
    assert client.get(f"{BASE}/aliases", headers=_as(tokens, "ml")).json() == []
    r = client.put(f"{BASE}/aliases/prod", headers=_as(tokens, "ml"), json={"version": 9})
    assert r.status_code == 404 and r.json()["type"].endswith("/version-not-found")
    r = client.put(f"{BASE}/aliases/prod", headers=_as(tokens, "ml"),
                   json={"version": 1, "canary": {"version": 1, "tenants": ["beta"]}})
    assert r.status_code == 422 and r.json()["field"] == "canary.version"


def test_only_ml_approvers_and_admins_move_prod(world):
    client, tokens = world
    r = client.put(f"{BASE}/aliases/prod", headers=_as(tokens, "security"), json={"version": 1})
    assert r.status_code == 403 and r.json()["type"].endswith("/promotion-denied")
    assert [u["code"] for u in r.json()["unmet"]] == ["promotion.not-permitted"]
    for who in ("submitter", "node"):
        r = client.put(f"{BASE}/aliases/prod", headers=_as(tokens, who), json={"version": 1})
        assert r.status_code == 403 and r.json()["type"].endswith("/permission-denied"), who
    assert client.get(f"{BASE}/aliases", headers=_as(tokens, "ml")).json() == []
    for version, who in ((1, "registry-admin"), (2, "tenant-admin"), (1, "ml")):
        r = client.put(f"{BASE}/aliases/prod", headers=_as(tokens, who), json={"version": version})
        assert r.status_code == 200 and r.json()["version"] == version, (who, r.text)
    r = client.post(f"{BASE}/aliases/prod/rollback", headers=_as(tokens, "security"))
    assert r.status_code == 403 and r.json()["type"].endswith("/promotion-denied")


def test_a_revoked_version_stops_resolving_and_cannot_be_promoted(world, container):
    client, tokens = world
    for body in ({"version": 2}, {"version": 1, "canary": {"version": 2, "tenants": ["beta"]}}):
        assert client.put(f"{BASE}/aliases/prod", headers=_as(tokens, "ml"), json=body).status_code == 200
    for who in ("ml", "submitter", "node"):
        r = client.post(f"{BASE}/versions/1/revoke", headers=_as(tokens, who), json={"reason": "no"})
        assert r.status_code == 403 and r.json()["type"].endswith("/permission-denied"), who
    r = client.post(f"{BASE}/versions/1/revoke", headers=_as(tokens, "security"),
                    json={"reason": "CVE-2099-7"})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "revoked"
    assert r.json()["revocation"]["by"] == "sam" and r.json()["revocation"]["reason"] == "CVE-2099-7"
    # Tenants on the main route get the problem, naming the version and the reason; the canary still resolves.
    r = _resolve(client, tokens)
    assert r.status_code == 409 and r.json()["type"] == "https://modelreg.dev/problems/revoked"
    assert (r.json()["version"], r.json()["reason"], r.json()["alias"]) == (1, "CVE-2099-7", "prod")
    assert f"{T}/{M}@1" in r.json()["detail"] and "CVE-2099-7" in r.json()["detail"]
    assert _resolve(client, tokens, for_tenant="beta").json()["version"] == 2
    # Never released again: no alias may point at it, not even by a rollback.
    for alias in ("prod", "staging"):
        r = client.put(f"{BASE}/aliases/{alias}", headers=_as(tokens, "registry-admin"), json={"version": 1})
        assert r.status_code == 403 and "revoked" in r.json()["detail"], r.text
    r = client.post(f"{BASE}/versions/1/revoke", headers=_as(tokens, "tenant-admin"),
                    json={"reason": "again"})
    assert r.status_code == 409 and r.json()["type"].endswith("/invalid-state")
    r = client.post(f"{BASE}/versions/2/revoke", headers=_as(tokens, "security"), json={"reason": ""})
    assert r.status_code == 422
    # Moved to an approved version, the alias resolves again.
    r = client.put(f"{BASE}/aliases/prod", headers=_as(tokens, "ml"), json={"version": 2})
    assert r.status_code == 200, r.text
    assert _resolve(client, tokens).json()["version"] == 2
    with container.session_factory() as session:
        event = session.scalars(select(AuditEvent).where(AuditEvent.action == "version.revoked")).one()
        assert (event.actor, event.subject, event.details["reason"], event.details["aliases"]) == (
            "sam", f"{T}/{M}@1", "CVE-2099-7", ["prod"])


def test_a_rescan_that_turns_a_file_unsafe_revokes_the_approved_versions_holding_it(container, tmp_path,
                                                                                   monkeypatch):
    admin = make_admin(container, T)
    files = tiny_model_files(6)
    files["extra.pkl"] = scan_samples.pip_main()
    # An older scanner let this file through: its cached verdicts are what the pipeline used.
    src = tmp_path / "old"
    for path, data in files.items():
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_bytes(data)
    with container.session_factory() as session:
        for f in LocalDirectorySource(str(src)).resolve(None).files:
            session.add(ScanResult(blob_digest=f.sha256, path=f.path, scanner="modelreg",
                                   scanner_version=SCANNER_VERSION, format="pickle", verdict="safe",
                                   findings=[]))
        session.commit()
    held = awaiting_version(container, admin, tmp_path / "a", T, "held", files=files)
    # The same file in a version still awaiting a decision: flagged for its reviewers, not revoked.
    awaiting_version(container, admin, tmp_path / "b", T, "held2", files=files)
    clean = awaiting_version(container, admin, tmp_path / "c", T, "clean", seed=9)
    approve_standin(container, T, "held", held)
    approve_standin(container, T, "clean", clean)
    token = role_token(container, "mia", T, "approver", "ml")
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        auth = {"Authorization": f"Bearer {token}"}
        for name, number in (("held", held), ("clean", clean)):
            r = client.put(f"/v1/models/{T}/{name}/aliases/prod", headers=auth, json={"version": number})
            assert r.status_code == 200, r.text
        # A scanner upgrade: the stage queues by the version and the job records under it.
        monkeypatch.setattr(scans, "SCANNER_VERSION", SCANNER_VERSION + "+next")
        monkeypatch.setattr(scanning_stage, "SCANNER_VERSION", SCANNER_VERSION + "+next")
        with container.session_factory() as session:
            scans.rescan_all(session, admin, ports=container.ports)
        drain(container)
        r = client.get(f"/v1/models/{T}/held/aliases/prod/resolve", headers=auth)
        assert r.status_code == 409 and r.json()["type"].endswith("/revoked")
        assert "extra.pkl" in r.json()["reason"]
        clean_prod = client.get(f"/v1/models/{T}/clean/aliases/prod/resolve", headers=auth)
        assert clean_prod.json()["version"] == clean
        shown = client.get(f"/v1/models/{T}/held/versions/{held}", headers=auth).json()
        assert shown["state"] == "revoked" and shown["revocation"]["by"] == "system"
    with container.session_factory() as session:
        states = {v.model.name: v.state for v in session.scalars(select(Version))}
        # The approved version is revoked; the one still awaiting a decision is flagged for its reviewers.
        assert states == {"held": "revoked", "held2": "awaiting_approval", "clean": "approved"}
        assert {v.model.name for v in session.scalars(select(Version)) if v.flagged_at} == {"held2"}
        event = session.scalars(select(AuditEvent).where(AuditEvent.action == "version.revoked")).one()
        assert (event.actor, event.details["files"], event.details["aliases"]) == (
            "system", ["extra.pkl"], ["prod"])
        assert json.dumps(event.details).count("extra.pkl") >= 2


def test_a_rollback_to_a_revoked_version_is_refused_not_skipped(world, container):
    client, tokens = world
    for version in (1, 2):
        r = client.put(f"{BASE}/aliases/prod", headers=_as(tokens, "ml"), json={"version": version})
        assert r.status_code == 200, r.text
    assert client.post(f"{BASE}/versions/1/revoke", headers=_as(tokens, "security"),
                       json={"reason": "bad weights"}).status_code == 200
    r = client.post(f"{BASE}/aliases/prod/rollback", headers=_as(tokens, "ml"))
    assert r.status_code == 403 and r.json()["unmet"][0]["code"] == "promotion.target-not-approved"
    assert "version 1 is revoked" in r.json()["detail"]
    assert _resolve(client, tokens).json()["version"] == 2
    with container.session_factory() as session:
        from registry import audit

        audit.verify(session)
