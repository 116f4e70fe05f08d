"""A worker process for the queue's multi-process tests and for ``bench/queue.py``.

Run as ``python -m tests.support.queue_worker --ready FILE`` from the repository root. The database,
lease and backoff come from the environment (``MODELREG_DATABASE_URL``, ``MODELREG_JOB_LEASE_SECONDS``,
...) as for any modelreg process. The process writes FILE once it has reached the database, then
runs the ``qtest_*`` handlers below until SIGTERM. With ``--raw`` it instead drains ``bench_noop``
jobs with a bare ``UPDATE ... RETURNING`` claim (no lease, no retry): the benchmark's floor.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from pathlib import Path

from sqlalchemy import text

from registry.bootstrap import Container, bootstrap, load_settings
from workers.handler_registry import Handler, HandlerRegistry
from workers.loop import run_worker_process


def append_line(path: str, line: str) -> None:
    """Append one line atomically: O_APPEND writes this small never interleave across processes."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def record(_container: Container, payload: dict) -> None:
    """Log ``n pid`` to ``payload['log']``: one line per execution."""
    append_line(payload["log"], f"{payload['n']} {os.getpid()}")


def crash_once(_container: Container, payload: dict) -> None:
    """First run: write the marker (with this pid) and hang until killed. A later run: succeed."""
    marker = Path(payload["marker"])
    if marker.exists():
        append_line(payload["log"], f"rerun {os.getpid()}")
        return
    partial = marker.with_suffix(".partial")
    partial.write_text(str(os.getpid()))
    partial.replace(marker)  # at once: a reader that sees the marker sees the pid in it
    time.sleep(payload.get("hang_seconds", 120))
    raise TimeoutError("crash_once was never killed")


def slow(_container: Container, payload: dict) -> None:
    """Outlive several leases (the heartbeat must keep it), then record."""
    append_line(payload["log"], f"start {os.getpid()}")
    time.sleep(payload["seconds"])
    append_line(payload["log"], f"end {os.getpid()}")


def noop(_container: Container, _payload: dict) -> None:
    pass


def build_handlers() -> HandlerRegistry:
    return HandlerRegistry([
        Handler("qtest_record", record),
        Handler("qtest_crash_once", crash_once),
        Handler("qtest_slow", slow),
        Handler("bench_noop", noop),
    ])


_RAW_CLAIM = text(
    "UPDATE jobs SET state = 'running', attempts = attempts + 1 WHERE id = ("
    " SELECT id FROM jobs WHERE state = 'queued' AND kind = 'bench_noop'"
    " ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id, payload"
)
_RAW_DONE = text("UPDATE jobs SET state = 'succeeded' WHERE id = :id")


def run_raw(container: Container, stop: threading.Event) -> None:
    """Claim and finish ``bench_noop`` jobs with two bare statements each, until stopped."""
    with container.engine.connect() as conn:
        while not stop.is_set():
            with conn.begin():
                row = conn.execute(_RAW_CLAIM).first()
            if row is None:
                stop.wait(0.01)
                continue
            noop(container, row.payload)
            with conn.begin():
                conn.execute(_RAW_DONE, {"id": row.id})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ready", required=True, help="file written once the process can work")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--poll", type=float, default=0.05)
    parser.add_argument("--raw", action="store_true")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args()
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(process)d %(name)s %(message)s")

    container = bootstrap(load_settings())
    with container.engine.connect() as conn:
        conn.execute(text("SELECT 1"))
    stop = threading.Event()
    if args.raw:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        Path(args.ready).write_text(str(os.getpid()))
        run_raw(container, stop)
        return 0
    Path(args.ready).write_text(str(os.getpid()))
    return run_worker_process(container, build_handlers(), threads=args.threads, poll_interval=args.poll,
                              stop=stop)


if __name__ == "__main__":
    raise SystemExit(main())
