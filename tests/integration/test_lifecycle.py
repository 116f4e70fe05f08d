"""The lifecycle as built: every move goes through ``registry.services.lifecycle`` in the caller's transaction,
names its audit event, and starts the next stage's work; time comes from the ports' clock."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import func, select

from registry.bootstrap import bootstrap
from registry.clock import ManualClock
from registry.db.models import AuditEvent, Job, Version
from registry.domain.errors import InvalidStateError
from registry.domain.outcomes import Failed, Pending
from registry.domain.stages import Work
from registry.domain.states import VersionState
from registry.services import lifecycle, versions
from registry.services.versions import SubmitRequest
from tests.support.registry import drain, make_admin
from tests.support.tiny_model import tiny_model_files

# Far from the machine's time: a job due by the system clock would never be due by this one.
START = dt.datetime(2024, 2, 29, 12, 0, tzinfo=dt.timezone.utc)


@pytest.fixture
def clocked(settings):
    clock = ManualClock(START)
    c = bootstrap(settings, clock=clock)
    yield c, clock
    c.dispose()


def _aware(value: dt.datetime) -> dt.datetime:
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def _submit(container, tmp_path, name="m", ports=None):
    root = tmp_path / name
    for path, data in tiny_model_files(1).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    admin = make_admin(container)
    with container.session_factory() as session:
        version, _ = versions.submit(session, admin, "acme", name, SubmitRequest(source=str(root)),
                                     open_source=container.open_source, limits=container.limits(),
                                     ports=ports or container.ports)
        return version.id


def test_a_version_moves_by_the_containers_clock(clocked, tmp_path):
    container, clock = clocked
    version_id = _submit(container, tmp_path)
    clock.advance(minutes=3)
    assert drain(container) > 0
    with container.session_factory() as session:
        version = session.get(Version, version_id)
        assert version.state == "awaiting_approval"
        assert _aware(version.sealed_at) == START + dt.timedelta(minutes=3)
        assert {_aware(f.mirrored_at) for f in version.files} == {START + dt.timedelta(minutes=3)}
        # The mirror jobs at submission, the jobs queued while draining three minutes later.
        assert {_aware(j.run_after) for j in session.scalars(select(Job))} == {START, clock.now()}


def test_work_is_due_by_the_clock_of_the_ports_it_is_given(container, tmp_path):
    """Ports built with another clock, not a patched one: the mirror jobs are due by it."""
    clock = ManualClock(START)
    version_id = _submit(container, tmp_path, ports=container.ports.with_clock(clock))
    with container.session_factory() as session:
        assert session.get(Version, version_id).state == "mirroring"
        assert {_aware(j.run_after) for j in session.scalars(select(Job))} == {START}


def test_the_audit_trail_names_every_move(container, tmp_path):
    version_id = _submit(container, tmp_path)
    drain(container)
    with container.session_factory() as session:
        version = session.get(Version, version_id)
        ref = f"acme/m@{version.number}"
        actions = list(session.scalars(select(AuditEvent.action).where(AuditEvent.subject == ref)
                                       .order_by(AuditEvent.id)))
    # The tiny model's safetensors weights get the shipped `sanity` suite.
    assert actions == ["version.submitted", "version.resolved", "version.sealed", "version.scanning",
                       "version.scanned", "version.eval.recorded", "version.evaluated"]


def test_advance_is_the_callers_transaction(container, tmp_path):
    """Rolled back, a move leaves no state, no event and no job behind; an illegal move changes nothing."""
    version_id = _submit(container, tmp_path)
    with container.session_factory() as session:
        jobs_before = session.scalar(select(func.count()).select_from(Job))
        events_before = session.scalar(select(func.count()).select_from(AuditEvent))
        version = session.get(Version, version_id)
        with pytest.raises(InvalidStateError):
            lifecycle.advance(session, version, VersionState.APPROVED, "system", {}, container.ports)
        with pytest.raises(InvalidStateError):
            lifecycle.approve(session, version, "system", {}, container.ports)
        assert version.state == "mirroring"
        lifecycle.fail(session, version, Failed("test"))
        assert version.failure_reason == "test"
        session.rollback()
    with container.session_factory() as session:
        assert session.get(Version, version_id).state == "mirroring"
        assert session.scalar(select(func.count()).select_from(Job)) == jobs_before
        assert session.scalar(select(func.count()).select_from(AuditEvent)) == events_before


def test_scanning_done_asks_the_lifecycle_for_the_next_state(container, tmp_path, monkeypatch):
    """With the evaluating stage's work pending, a scanned version waits in ``evaluating``: no stage
    names its successor."""
    monkeypatch.setitem(lifecycle._WORK, Work.EVALUATE, lambda session, version, ports: Pending())
    version_id = _submit(container, tmp_path)
    drain(container)
    with container.session_factory() as session:
        assert session.get(Version, version_id).state == "evaluating"
