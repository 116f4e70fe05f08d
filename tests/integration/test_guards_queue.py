"""A job's outcome counts only from the attempt that holds its lease (SQLite and PostgreSQL).

The settle check compares both the lease holder and the attempt number; each of the two cases
below is one only that comparison catches.
"""

from __future__ import annotations

import datetime as dt

import pytest

from registry.db.models import Job
from registry.jobs import DEAD, LOST, RUNNING, SUCCEEDED, JobQueue, enqueue
from tests.support.clock import ManualClock


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def queue(container, clock):
    return JobQueue(container.session_factory, lease=dt.timedelta(seconds=30), clock=clock)


def _enqueue(container, clock, **kw) -> int:
    with container.session_factory() as s:
        job = enqueue(s, "k", {"n": 1}, run_after=clock.now(), **kw)
        s.commit()
        return job.id


def _row(container, job_id: int) -> Job:
    with container.session_factory() as s:
        return s.get(Job, job_id)


def test_a_stale_attempt_of_the_same_worker_settles_nothing(container, queue, clock):
    """The same worker id claims its own job again after the lease ran out (a restarted process)."""
    job_id = _enqueue(container, clock)
    stale = queue.claim("w")
    clock.advance(seconds=31)
    current = queue.claim("w")
    assert current.id == job_id and current.attempts == 2
    assert not queue.heartbeat(stale, "w")
    assert not queue.complete(stale, "w")
    assert queue.fail(stale, "w", "late") == LOST
    row = _row(container, job_id)
    assert (row.state, row.attempts, row.last_error) == (RUNNING, 2, None)
    assert queue.complete(current, "w")


def test_a_worker_whose_job_died_and_was_revived_settles_nothing(container, queue, clock):
    """Same attempt number, another holder: the job died, was queued again by its key and re-claimed."""
    job_id = _enqueue(container, clock, idempotency_key="k", max_attempts=1)
    stale = queue.claim("a")
    clock.advance(seconds=31)
    assert queue.claim("b") is None  # the lease ran out on the last attempt: dead
    assert _row(container, job_id).state == DEAD
    assert _enqueue(container, clock, idempotency_key="k", max_attempts=1) == job_id
    current = queue.claim("b")
    assert current.id == job_id and current.attempts == stale.attempts == 1
    assert not queue.complete(stale, "a")
    assert queue.fail(stale, "a", "late") == LOST
    assert _row(container, job_id).state == RUNNING
    assert queue.complete(current, "b")
    assert _row(container, job_id).state == SUCCEEDED
