"""Retention rules: which versions a model keeps (the last N, aliased, approved within D days, still in
the pipeline), deleting the others with their audit trail kept, and what deletion means after."""

from __future__ import annotations

import datetime as dt

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from registry import audit
from registry.clock import ManualClock
from registry.db.models import AuditEvent, Blob, Version
from registry.domain.aliases import make_target
from registry.domain.errors import VersionDeletedError
from registry.services import aliases, gc, retention, versions
from registry.services.versions import SubmitRequest
from tests.support.registry import make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version

T, M = "acme", "llm"


def build_world(container, root):
    """acme/llm: 1 approved and prod, 2 and 3 approved, 4 awaiting approval, 5 approved."""
    admin = make_admin(container, T)
    for seed in range(1, 6):
        awaiting_version(container, admin, root / f"v{seed}", T, M, seed=seed)
    for number in (1, 2, 3, 5):
        approve_standin(container, T, M, number)
    with container.session_factory() as session:
        aliases.promote(session, admin, T, M, "prod", make_target(1, None, ()), policy=container.policy,
                        clock=container.clock)
    return admin


pytestmark = pytest.mark.seeded(builder=build_world)


@pytest.fixture
def world(seeded):
    return seeded


def later(days: float) -> ManualClock:
    return ManualClock(dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=days))


def set_rule(container, admin, keep_last, within):
    with container.session_factory() as session:
        retention.set_rule(session, admin, T, M, keep_last=keep_last, approved_within_days=within,
                           clock=container.clock)


def apply(container, admin, clock, dry_run=False):
    with container.session_factory() as session:
        return retention.apply(session, admin, T, M, clock=clock, dry_run=dry_run)


def test_a_rule_keeps_the_last_the_aliased_the_recent_and_the_unfinished(container, world):
    set_rule(container, world, keep_last=1, within=30)
    plan = apply(container, world, later(10))
    assert plan.delete == []
    assert plan.keep == {5: "last", 1: "alias", 4: "in-pipeline", 2: "approved-recently", 3: "approved-recently"}

    set_rule(container, world, keep_last=1, within=5)
    assert apply(container, world, later(10), dry_run=True).delete == [2, 3]
    with container.session_factory() as session:
        assert session.scalars(select(Version).where(Version.deleted_at.is_not(None))).all() == []
    plan = apply(container, world, later(10))
    assert plan.delete == [2, 3]
    # Applied again, nothing more goes.
    assert apply(container, world, later(10)).delete == []


def test_a_deleted_version_keeps_its_record_and_audit_trail_and_is_never_released(container, world, tmp_path):
    set_rule(container, world, keep_last=1, within=5)
    apply(container, world, later(10))
    with container.session_factory() as session:
        two = session.scalars(select(Version).where(Version.number == 2)).one()
        assert two.deleted_at is not None and two.deleted_by == world.name
        assert two.state == "approved" and two.manifest_bundle is not None and len(two.files) > 0
        events = session.scalars(select(AuditEvent).where(AuditEvent.subject == f"{T}/{M}@2")
                                 .order_by(AuditEvent.id)).all()
        assert [e.action for e in events][0] == "version.submitted"
        assert events[-1].action == "version.deleted" and events[-1].details["reason"] == "retention"
        assert audit.verify(session).events > 0  # the chain still verifies
        with pytest.raises(VersionDeletedError):
            aliases.promote(session, world, T, M, "prod", make_target(2, None, ()), policy=container.policy,
                            clock=container.clock)
    node = role_token(container, "node1", T, "node")
    from registry.bootstrap import ensure_trust_root

    ensure_trust_root(container)
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        r = client.get(f"/v1/models/{T}/{M}/manifest", params={"ref": "2"},
                       headers={"Authorization": f"Bearer {node}"})
        assert r.status_code == 409 and r.json()["type"].endswith("/version-deleted"), r.text
        assert client.get(f"/v1/models/{T}/{M}/manifest", params={"ref": "prod"},
                          headers={"Authorization": f"Bearer {node}"}).status_code == 200
    # Its source may be submitted again: a new version, not the deleted one.
    with container.session_factory() as session:
        again, created = versions.submit(session, world, T, M, SubmitRequest(source=str(tmp_path / "v2")),
                                         open_source=container.open_source, limits=container.limits(),
                                         ports=container.ports)
        assert created and again.number == 6


def test_the_blobs_of_deleted_versions_become_garbage_and_only_theirs(container, world):
    with container.session_factory() as session:
        def digests(number):
            return {f.sha256 for f in session.scalars(select(Version).where(Version.number == number)).one().files}
        kept = set().union(*(digests(n) for n in (1, 4, 5)))
        gone = (digests(2) | digests(3)) - kept
    assert gone, "the versions share every file: nothing to collect"
    set_rule(container, world, keep_last=1, within=5)
    apply(container, world, later(10))
    report = gc.collect(container.session_factory, container.blob_store, later(10), dt.timedelta(hours=24))
    assert report.deleted == len(gone)
    with container.session_factory() as session:
        left = set(session.scalars(select(Blob.digest)))
    assert not gone & left and kept <= left
    assert all(container.blob_store.exists(d) for d in kept)


def test_only_tenant_administrators_set_and_apply_rules(container, world):
    submitter_token = role_token(container, "sub", T, "submitter")
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        headers = {"Authorization": f"Bearer {submitter_token}"}
        r = client.put(f"/v1/models/{T}/{M}/retention", json={"keep_last": 1}, headers=headers)
        assert r.status_code == 403
        assert client.post(f"/v1/models/{T}/{M}/retention/apply", headers=headers).status_code == 403
        shown = client.get(f"/v1/models/{T}/{M}/retention", headers=headers)
        assert shown.status_code == 200 and shown.json()["rule"] is None and shown.json()["deleted"] == []
        tadmin = role_token(container, "tadm", T, "admin")
        r = client.put(f"/v1/models/{T}/{M}/retention", json={"keep_last": 2, "approved_within_days": 0},
                       headers={"Authorization": f"Bearer {tadmin}"})
        assert r.status_code == 200, r.text
        # Approved just now counts as within 0 days only at this instant; the plan names what goes.
        assert r.json()["rule"]["keep_last"] == 2
        assert {k["version"] for k in r.json()["kept"]} >= {5, 4, 1}
        assert client.put(f"/v1/models/{T}/{M}/retention", json={"keep_last": 0},
                          headers={"Authorization": f"Bearer {tadmin}"}).status_code == 422
