"""A job queue in the database.

Jobs are rows. ``enqueue`` adds one in the caller's transaction, so a job exists exactly when the
change that made it necessary is committed. Workers ``claim`` a job with ``FOR UPDATE SKIP LOCKED``
on PostgreSQL (many workers, no waiting) or under SQLite's single write lock (``BEGIN IMMEDIATE``),
hold it with a lease they renew by ``heartbeat``, and finish it with ``complete`` or ``fail``.
Claims are fair between tenants: each job says whose work it is, and a claim takes the next job of
the tenant served least recently (``job_turns``), so one tenant's burst cannot starve another's.
A job whose worker died is claimed again once its lease has run out; a failed job is retried with
exponential backoff until ``max_attempts``, then it is ``dead`` with its last error.

Services enqueue through the queue the container built (``ports.queue.enqueue_job``), which dates a
job by its clock and gives it the configured attempts.

Usage (a sketch, not run as a doctest)::

    queue.enqueue_job(session, JobKind.MIRROR_FILE, {"file_id": 7}, 7, tenant="acme")
    session.commit()
    job = queue.claim("worker-1")
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from sqlalchemy import exists, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError as SAIntegrityError
from sqlalchemy.orm import Session, sessionmaker

from registry.clock import Clock, SystemClock
from registry.db.models import Job, JobTurn
from registry.db.session import is_postgres

QUEUED = "queued"
RUNNING = "running"
SUCCEEDED = "succeeded"
DEAD = "dead"
# Not a state: what ``fail`` returns when the job was no longer ours, so nothing was recorded.
LOST = "lost"

_JOBS = Job.__table__
_TURNS = JobTurn.__table__

DEFAULT_MAX_ATTEMPTS = 5

# Characters, as VARCHAR counts them on PostgreSQL.
_KEY_LENGTH = _JOBS.c.idempotency_key.type.length


def job_key(kind: str, *parts: object) -> str:
    """The idempotency key of a job: ``kind:part:...``, hashed when the column cannot hold it.

    The parts may come from users (a file path of 1,024 characters); a key longer than the column
    becomes ``kind@sha256:<hex of the whole key>``, which no unhashed key (``kind:...``) can equal.

    Example:
        >>> job_key("seal_version", 7)
        'seal_version:7'
        >>> len(job_key("scan_blob", "1", "ab" * 32, "d/" * 600 + "f")) <= 256
        True
    """
    key = ":".join([kind, *(str(part) for part in parts)])
    if len(key) <= _KEY_LENGTH:
        return key
    return f"{kind}@sha256:{hashlib.sha256(key.encode()).hexdigest()}"


class JobKind(str, enum.Enum):
    """Every job kind modelreg runs: services enqueue these names and workers register handlers for them."""

    RESOLVE_VERSION = "resolve_version"
    MIRROR_FILE = "mirror_file"
    SEAL_VERSION = "seal_version"
    SCAN_BLOB = "scan_blob"
    RUN_EVAL = "run_eval"
    DELIVER_WEBHOOK = "deliver_webhook"
    BUILD_OCI_ARTIFACTS = "build_oci_artifacts"
    RECORD_CHUNKS = "record_chunks"
    INTEGRATE_AUDIT_LOG = "integrate_audit_log"


def enqueue_job(session: Session, kind: JobKind, payload: dict[str, Any], *key_parts: object,
                tenant: str = "", run_after: dt.datetime, max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> Job:
    """Enqueue a job of a known kind, keyed ``job_key(kind, *key_parts)`` so it is queued at most once.

    Services call it through :meth:`JobQueue.enqueue_job`, which supplies ``run_after`` and ``max_attempts``.

    Args:
        tenant: whose work it is (claims are fair between tenants); ``""`` for no tenant's.
    """
    kind = JobKind(kind)
    return enqueue(session, kind.value, payload, idempotency_key=job_key(kind.value, *key_parts), tenant=tenant,
                   run_after=run_after, max_attempts=max_attempts)


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """What a worker holds: ids and payload, never ORM objects (they belong to another session)."""

    id: int
    kind: str
    payload: dict[str, Any]
    attempts: int
    max_attempts: int
    lease_expires_at: dt.datetime


def enqueue(
    session: Session,
    kind: str,
    payload: dict[str, Any],
    *,
    idempotency_key: str | None = None,
    priority: int = 100,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    run_after: dt.datetime,
    tenant: str = "",
) -> Job:
    """Add a job in the caller's transaction (the caller commits).

    With an ``idempotency_key`` already used by a job that is not dead, that job is returned and
    nothing is added, so the same work is never queued twice. A dead job with the key is revived.

    Args:
        idempotency_key: build it with :func:`job_key`.
        max_attempts: how often it is tried before it is dead.
        run_after: when it is due (now, by the caller's clock, for work to do at once).
        tenant: whose work it is, for fair claims; ``""`` for no tenant's.
    """
    if idempotency_key is not None:
        existing = session.scalar(select(Job).where(Job.idempotency_key == idempotency_key))
        if existing is not None:
            if existing.state == DEAD:
                existing.state = QUEUED
                existing.attempts = 0
                existing.run_after = run_after
                existing.last_error = None
                existing.finished_at = None
                existing.payload = payload
            return existing
    _ensure_turn(session, tenant)
    job = Job(
        tenant=tenant,
        kind=kind,
        payload=payload,
        idempotency_key=idempotency_key,
        priority=priority,
        max_attempts=max_attempts,
        run_after=run_after,
        state=QUEUED,
        attempts=0,
    )
    if idempotency_key is None:
        session.add(job)
        return job
    # Two transactions may race to add the same key: the loser takes the winner's job.
    try:
        with session.begin_nested():
            session.add(job)
    except SAIntegrityError:
        return session.scalars(select(Job).where(Job.idempotency_key == idempotency_key)).one()
    return job


_TURNS_INFO = "modelreg.job_turns"


def _turn_upsert(dialect: str, tenant: str, served_turn: Any = None):
    """Insert the tenant's turn row; with ``served_turn``, set it when the row exists, else leave it."""
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    statement = insert(_TURNS).values(tenant=tenant, served_turn=0 if served_turn is None else served_turn)
    if served_turn is None:
        return statement.on_conflict_do_nothing(index_elements=[_TURNS.c.tenant])
    return statement.on_conflict_do_update(index_elements=[_TURNS.c.tenant], set_={"served_turn": served_turn})


def _ensure_turn(session: Session, tenant: str) -> None:
    """A tenant's turn row exists before its first job does (once per session: a burst pays one statement)."""
    known = session.info.setdefault(_TURNS_INFO, set())
    if tenant in known:
        return
    session.execute(_turn_upsert(session.get_bind().dialect.name, tenant))
    known.add(tenant)


def _claimed(job: Job) -> ClaimedJob:
    return ClaimedJob(
        id=job.id,
        kind=job.kind,
        payload=dict(job.payload),
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        lease_expires_at=job.lease_expires_at,
    )


@dataclass
class JobQueue:
    """Claims and settles jobs, each call in its own short transaction.

    Attributes:
        session_factory: makes sessions on the queue's database.
        lease: how long a claim lasts without a heartbeat.
        backoff_base, backoff_max: retry delay ``min(max, base * 2**(attempt-1))`` with jitter.
        clock: the time source (tests move it); jobs enqueued through the queue are due from its now.
        max_attempts: the attempts a job enqueued through the queue gets (``job_max_attempts``).
    """

    session_factory: sessionmaker[Session]
    lease: dt.timedelta = dt.timedelta(seconds=60)
    backoff_base: dt.timedelta = dt.timedelta(seconds=2)
    backoff_max: dt.timedelta = dt.timedelta(minutes=5)
    clock: Clock = field(default_factory=SystemClock)
    max_attempts: int = DEFAULT_MAX_ATTEMPTS

    def enqueue_job(self, session: Session, kind: JobKind, payload: dict[str, Any], *key_parts: object,
                    tenant: str = "") -> Job:
        """Enqueue a job of a known kind in the caller's transaction, due now by this queue's clock
        (:func:`enqueue_job`: queued at most once per ``job_key(kind, *key_parts)``)."""
        return enqueue_job(session, kind, payload, *key_parts, tenant=tenant, run_after=self.clock.now(),
                           max_attempts=self.max_attempts)

    def claim(
        self,
        worker_id: str,
        kinds: list[str] | None = None,
        *,
        on_reaped: Callable[[ClaimedJob, str], None] | None = None,
    ) -> ClaimedJob | None:
        """Take the next runnable job: queued and due, or running with an expired lease.

        A job whose lease ran out after its last allowed attempt is marked dead instead.

        Args:
            worker_id: who holds the lease.
            kinds: only these kinds (all kinds when empty or None).
            on_reaped: called, after the commit, with each job this call marked dead and its
                last error, so the caller can run the job kind's dead-letter hook.
        """
        while True:
            with self.session_factory() as session:
                postgres = is_postgres(session)
            claim = self._claim_postgres if postgres else self._claim_sqlite
            claimed, reaped = claim(worker_id, kinds)
            if reaped is None:
                return claimed
            # Outside the session: the hook may take its own time and its own transaction.
            if on_reaped is not None:
                on_reaped(*reaped)

    def _candidates(self, now: dt.datetime, kinds: list[str] | None):
        # Queries served by partial indexes in order, so a claim costs the same with ten queued jobs
        # or a million: abandoned jobs (expired leases) first, then the next queued job of the tenant
        # served least recently (a walk over tenants, not jobs), then any queued job by priority (when
        # that tenant's jobs are all being claimed by other workers at this moment).
        c = _JOBS.c
        due = [c.state == QUEUED, c.run_after <= now]
        if kinds:
            due.append(c.kind.in_(kinds))
        expired = (select(c.id).where(c.state == RUNNING, c.lease_expires_at < now)
                   .order_by(c.lease_expires_at).limit(1))
        if kinds:
            expired = expired.where(c.kind.in_(kinds))
        turn = (select(_TURNS.c.tenant).where(exists().where(c.tenant == _TURNS.c.tenant, *due))
                .order_by(_TURNS.c.served_turn, _TURNS.c.tenant).limit(1).scalar_subquery())
        fair = select(c.id).where(c.tenant == turn, *due).order_by(c.priority, c.id).limit(1)
        queued = select(c.id).where(*due).order_by(c.priority, c.id).limit(1)
        return expired, fair, queued

    @staticmethod
    def _next_turn(dialect: str, tenant: str):
        """The statement that marks ``tenant`` served now: its turn becomes the latest."""
        latest = select(func.coalesce(func.max(_TURNS.c.served_turn), 0) + 1).scalar_subquery()
        return _turn_upsert(dialect, tenant, latest)

    def _claim_postgres(
        self, worker_id: str, kinds: list[str] | None
    ) -> tuple[ClaimedJob | None, tuple[ClaimedJob, str] | None]:
        """One round trip: ``UPDATE ... WHERE id = COALESCE(expired, queued) RETURNING``.

        COALESCE evaluates its second subquery only when the first finds nothing, and each locks
        the row it picks with SKIP LOCKED, so concurrent workers never wait on each other.
        """
        now = self.clock.now()
        expired, fair, queued = self._candidates(now, kinds)
        pick = func.coalesce(
            expired.with_for_update(skip_locked=True).scalar_subquery(),
            fair.with_for_update(skip_locked=True).scalar_subquery(),
            queued.with_for_update(skip_locked=True).scalar_subquery(),
        )
        statement = (
            _JOBS.update().where(_JOBS.c.id == pick)
            .values(state=RUNNING, attempts=_JOBS.c.attempts + 1, locked_by=worker_id,
                    lease_expires_at=now + self.lease)
            .returning(_JOBS.c.id, _JOBS.c.kind, _JOBS.c.payload, _JOBS.c.attempts, _JOBS.c.max_attempts,
                       _JOBS.c.lease_expires_at, _JOBS.c.last_error, _JOBS.c.tenant)
        )
        with self._engine.begin() as conn:
            row = conn.execute(statement).first()
            if row is None:
                return None, None
            conn.execute(self._next_turn("postgresql", row.tenant))
            claimed = ClaimedJob(id=row.id, kind=row.kind, payload=dict(row.payload), attempts=row.attempts,
                                 max_attempts=row.max_attempts, lease_expires_at=row.lease_expires_at)
            if row.attempts <= row.max_attempts:
                return claimed, None
            # A lease ran out after the last allowed attempt: the job is dead, not run again.
            error = (row.last_error or "") + f"\nlease expired on attempt {row.max_attempts}"
            conn.execute(_JOBS.update().where(_JOBS.c.id == row.id).values(
                state=DEAD, finished_at=now, last_error=error, lease_expires_at=None,
                attempts=row.max_attempts))
            return None, (dataclasses.replace(claimed, attempts=row.max_attempts), error)

    def _claim_sqlite(
        self, worker_id: str, kinds: list[str] | None
    ) -> tuple[ClaimedJob | None, tuple[ClaimedJob, str] | None]:
        with self.session_factory() as session:
            # SQLite has no row locks: take the database's write lock before reading, so two
            # workers can never read the same queued row.
            session.connection(execution_options={"sqlite_begin": "BEGIN IMMEDIATE"})
            now = self.clock.now()
            expired, fair, queued = self._candidates(now, kinds)
            job_id = session.scalar(expired) or session.scalar(fair) or session.scalar(queued)
            if job_id is None:
                session.rollback()
                return None, None
            job = session.get(Job, job_id)
            session.execute(self._next_turn("sqlite", job.tenant))
            if job.state == RUNNING and job.attempts >= job.max_attempts:
                job.state = DEAD
                job.finished_at = now
                job.last_error = (job.last_error or "") + f"\nlease expired on attempt {job.attempts}"
                job.lease_expires_at = None
                reaped = (_claimed(job), job.last_error)
                session.commit()
                return None, reaped
            job.state = RUNNING
            job.attempts += 1
            job.locked_by = worker_id
            job.lease_expires_at = now + self.lease
            claimed = _claimed(job)
            session.commit()
            return claimed, None

    def heartbeat(self, job: ClaimedJob, worker_id: str) -> bool:
        """Extend the lease; False when the job is no longer ours (the lease ran out and was taken)."""
        return self._settle(job, worker_id, lease_expires_at=self.clock.now() + self.lease)

    def complete(self, job: ClaimedJob, worker_id: str) -> bool:
        """Mark the job succeeded; False when it was no longer ours."""
        return self._settle(job, worker_id, state=SUCCEEDED, finished_at=self.clock.now(), lease_expires_at=None,
                            last_error=None)

    def fail(self, job: ClaimedJob, worker_id: str, error: str, *, retry: bool = True) -> str:
        """Record a failure: requeue with backoff, or ``dead`` after the last attempt or when not retryable.

        Returns:
            The job's new state, or ``LOST`` when the job was no longer ours (its lease ran out and
            another worker took it): nothing was recorded and the other worker's outcome counts.
        """
        now = self.clock.now()
        dead = not retry or job.attempts >= job.max_attempts
        values: dict[str, Any] = {"last_error": error[-8000:], "lease_expires_at": None}
        if dead:
            values.update(state=DEAD, finished_at=now)
        else:
            values.update(state=QUEUED, run_after=now + self.backoff(job.attempts))
        if not self._settle(job, worker_id, **values):
            return LOST
        return DEAD if dead else QUEUED

    def _settle(self, job: ClaimedJob, worker_id: str, **values: Any) -> bool:
        """Update the job if this worker still holds this attempt's lease; one short transaction."""
        # Core, not the ORM session: a worker settles many jobs a second and this is its hot path.
        with self._engine.begin() as conn:
            result = conn.execute(
                _JOBS.update()
                .where(_JOBS.c.id == job.id, _JOBS.c.state == RUNNING, _JOBS.c.locked_by == worker_id,
                       _JOBS.c.attempts == job.attempts)
                .values(**values)
            )
            return result.rowcount == 1

    @property
    def _engine(self):
        return self.session_factory.kw["bind"]

    def backoff(self, attempt: int) -> dt.timedelta:
        delay = min(self.backoff_max.total_seconds(), self.backoff_base.total_seconds() * 2 ** (attempt - 1))
        # Jitter spreads the retries of many jobs that failed together (an upstream outage).
        return dt.timedelta(seconds=delay * random.uniform(0.8, 1.0))
