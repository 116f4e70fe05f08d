"""The database job queue (``registry.jobs``): enqueue in the caller's transaction, claim, lease, heartbeat,
retry with backoff, dead jobs and their revival, on SQLite and PostgreSQL with a manual clock."""

import datetime as dt

import pytest
from sqlalchemy import select

from registry.db.models import Job
from registry.jobs import DEAD, QUEUED, SUCCEEDED, JobQueue, enqueue
from tests.support.clock import ManualClock


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def queue(container, clock):
    return JobQueue(container.session_factory, lease=dt.timedelta(seconds=30),
                    backoff_base=dt.timedelta(seconds=10), backoff_max=dt.timedelta(seconds=60), clock=clock)


def _enqueue(container, clock, kind="k", key=None, **kw):
    with container.session_factory() as s:
        job = enqueue(s, kind, {"n": 1}, idempotency_key=key, run_after=clock.now(), **kw)
        s.commit()
        return job.id


def test_enqueue_joins_callers_transaction(container, queue, clock):
    with container.session_factory() as s:
        enqueue(s, "k", {"n": 1}, run_after=clock.now())
        s.rollback()
    assert queue.claim("w") is None


def test_claim_complete(container, queue, clock):
    job_id = _enqueue(container, clock)
    job = queue.claim("w1")
    assert job.id == job_id and job.attempts == 1 and job.payload == {"n": 1}
    assert queue.claim("w2") is None
    assert queue.complete(job, "w1")
    with container.session_factory() as s:
        assert s.get(Job, job_id).state == SUCCEEDED


def test_idempotency_key_queues_once(container, queue, clock):
    a = _enqueue(container, clock, key="mirror:1")
    b = _enqueue(container, clock, key="mirror:1")
    assert a == b
    with container.session_factory() as s:
        assert len(s.scalars(select(Job)).all()) == 1


def test_expired_lease_is_claimed_again(container, queue, clock):
    _enqueue(container, clock)
    first = queue.claim("dead-worker")
    clock.advance(seconds=29)
    assert queue.claim("w2") is None
    clock.advance(seconds=2)
    second = queue.claim("w2")
    assert second.id == first.id and second.attempts == 2
    # The first worker comes back: its result no longer counts.
    assert not queue.complete(first, "dead-worker")
    assert queue.complete(second, "w2")


def test_heartbeat_keeps_the_lease(container, queue, clock):
    _enqueue(container, clock)
    job = queue.claim("w1")
    for _ in range(3):
        clock.advance(seconds=20)
        assert queue.heartbeat(job, "w1")
    assert queue.claim("w2") is None


def test_retry_with_backoff_then_dead(container, queue, clock):
    job_id = _enqueue(container, clock, max_attempts=3)
    delays = []
    for attempt in range(1, 4):
        job = queue.claim("w")
        assert job is not None and job.attempts == attempt
        state = queue.fail(job, "w", f"boom {attempt}")
        with container.session_factory() as s:
            row = s.get(Job, job_id)
            if state == QUEUED:
                delays.append((row.run_after - clock.now()).total_seconds())
                assert queue.claim("w") is None  # not due yet
                clock.advance(seconds=61)
    assert state == DEAD
    with container.session_factory() as s:
        row = s.get(Job, job_id)
        assert row.state == DEAD and row.last_error == "boom 3"
    assert 8 <= delays[0] <= 10 and 16 <= delays[1] <= 20


def test_lease_expiry_on_last_attempt_marks_dead(container, queue, clock):
    job_id = _enqueue(container, clock, max_attempts=1)
    queue.claim("w")
    clock.advance(seconds=31)
    assert queue.claim("w2") is None
    with container.session_factory() as s:
        assert s.get(Job, job_id).state == DEAD


def test_non_retryable_failure_is_dead_at_once(container, queue, clock):
    _enqueue(container, clock)
    job = queue.claim("w")
    assert queue.fail(job, "w", "bad input", retry=False) == DEAD


def test_dead_job_revived_by_same_key(container, queue, clock):
    job_id = _enqueue(container, clock, key="k1", max_attempts=1)
    queue.fail(queue.claim("w"), "w", "x")
    assert _enqueue(container, clock, key="k1") == job_id
    assert queue.claim("w").id == job_id


def test_begin_write_after_a_read_does_not_fail_when_another_writer_committed(container):
    """SQLite: a read transaction upgraded to a write fails at once if another writer committed in
    between; begin_write ends the read first, so the write waits for the lock instead."""
    from registry.db.models import Tenant
    from registry.db.session import begin_write

    with container.session_factory() as reader, container.session_factory() as other:
        reader.scalars(select(Job)).all()  # a read transaction is now open
        other.add(Tenant(name="written-meanwhile"))
        other.commit()
        begin_write(reader)
        reader.add(Tenant(name="written-after"))
        reader.commit()
        assert {t.name for t in reader.scalars(select(Tenant))} >= {"written-meanwhile", "written-after"}
