"""The worker side of the job queue, proved with real worker processes on PostgreSQL (and SQLite).

Worker processes run ``tests/support/queue_worker.py``; their handlers append one line per
execution to a log file (O_APPEND), which is how a test counts who ran what, and how often.
The outcome rules (retry, dead, on_dead, lost lease) are checked in-process with a clock the test
moves, on both databases.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from registry.bootstrap import bootstrap, load_settings
from registry.db.models import Job
from registry.db.session import make_engine, make_session_factory
from registry.domain.errors import (
    BlobStoreError,
    InvalidInputError,
    ServiceUnavailableError,
    UnstorableDataError,
    VersionNotFoundError,
)
from registry.jobs import DEAD, QUEUED, RUNNING, SUCCEEDED, JobKind, JobQueue, enqueue
from registry.settings import Settings
from tests.support import db as dbsupport
from tests.support.clock import ManualClock
from workers.handler_registry import Handler, HandlerRegistry
from workers.loop import Worker, is_retryable

REPO = Path(__file__).resolve().parents[2]


# --- worker processes ------------------------------------------------------------------------


def wait_until(predicate, what: str, timeout: float = 30.0, interval: float = 0.05) -> None:
    """Poll until ``predicate()``; a safety net against a hang, not a measure of speed."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


class WorkerProcesses:
    """Starts ``tests.support.queue_worker`` processes and stops whatever is left at teardown."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen] = []

    def start(self, count: int, database_url: str, *, lease: float = 30.0) -> list[subprocess.Popen]:
        env = dict(os.environ)
        env.update(
            MODELREG_DATABASE_URL=database_url,
            MODELREG_DATA_DIR=str(self.tmp_path / "data"),
            MODELREG_JOB_LEASE_SECONDS=str(lease),
            MODELREG_JOB_BACKOFF_BASE_SECONDS="0.05",
            MODELREG_JOB_BACKOFF_MAX_SECONDS="0.2",
        )
        started = []
        for _ in range(count):
            index = len(self.procs)
            ready = self.tmp_path / f"worker-{index}.ready"
            output = open(self.tmp_path / f"worker-{index}.log", "wb")
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.queue_worker", "--ready", str(ready), "--poll", "0.05"],
                cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT,
            )
            output.close()
            proc.ready_file = ready  # type: ignore[attr-defined]
            self.procs.append(proc)
            started.append(proc)
        for proc in started:
            wait_until(lambda: proc.ready_file.exists() or proc.poll() is not None, "a worker to start")
            assert proc.poll() is None, self.output(proc)
        return started

    def output(self, proc: subprocess.Popen) -> str:
        return (self.tmp_path / f"worker-{self.procs.index(proc)}.log").read_text(errors="replace")

    def stop(self, procs: list[subprocess.Popen]) -> None:
        """SIGTERM: each process finishes its job in hand and exits 0."""
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            assert proc.wait(timeout=30) == 0, self.output(proc)

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def processes(tmp_path):
    procs = WorkerProcesses(tmp_path)
    yield procs
    procs.kill_all()


@pytest.fixture
def pg_queue_url(pg_url) -> str:
    dbsupport.truncate_all(pg_url)
    yield pg_url
    # Leave no jobs behind for a later test that shares the database.
    dbsupport.truncate_all(pg_url)


def open_container(database_url: str, tmp_path: Path):
    return bootstrap(Settings(database_url=database_url, data_dir=tmp_path / "data"))


def enqueue_many(container, kind: str, payloads: list[dict], **kw) -> list[int]:
    kw.setdefault("run_after", container.clock.now())
    with container.session_factory() as session:
        jobs = [enqueue(session, kind, payload, **kw) for payload in payloads]
        session.commit()
        return [job.id for job in jobs]


def unfinished(container) -> int:
    with container.session_factory() as session:
        return session.scalar(select(func.count()).select_from(Job).where(Job.state.in_([QUEUED, RUNNING])))


def log_lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize(
    "backend, workers, jobs",
    [pytest.param("postgres", 4, 1000, marks=pytest.mark.postgres), ("sqlite", 2, 200)],
)
def test_worker_processes_drain_every_job_exactly_once(backend, workers, jobs, processes, tmp_path, request):
    if backend == "postgres":
        url = request.getfixturevalue("pg_queue_url")
    else:
        url = dbsupport.sqlite_copy(request.getfixturevalue("sqlite_template"), tmp_path)
    container = open_container(url, tmp_path)
    log = tmp_path / "runs.log"
    # Start the workers on an empty queue, then enqueue everything at once, so that every process
    # competes from the first job on (a process that started first cannot drain the queue alone).
    procs = processes.start(workers, url)
    job_ids = enqueue_many(container, "qtest_record", [{"n": n, "log": str(log)} for n in range(jobs)])

    wait_until(lambda: unfinished(container) == 0, "the queue to drain", timeout=120)
    processes.stop(procs)

    with container.session_factory() as session:
        rows = session.execute(select(Job.state, Job.attempts, func.count()).group_by(Job.state, Job.attempts)).all()
    assert rows == [(SUCCEEDED, 1, jobs)]
    assert len(job_ids) == jobs
    runs = log_lines(log)
    per_job = collections.Counter(int(n) for n, _pid in runs)
    assert sorted(per_job) == list(range(jobs))
    assert set(per_job.values()) == {1}, [n for n, c in per_job.items() if c != 1]
    pids = {int(pid) for _n, pid in runs}
    assert pids <= {proc.pid for proc in procs}
    assert len(pids) > 1, "only one worker process did any work"
    container.dispose()


@pytest.mark.postgres
def test_job_of_a_killed_worker_runs_again_after_its_lease(pg_queue_url, processes, tmp_path):
    container = open_container(pg_queue_url, tmp_path)
    marker, log = tmp_path / "started", tmp_path / "runs.log"
    [first] = processes.start(1, pg_queue_url, lease=2.0)
    [job_id] = enqueue_many(container, "qtest_crash_once", [{"marker": str(marker), "log": str(log)}])

    wait_until(marker.exists, "the first worker to start the job")
    assert int(marker.read_text()) == first.pid
    first.send_signal(signal.SIGKILL)
    first.wait()
    [second] = processes.start(1, pg_queue_url, lease=2.0)

    def job():
        with container.session_factory() as session:
            return session.get(Job, job_id)

    wait_until(lambda: job().state == SUCCEEDED, "the job to be run again")
    processes.stop([second])
    row = job()
    assert row.attempts == 2
    assert row.locked_by.split(":")[1] == str(second.pid)
    assert log_lines(log) == [["rerun", str(second.pid)]]
    container.dispose()


@pytest.mark.postgres
def test_heartbeat_keeps_a_long_job_from_being_taken(pg_queue_url, processes, tmp_path):
    container = open_container(pg_queue_url, tmp_path)
    log = tmp_path / "runs.log"
    # The job outlives its lease more than twice over: only heartbeats keep the idle second worker
    # from claiming it again.
    procs = processes.start(2, pg_queue_url, lease=1.5)
    [job_id] = enqueue_many(container, "qtest_slow", [{"seconds": 4.0, "log": str(log)}])

    with container.session_factory() as session:
        wait_until(lambda: session.get(Job, job_id, populate_existing=True).state == SUCCEEDED, "the slow job")
        assert session.get(Job, job_id).attempts == 1
    processes.stop(procs)
    assert [event for event, _pid in log_lines(log)] == ["start", "end"]
    container.dispose()


# --- claims past locked rows ----------------------------------------------------------------


@pytest.mark.postgres
def test_a_claim_skips_rows_another_connection_holds(pg_queue_url, tmp_path):
    """Another transaction holds a lock on the first queued job and on an abandoned one (a worker
    in the middle of settling them): a claim returns the next free job at once instead of waiting.

    The claiming connection has a lock timeout, so a claim that waits (FOR UPDATE without SKIP
    LOCKED) fails this test within a second instead of hanging it.
    """
    container = open_container(pg_queue_url, tmp_path)
    engine = make_engine(pg_queue_url, connect_args={"options": "-c lock_timeout=1000"})
    queue = JobQueue(make_session_factory(engine), lease=dt.timedelta(seconds=60))
    try:
        [abandoned, first, second] = enqueue_many(container, "qtest_k", [{"n": n} for n in range(3)])
        assert queue.claim("crashed").id == abandoned
        with container.session_factory() as session:
            session.execute(update(Job).where(Job.id == abandoned).values(
                lease_expires_at=func.now() - dt.timedelta(minutes=1)))
            session.commit()

        with container.engine.connect() as holder:
            holder.execute(select(Job.id).where(Job.id.in_([abandoned, first])).with_for_update())
            # Waiting here would end in LockNotAvailable after the lock timeout.
            claimed = queue.claim("w1")
            assert claimed is not None and claimed.id == second
            assert queue.claim("w2") is None
            holder.rollback()
        # Released, the rows are claimed again: the abandoned one first.
        assert [queue.claim("w3").id, queue.claim("w4").id] == [abandoned, first]
    finally:
        engine.dispose()
        container.dispose()


# --- outcomes, in-process, with a clock the test moves ---------------------------------------


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def moved(container, clock):
    """The container with a queue on the test's clock (60 s lease, backoff at most 5 min)."""
    queue = JobQueue(container.session_factory, lease=dt.timedelta(seconds=60),
                     backoff_base=dt.timedelta(seconds=10), backoff_max=dt.timedelta(minutes=5), clock=clock)
    return dataclasses.replace(container, queue=queue)


