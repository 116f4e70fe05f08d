"""A claim on PostgreSQL passes over rows another transaction holds, shown with two connections.

The first connection locks a job row the way a claiming worker does (``FOR UPDATE``) and keeps its
transaction open; a claim on a second connection must return the next job at once. Without
``SKIP LOCKED`` it would wait behind the lock until the first transaction ends.
"""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from sqlalchemy import select

from registry.db.models import Job
from registry.db.session import make_engine, make_session_factory
from registry.jobs import RUNNING, JobQueue, enqueue
from tests.support import db as dbsupport

pytestmark = pytest.mark.postgres

# Far longer than a claim takes on any machine, far shorter than a lock wait (which is forever).
PATIENCE = 10.0


@pytest.fixture
def engine(pg_url):
    dbsupport.truncate_all(pg_url)
    engine = make_engine(pg_url)
    yield engine
    engine.dispose()


def _jobs(engine, count: int) -> list[int]:
    with make_session_factory(engine)() as session:
        jobs = [enqueue(session, "k", {"n": n}) for n in range(count)]
        session.commit()
        return [job.id for job in jobs]


def _claim_while_locked(engine, queue: JobQueue, locked_id: int):
    """Claim on one connection while another holds ``locked_id`` FOR UPDATE; (claimed, waited)."""
    result: dict[str, object] = {}
    with engine.connect() as holder:
        holder.execute(select(Job.id).where(Job.id == locked_id).with_for_update())
        claimer = threading.Thread(target=lambda: result.update(job=queue.claim("w2")))
        claimer.start()
        claimer.join(PATIENCE)
        waited = claimer.is_alive()
        holder.rollback()
    claimer.join()
    return result.get("job"), waited


def test_a_claim_returns_at_once_past_a_locked_queued_row(engine):
    first, second = _jobs(engine, 2)
    queue = JobQueue(make_session_factory(engine))
    job, waited = _claim_while_locked(engine, queue, first)
    assert not waited, f"the claim waited more than {PATIENCE}s behind a locked row (no SKIP LOCKED)"
    assert job is not None and job.id == second


def test_a_claim_returns_at_once_past_a_locked_expired_lease(engine):
    abandoned, queued = _jobs(engine, 2)
    queue = JobQueue(make_session_factory(engine), lease=dt.timedelta(seconds=30))
    with make_session_factory(engine)() as session:
        row = session.get(Job, abandoned)
        row.state, row.attempts, row.locked_by = RUNNING, 1, "dead-worker"
        row.lease_expires_at = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
        session.commit()
    job, waited = _claim_while_locked(engine, queue, abandoned)
    assert not waited, f"the claim waited more than {PATIENCE}s behind a locked expired lease"
    assert job is not None and job.id == queued
