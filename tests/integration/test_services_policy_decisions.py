"""Policy decisions are stored with their digests, in the caller's transaction (SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt
import shutil

from sqlalchemy import select

from registry.db.models import Model, PolicyDecision, Tenant, Version
from registry.domain.files import FileEntry
from registry.domain.policy_input import (
    Approval,
    LicenseInfo,
    ScanVerdict,
    SourceRef,
    VersionRef,
    approval_input,
    promotion_input,
)
from registry.policy import PolicyEngine, default_policy_dir
from registry.services.policy import decide_approval, decide_promotion

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)


def make_version(session) -> Version:
    tenant = Tenant(name="acme")
    session.add(tenant)
    session.flush()
    model = Model(tenant_id=tenant.id, name="tiny")
    session.add(model)
    session.flush()
    version = Version(model_id=model.id, number=1, state="awaiting_approval", source_kind="hf",
                      source_repo="org/tiny", resolved_revision="c" * 40)
    session.add(version)
    session.flush()
    return version


def input_for(approvals) -> dict:
    return approval_input(
        version=VersionRef("acme", "tiny", 1, "awaiting_approval"), source=SourceRef("hf", "org/tiny", "c" * 40),
        files=[FileEntry("model.safetensors", 10, "a" * 64)], scans=[ScanVerdict("model.safetensors", "safe")],
        license=LicenseInfo("mit"), approvals=approvals, submitter="alice",
    )


def test_every_decision_is_stored_with_its_digests(session):
    engine = PolicyEngine.from_directory(default_policy_dir())
    version = make_version(session)
    pending = decide_approval(session, version, input_for([]), engine, T0)
    approved = decide_approval(
        session, version,
        input_for([Approval("sam", "security", "approve", T0), Approval("mia", "ml", "approve", T0)]),
        engine, T0 + dt.timedelta(minutes=5),
    )
    promoted = decide_promotion(
        session, version,
        promotion_input(principal="mia", is_admin=False, capacities=["ml"], alias="prod", target=(1, "approved")),
        engine, T0 + dt.timedelta(minutes=6),
    )
    session.commit()
    rows = session.scalars(select(PolicyDecision).order_by(PolicyDecision.id)).all()
    assert [(r.kind, r.outcome, r.allowed) for r in rows] == [
        ("approval", "pending", False), ("approval", "approved", True), ("promotion", "allowed", True)]
    assert [r.input_digest for r in rows] == [pending.input_digest, approved.input_digest, promoted.input_digest]
    assert {r.bundle_digest for r in rows} == {engine.bundle_digest}
    assert [u["code"] for u in rows[0].unmet] == ["approval.missing", "approval.missing"]
    assert rows[1].unmet == [] and rows[0].error is None
    assert [r.decided_at for r in rows] == [T0, T0 + dt.timedelta(minutes=5), T0 + dt.timedelta(minutes=6)]
    assert {r.version_id for r in rows} == {version.id}


def test_a_failing_policy_is_stored_as_an_error_that_denies(session, tmp_path):
    broken = tmp_path / "policies"
    shutil.copytree(default_policy_dir(), broken)
    (broken / "approval.rego").unlink()
    version = make_version(session)
    decision = decide_approval(session, version, input_for([]), PolicyEngine.from_directory(broken), T0)
    session.commit()
    row = session.scalars(select(PolicyDecision)).one()
    assert (row.outcome, row.allowed, decision.allowed) == ("error", False, False)
    assert "approval.rego is missing" in row.error
    assert row.unmet[0]["code"] == "policy.error" and row.bundle_digest == decision.bundle_digest


def test_the_decision_rolls_back_with_the_callers_transaction(session):
    version = make_version(session)
    session.commit()
    decide_approval(session, version, input_for([]), PolicyEngine.from_directory(default_policy_dir()), T0)
    session.rollback()
    assert session.scalars(select(PolicyDecision)).all() == []


def test_the_policy_directory_is_a_setting(container, tmp_path, monkeypatch):
    from registry.settings import Settings

    assert container.settings.policy_dir is None
    monkeypatch.setenv("MODELREG_POLICY_DIR", str(tmp_path / "ours"))
    assert Settings().policy_dir == tmp_path / "ours"
    container.settings.policy_dir = tmp_path / "ours"
    assert container.policy.directory == tmp_path / "ours"
    assert "does not exist" in container.policy.load_error


def test_the_shipped_policies_are_the_default(container):
    assert container.policy.directory == default_policy_dir() and container.policy.load_error is None