class DeadLetters:
    """An ``on_dead`` hook that remembers its calls (and, apart, the exception of each)."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict, str]] = []
        self.causes: list[BaseException | None] = []

    def __call__(self, _container, payload: dict, error: str, cause: BaseException | None) -> None:
        self.calls.append((payload, error))
        self.causes.append(cause)


def raising(error: BaseException):
    def run(_container, _payload):
        raise error

    return run


def job_row(container, job_id: int) -> Job:
    with container.session_factory() as session:
        return session.get(Job, job_id)


@pytest.mark.parametrize(
    "error",
    [BlobStoreError("put", "connection reset"), ServiceUnavailableError("database unreachable", component="database"),
     ConnectionResetError("reset by peer"), RuntimeError("a bug")],
    ids=["upstream", "unavailable", "os", "not-a-registry-error"],
)
def test_transient_failure_retries_until_dead_then_on_dead_once(moved, clock, error):
    dead = DeadLetters()
    worker = Worker(moved, HandlerRegistry([Handler("qtest_flaky", raising(error), on_dead=dead)]), "w1")
    [job_id] = enqueue_many(moved, "qtest_flaky", [{"version_id": 7}], max_attempts=3, run_after=clock.now())

    for attempt in range(1, 4):
        assert worker.run_once()
        row = job_row(moved, job_id)
        assert row.attempts == attempt
        if attempt < 3:
            assert row.state == QUEUED
            assert not worker.run_once(), "retried before its backoff ran out"
            clock.advance(minutes=6)
    assert not worker.run_once()

    row = job_row(moved, job_id)
    assert (row.state, row.attempts) == (DEAD, 3)
    assert row.last_error.splitlines()[-1].endswith(str(error))
    assert "raise error" in row.last_error  # the failing frame of the traceback
    assert dead.calls == [({"version_id": 7}, row.last_error)]


@pytest.mark.parametrize("error", [InvalidInputError("bad file path"), VersionNotFoundError("acme/llm", 3)])
def test_non_retryable_failure_is_dead_after_one_attempt(moved, clock, error):
    dead = DeadLetters()
    worker = Worker(moved, HandlerRegistry([Handler("qtest_bad", raising(error), on_dead=dead)]), "w1")
    [job_id] = enqueue_many(moved, "qtest_bad", [{"version_id": 7}], max_attempts=5, run_after=clock.now())

    assert worker.run_once()
    clock.advance(minutes=6)
    assert not worker.run_once()
    row = job_row(moved, job_id)
    assert (row.state, row.attempts) == (DEAD, 1)
    assert dead.calls == [({"version_id": 7}, row.last_error)]


def test_a_value_the_database_refuses_is_not_retried(moved, clock):
    """PostgreSQL refuses an integer past the column (DataError), SQLite cannot even bind it
    (OverflowError): either way the same job fails the same way, so it is dead at once."""
    dead = DeadLetters()

    def store_out_of_range(container, _payload):
        with container.session_factory() as session:
            enqueue(session, "qtest_other", {}, priority=2**63, run_after=container.clock.now())
            session.commit()

    worker = Worker(moved, HandlerRegistry([Handler("qtest_data", store_out_of_range, on_dead=dead)]), "w1")
    [job_id] = enqueue_many(moved, "qtest_data", [{}], max_attempts=5, run_after=clock.now())

    assert worker.run_once()
    clock.advance(minutes=6)
    assert not worker.run_once()
    row = job_row(moved, job_id)
    assert (row.state, row.attempts) == (DEAD, 1)
    assert row.last_error.splitlines()[-1].startswith("registry.domain.errors.UnstorableDataError: ")
    [cause] = dead.causes
    assert isinstance(cause, UnstorableDataError) and cause.code == "unstorable-data"


def test_max_attempts_comes_from_the_setting(database_url, tmp_path, monkeypatch, clock):
    monkeypatch.setenv("MODELREG_JOB_MAX_ATTEMPTS", "2")
    container = bootstrap(load_settings(database_url=database_url, data_dir=tmp_path / "data"))
    # The container's queue carries the setting: a job services enqueue through it gets that many attempts.
    queue = dataclasses.replace(container.queue, backoff_base=dt.timedelta(seconds=1), clock=clock)
    moved = dataclasses.replace(container, queue=queue)
    try:
        with moved.session_factory() as session:
            job_id = queue.enqueue_job(session, JobKind.SEAL_VERSION, {"version_id": 7}, 7).id
            session.commit()
        assert job_row(moved, job_id).max_attempts == 2
        worker = Worker(moved, HandlerRegistry([Handler("seal_version", raising(TimeoutError("slow")))]), "w1")
        assert worker.run_once()
        clock.advance(minutes=1)
        assert worker.run_once()
        assert (job_row(moved, job_id).state, job_row(moved, job_id).attempts) == (DEAD, 2)
    finally:
        container.dispose()


def test_failing_on_dead_hook_does_not_stop_the_worker(moved, clock):
    def broken_hook(_container, _payload, _error, _cause):
        raise RuntimeError("hook broke")

    handlers = HandlerRegistry([
        Handler("qtest_bad", raising(InvalidInputError("nope")), on_dead=broken_hook),
        Handler("qtest_ok", lambda _c, _p: None),
    ])
    worker = Worker(moved, handlers, "w1")
    [bad] = enqueue_many(moved, "qtest_bad", [{}], run_after=clock.now(), priority=1)
    [ok] = enqueue_many(moved, "qtest_ok", [{}], run_after=clock.now(), priority=2)
    assert worker.run_once() and worker.run_once()
    assert job_row(moved, bad).state == DEAD
    assert job_row(moved, ok).state == SUCCEEDED


def test_lease_expiring_on_the_last_attempt_runs_on_dead(moved, clock):
    dead = DeadLetters()
    worker = Worker(moved, HandlerRegistry([Handler("qtest_k", lambda _c, _p: None, on_dead=dead)]), "w1")
    [job_id] = enqueue_many(moved, "qtest_k", [{"file_id": 1}], max_attempts=1, run_after=clock.now())
    assert moved.queue.claim("crashed-worker") is not None
    clock.advance(seconds=61)

    assert not worker.run_once()
    row = job_row(moved, job_id)
    assert row.state == DEAD
    assert dead.calls == [({"file_id": 1}, row.last_error)]
    assert "lease expired on attempt 1" in row.last_error


@pytest.mark.parametrize("outcome", ["succeeds", "fails"])
def test_outcome_after_a_lost_lease_is_not_recorded(moved, clock, outcome):
    dead = DeadLetters()

    def run(_container, _payload):
        # The worker stalls past its lease and another worker takes the job meanwhile.
        clock.advance(seconds=61)
        assert moved.queue.claim("thief") is not None
        if outcome == "fails":
            raise InvalidInputError("would be dead at once if it counted")

    worker = Worker(moved, HandlerRegistry([Handler("qtest_stall", run, on_dead=dead)]), "w1")
    [job_id] = enqueue_many(moved, "qtest_stall", [{}], run_after=clock.now())
    assert worker.run_once()
    row = job_row(moved, job_id)
    assert (row.state, row.locked_by, row.attempts) == (RUNNING, "thief", 2)
    assert dead.calls == []


def test_worker_without_handlers_claims_nothing(moved, clock):
    [job_id] = enqueue_many(moved, "qtest_k", [{}], run_after=clock.now())
    assert not Worker(moved, HandlerRegistry(), "w1").run_once()
    assert job_row(moved, job_id).state == QUEUED


def test_worker_claims_only_its_kinds(moved, clock):
    [other] = enqueue_many(moved, "qtest_other", [{}], run_after=clock.now(), priority=1)
    [mine] = enqueue_many(moved, "qtest_mine", [{}], run_after=clock.now(), priority=2)
    worker = Worker(moved, HandlerRegistry([Handler("qtest_mine", lambda _c, _p: None)]), "w1")
    assert worker.run_once()
    assert not worker.run_once()
    assert job_row(moved, mine).state == SUCCEEDED
    assert job_row(moved, other).state == QUEUED


def test_retryable_classification():
    from sqlalchemy.exc import DataError, OperationalError

    assert is_retryable(BlobStoreError("get", "timeout"))
    assert is_retryable(OperationalError("SELECT 1", {}, Exception("server closed the connection")))
    assert is_retryable(TimeoutError())
    assert is_retryable(KeyError("x"))
    assert not is_retryable(InvalidInputError("bad"))
    assert not is_retryable(VersionNotFoundError("a/b", 1))
    assert is_retryable(ServiceUnavailableError("database unreachable"))
    assert not is_retryable(DataError("INSERT", {}, Exception("value too long for type character varying(256)")))
    assert not is_retryable(OverflowError("Python int too large to convert to SQLite INTEGER"))
    assert not is_retryable(UnstorableDataError("value too long"))
