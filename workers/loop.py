"""The worker loop: claim a job, run its handler while a heartbeat keeps the lease, settle it.

One :class:`Worker` runs one job at a time. ``modelreg serve`` starts a few in threads beside the
API (:func:`run_workers`); ``modelreg worker`` runs a process of them (:func:`run_worker_process`)
that finishes its current jobs and exits on SIGTERM or SIGINT.

How an outcome is recorded:

- the handler returns: ``complete``;
- it raises a transient error (an upstream, the blob store or the database failed or is
  unavailable, any error that is not a :class:`~registry.domain.errors.RegistryError`): ``fail``
  with retry, so the queue backs off and tries again until the job's ``max_attempts``;
- it raises any other ``RegistryError`` (bad input, not found, integrity), or the database refuses
  a value (a data error, recorded as :class:`~registry.domain.errors.UnstorableDataError`):
  ``fail`` without retry, since the same input will fail the same way;
- when the job goes dead, the handler's ``on_dead`` runs once.

If the lease is lost while the handler runs (the heartbeat could not renew it in time and another
worker took the job), the outcome is not recorded: the other worker's run counts.

Usage (a sketch, not run as a doctest)::

    stop = threading.Event()
    Worker(container, handlers, poll_interval=0.5).run(stop)
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import traceback
import uuid
from types import FrameType

from sqlalchemy.exc import DataError, DBAPIError

from registry.bootstrap import Container
from registry.domain.errors import RegistryError, ServiceUnavailableError, UnstorableDataError, UpstreamError
from registry.jobs import DEAD, LOST, ClaimedJob, JobQueue
from workers.handler_registry import Handler, HandlerRegistry

log = logging.getLogger(__name__)

# OperationalError is a DBAPIError; ConnectionError and TimeoutError are OSErrors. They are listed
# to say what "transient" means here, not because the tuple needs them.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    UpstreamError,
    ServiceUnavailableError,
    DBAPIError,
    OSError,
    ConnectionError,
    TimeoutError,
)

# A value the database refuses (PostgreSQL's data errors; SQLite cannot bind an integer past 64
# bits) is refused again on every attempt. DataError is a DBAPIError: it is checked first.
DATA_ERRORS: tuple[type[BaseException], ...] = (DataError, OverflowError)

_TRACEBACK_LINES = 20


def is_retryable(error: BaseException) -> bool:
    """Whether running the job again may succeed.

    Any error that is not a deliberate ``RegistryError`` counts as transient: a bug fixed by a
    deploy, a flaky dependency. A ``RegistryError`` outside the transient branches describes the
    input (invalid, missing, tampered), which another attempt would not change; so does a value
    the database refuses.
    """
    if isinstance(error, DATA_ERRORS):
        return False
    if isinstance(error, TRANSIENT_ERRORS):
        return True
    return not isinstance(error, RegistryError)


def as_registry_error(error: BaseException) -> BaseException:
    """The error a job failed with, as recorded: a database data error becomes
    :class:`UnstorableDataError` (chained to it); any other error is returned as it is."""
    if not isinstance(error, DATA_ERRORS):
        return error
    cause = getattr(error, "orig", None) or error
    lines = str(cause).strip().splitlines()
    translated = UnstorableDataError(f"{type(cause).__name__}: {lines[0] if lines else ''}")
    translated.__cause__ = error
    return translated


def default_worker_id() -> str:
    """``host:pid:random``, unique across processes and threads."""
    return f"{socket.gethostname()[:64]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def describe_error(error: BaseException) -> str:
    """The last lines of the traceback, ending with ``Type: message``."""
    lines = "".join(traceback.format_exception(error)).rstrip("\n").splitlines()
    return "\n".join(lines[-_TRACEBACK_LINES:])


class _LeaseKeeper:
    """Renews a job's lease from a background thread while the handler runs."""

    def __init__(self, queue: JobQueue, job: ClaimedJob, worker_id: str, interval: float) -> None:
        self._queue = queue
        self._job = job
        self._worker_id = worker_id
        self._interval = interval
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{job.id}", daemon=True)
        self.lost = False

    def __enter__(self) -> _LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(self._interval):
            try:
                renewed = self._queue.heartbeat(self._job, self._worker_id)
            except Exception:
                # A database blip: the lease still has two more intervals to run, try again.
                log.warning("job %d: heartbeat failed", self._job.id, exc_info=True)
                continue
            if not renewed:
                self.lost = True
                log.warning(
                    "job %d %s attempt %d: lease lost while running; its result will not count",
                    self._job.id, self._job.kind, self._job.attempts,
                )
                return


