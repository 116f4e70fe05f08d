"""The event stream, ``GET /v1/events``, on SQLite and PostgreSQL: catalogue events read from the audit log.

A version goes through the real pipeline; every body is parsed by the ``cloudevents`` reference library.
What is checked: the catalogue's types in order, who sees which tenant's events, that a cursor never
skips or repeats an event however small the pages, that ``data`` carries only the catalogue's keys.
"""

from __future__ import annotations

import json

import pytest
from cloudevents.core.formats.json import JSONFormat
from fastapi.testclient import TestClient

from api.app import create_app
from registry import audit
from registry.domain import events as catalogue
from registry.services import revocations
from tests.integration.test_release_manifests import promote
from tests.support.registry import make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version

T, M = "acme", "llm"


@pytest.fixture
def stream(container, tmp_path):
    """acme/llm@1 submitted, approved, promoted to prod and revoked; tokens of acme's node, of another
    tenant's node, and the admin."""
    admin = make_admin(container, T)
    awaiting_version(container, admin, tmp_path / "v1", T, M)
    approve_standin(container, T, M, 1)
    promote(container, admin, 1)
    with container.session_factory() as session:
        revocations.revoke(session, admin, T, M, 1, "CVE-2099-1", clock=container.clock)
    tokens = {"node": role_token(container, "nod", T, "node"), "other": role_token(container, "onod", "beta", "node")}
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        yield client, tokens


def read(client, token, **params):
    r = client.get("/v1/events", headers={"Authorization": f"Bearer {token}"}, params=params)
    assert r.status_code == 200, r.text
    return r.json()


def parsed(event: dict):
    """The event as the CloudEvents reference library reads its structured JSON form."""
    return JSONFormat().read(None, json.dumps(event).encode())


def test_a_version_s_journey_is_the_catalogue_s_events_in_order_and_valid_cloudevents(stream):
    client, tokens = stream
    body = read(client, tokens["node"], tenant=T)
    mine = [e for e in body["events"] if e["subject"].startswith(f"{T}/{M}@")]
    assert [e["type"].removeprefix("dev.modelreg.") for e in mine] == [
        "version.submitted", "version.sealed", "version.scanned", "version.evaluated",
        "version.awaiting_approval", "version.approved", "alias.promoted", "version.revoked"]
    for event in mine:
        ce = parsed(event)
        assert ce.get_specversion() == "1.0" and ce.get_source() == f"/modelreg/tenants/{T}"
        assert ce.get_type() in catalogue.TYPES and ce.get_data()["tenant"] == T
    revoked = mine[-1]
    assert revoked["data"]["version"] == 1 and revoked["data"]["reason"] == "CVE-2099-1"
    assert revoked["data"]["aliases"] == ["prod"]
    assert mine[-2]["data"]["alias"] == "prod" and mine[-2]["data"]["to"] == 1
    # The derived event has its own id, made of its audit event's: redelivered, it is the same.
    assert mine[2]["data"]["state"] == "evaluating"
    evaluated, arrived = mine[3], mine[4]
    assert arrived["id"] == f"{evaluated['id']}.version.awaiting_approval"
    assert len({e["id"] for e in body["events"]}) == len(body["events"])


def test_a_cursor_reads_every_event_once_however_small_the_pages(stream):
    client, tokens = stream
    whole = read(client, tokens["node"], limit=1000)
    seen, cursor = [], 0
    for _ in range(500):
        page = read(client, tokens["node"], after=cursor, limit=1)
        seen += page["events"]
        if page["cursor"] == cursor:
            break
        assert page["cursor"] > cursor
        cursor = page["cursor"]
    assert [e["id"] for e in seen] == [e["id"] for e in whole["events"]]
    # Nothing after the end: the same cursor comes back, with no events.
    assert read(client, tokens["node"], after=whole["cursor"]) == {"events": [], "cursor": whole["cursor"]}


def test_a_tenant_s_events_are_seen_only_by_principals_of_that_tenant(stream, container):
    client, tokens = stream
    with container.session_factory() as session:  # the registry's own event, as a rotation writes it
        audit.append(session, actor="admin", action="trust_root.rotated", subject="trust-root/2",
                     details={"version": 2, "key_ids": ["k1", "k2"], "threshold": 1, "signed_by": ["k1"]})
        session.commit()
    others = read(client, tokens["other"])["events"]
    assert [e["type"] for e in others] == ["dev.modelreg.trust_root.rotated"], others
    assert others[0]["source"] == "/modelreg" and others[0]["data"]["threshold"] == 1
    assert read(client, tokens["node"], type="trust_root.rotated")["events"] == others
    r = client.get("/v1/events", headers={"Authorization": f"Bearer {tokens['other']}"}, params={"tenant": T})
    assert r.status_code == 403 and r.json()["type"].endswith("permission-denied")
    assert client.get("/v1/events").status_code == 401


def test_types_narrow_the_stream_and_unknown_types_are_refused(stream):
    client, tokens = stream
    short = read(client, tokens["node"], type="version.revoked")["events"]
    long = read(client, tokens["node"], type="dev.modelreg.version.revoked")["events"]
    assert [e["type"] for e in short] == ["dev.modelreg.version.revoked"] and short == long
    both = read(client, tokens["node"], type=["alias.promoted", "version.awaiting_approval"])["events"]
    assert [e["type"] for e in both] == ["dev.modelreg.version.awaiting_approval", "dev.modelreg.alias.promoted"]
    r = client.get("/v1/events", headers={"Authorization": f"Bearer {tokens['node']}"},
                   params={"type": "version.exploded"})
    assert r.status_code == 422 and "version.exploded" in r.json()["detail"]
    many = client.get("/v1/events", headers={"Authorization": f"Bearer {tokens['node']}"},
                      params={"type": ["version.revoked"] * (2 * len(catalogue.NAMES) + 1)})
    assert many.status_code == 422 and "at most" in many.json()["detail"]


def test_data_carries_only_the_catalogue_s_keys(stream, container):
    client, tokens = stream
    with container.session_factory() as session:
        audit.append(session, actor="system", action="version.revoked", subject=f"{T}/{M}@1", tenant=T,
                     details={"reason": "again", "token": "s3cr3t", "contents": "AAAA"})
        session.commit()
    newest = read(client, tokens["node"], type="version.revoked")["events"][-1]
    assert newest["data"]["reason"] == "again"
    assert "s3cr3t" not in json.dumps(newest) and "AAAA" not in json.dumps(newest)
    assert set(newest["data"]) <= {"tenant", "model", "version", "actor", "state", "reason", "aliases"}


def test_a_version_failed_for_its_quota_is_also_a_quota_exceeded_event():
    row = catalogue.AuditRow(id=9, at="2026-12-02T00:00:00.000000Z", actor="system", action="version.failed",
                             subject="acme/llm@4", tenant="acme",
                             details={"state": "failed", "reason": "quota_exceeded", "used": 5, "limit": 6,
                                      "needed": 2, "message": "tenant 'acme' would exceed its quota"})
    failed, quota = catalogue.events_of(row)
    assert (failed.type, failed.id) == ("dev.modelreg.version.failed", "9")
    assert (quota.type, quota.id) == ("dev.modelreg.quota.exceeded", "9.quota.exceeded")
    assert quota.data == {"tenant": "acme", "model": "llm", "version": 4, "actor": "system", "used": 5,
                          "limit": 6, "needed": 2}
