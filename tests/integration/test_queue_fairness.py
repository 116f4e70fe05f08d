"""Job claims are fair between tenants: one tenant's burst cannot starve another's job (issue 18).
On both databases (PostgreSQL claims with FOR UPDATE SKIP LOCKED, SQLite under its write lock)."""

from __future__ import annotations

import datetime as dt

import pytest

from registry.jobs import JobQueue, enqueue
from tests.support.clock import ManualClock


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def queue(container, clock):
    return JobQueue(container.session_factory, lease=dt.timedelta(seconds=30), clock=clock)


def _burst(container, clock, tenant, count, kind="k"):
    with container.session_factory() as session:
        for n in range(count):
            enqueue(session, kind, {"tenant": tenant, "n": n}, run_after=clock.now(), tenant=tenant)
        session.commit()


def _claim_and_complete(queue, times):
    claimed = []
    for _ in range(times):
        job = queue.claim("w")
        assert job is not None
        claimed.append(job.payload["tenant"])
        assert queue.complete(job, "w")
    return claimed


def test_a_burst_of_one_tenant_does_not_starve_another(container, queue, clock):
    _burst(container, clock, "a", 1000)
    _burst(container, clock, "b", 1)
    assert "b" in _claim_and_complete(queue, 2)


def test_claims_take_turns_between_tenants_with_work(container, queue, clock):
    _burst(container, clock, "a", 20)
    _burst(container, clock, "b", 3)
    _burst(container, clock, "", 2)  # work of no tenant takes its turn too
    claimed = _claim_and_complete(queue, 9)
    assert sorted(claimed[:3]) == ["", "a", "b"]
    assert claimed[3:6] == claimed[:3] and claimed[6:] == ["a", "b", "a"]


def test_a_tenant_whose_jobs_are_not_due_gives_its_turn_away(container, queue, clock):
    with container.session_factory() as session:
        enqueue(session, "k", {"tenant": "later"}, run_after=clock.now() + dt.timedelta(hours=1), tenant="later")
        session.commit()
    _burst(container, clock, "a", 2)
    assert _claim_and_complete(queue, 2) == ["a", "a"]
    assert queue.claim("w") is None


def test_claims_of_other_kinds_skip_a_tenant_with_none_of_them(container, queue, clock):
    _burst(container, clock, "a", 3, kind="scan_blob")
    _burst(container, clock, "b", 3, kind="mirror_file")
    job = queue.claim("w", kinds=["mirror_file"])
    assert job.payload["tenant"] == "b"