class Worker:
    """Claims jobs of the registered kinds and runs them, one at a time.

    Args:
        container: the process's container (its queue, sessions, blob store...).
        handlers: the kinds this worker runs; it never claims another kind.
        worker_id: the lease holder's name; unique per worker (default: host, pid and a random part).
        poll_interval: the longest wait between two claims when the queue is empty.
        min_poll_interval: the first wait after the queue turned empty (it doubles up to
            ``poll_interval``), so a burst of new jobs is picked up quickly.
        heartbeat_interval: how often the lease is renewed (default: a third of the lease, so two
            renewals may fail before the lease runs out).
    """

    def __init__(
        self,
        container: Container,
        handlers: HandlerRegistry,
        worker_id: str | None = None,
        poll_interval: float = 0.5,
        *,
        min_poll_interval: float = 0.01,
        heartbeat_interval: float | None = None,
    ) -> None:
        self.container = container
        self.handlers = handlers
        self.worker_id = worker_id or default_worker_id()
        self.poll_interval = poll_interval
        self.min_poll_interval = min(min_poll_interval, poll_interval)
        self.heartbeat_interval = heartbeat_interval or container.queue.lease.total_seconds() / 3

    def run(self, stop: threading.Event) -> None:
        """Run jobs until ``stop`` is set; the job running then is finished first."""
        log.info("worker %s: started for %s", self.worker_id, ", ".join(self.handlers.kinds()))
        delay = self.min_poll_interval
        while not stop.is_set():
            try:
                worked = self.run_once()
            except Exception:
                # The database is unreachable (claim or settle failed): wait and try again; an
                # unsettled job is claimed again when its lease runs out.
                log.exception("worker %s: queue error", self.worker_id)
                worked = False
            if worked:
                delay = self.min_poll_interval
                continue
            stop.wait(delay)
            delay = min(delay * 2, self.poll_interval)
        log.info("worker %s: stopped", self.worker_id)

    def run_once(self) -> bool:
        """Claim at most one job, run it and record its outcome.

        Returns:
            True when a job was run (whatever its outcome), False when none was due.
        """
        kinds = self.handlers.kinds()
        if not kinds:
            # claim() takes no kinds to mean every kind; a worker without handlers must take none.
            return False
        job = self.container.queue.claim(self.worker_id, kinds, on_reaped=self._on_reaped)
        if job is None:
            return False
        self._execute(self.handlers.get(job.kind), job)
        return True

    def _execute(self, handler: Handler, job: ClaimedJob) -> None:
        queue = self.container.queue
        started = time.monotonic()
        log.debug("job %d %s attempt %d/%d: started", job.id, job.kind, job.attempts, job.max_attempts)
        error: BaseException | None = None
        with _LeaseKeeper(queue, job, self.worker_id, self.heartbeat_interval):
            try:
                handler.run(self.container, job.payload)
            except Exception as exc:
                error = as_registry_error(exc)
        duration = time.monotonic() - started

        if error is None:
            if queue.complete(job, self.worker_id):
                log.info("job %d %s attempt %d/%d: succeeded in %.3fs",
                         job.id, job.kind, job.attempts, job.max_attempts, duration)
            else:
                log.warning("job %d %s attempt %d: finished in %.3fs after its lease was lost; not recorded",
                            job.id, job.kind, job.attempts, duration)
            return

        retry = is_retryable(error)
        detail = describe_error(error)
        state = queue.fail(job, self.worker_id, detail, retry=retry)
        if state == LOST:
            log.warning("job %d %s attempt %d: failed in %.3fs after its lease was lost; not recorded: %r",
                        job.id, job.kind, job.attempts, duration, error)
            return
        log.warning("job %d %s attempt %d/%d: failed in %.3fs (%s), now %s: %r",
                    job.id, job.kind, job.attempts, job.max_attempts, duration,
                    "transient" if retry else "not retryable", state, error)
        if state == DEAD:
            self._run_on_dead(handler, job, detail, error)

    def _on_reaped(self, job: ClaimedJob, error: str) -> None:
        log.warning("job %d %s: lease expired on its last attempt (%d); dead", job.id, job.kind, job.attempts)
        if job.kind in self.handlers:
            self._run_on_dead(self.handlers.get(job.kind), job, error, None)

    def _run_on_dead(self, handler: Handler, job: ClaimedJob, error: str, cause: BaseException | None) -> None:
        if handler.on_dead is None:
            return
        try:
            handler.on_dead(self.container, job.payload, error, cause)
        except Exception:
            # The job is dead either way; a failing hook must not stop the worker.
            log.exception("job %d %s: on_dead hook failed", job.id, job.kind)


def run_workers(
    container: Container,
    handlers: HandlerRegistry,
    count: int,
    stop: threading.Event,
    *,
    poll_interval: float = 0.5,
    worker_id_prefix: str | None = None,
) -> list[threading.Thread]:
    """Start ``count`` worker threads in this process (``modelreg serve`` embeds them).

    The threads are daemons: to let them finish their current jobs, set ``stop`` and join them.

    Returns:
        The started threads.
    """
    prefix = worker_id_prefix or default_worker_id()
    threads = []
    for index in range(count):
        worker = Worker(container, handlers, f"{prefix}-{index}", poll_interval)
        thread = threading.Thread(target=worker.run, args=(stop,), name=f"worker-{index}", daemon=True)
        thread.start()
        threads.append(thread)
    return threads


def run_worker_process(
    container: Container,
    handlers: HandlerRegistry,
    *,
    threads: int = 1,
    poll_interval: float = 0.5,
    stop: threading.Event | None = None,
) -> int:
    """Run workers until SIGTERM or SIGINT, then finish the jobs in hand and return 0.

    Must be called from the main thread (signal handlers live there). A second signal of the same
    kind is not caught any more: it ends the process at once.

    Returns:
        The process exit code.
    """
    stop = stop or threading.Event()

    def _request_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: finishing the current jobs, then exiting", signal.Signals(signum).name)
        stop.set()
        signal.signal(signum, signal.SIG_DFL)

    signal.signal(signal.SIGTERM, _request_stop)
    signal.signal(signal.SIGINT, _request_stop)
    started = run_workers(container, handlers, threads, stop, poll_interval=poll_interval)
    # Join with a timeout: the main thread must wake up to run the signal handlers.
    while any(thread.is_alive() for thread in started):
        for thread in started:
            thread.join(timeout=0.5)
    return 0
