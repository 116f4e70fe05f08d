"""Queue throughput: how fast worker processes drain a backlog of trivial jobs on PostgreSQL.

Usage (from the repository root)::

    .venv/bin/python bench/queue.py [--jobs 5000] [--workers 4]

It creates a fresh, migrated PostgreSQL database beside ``MODELREG_TEST_PG_URL`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``), and for each scenario starts the worker
processes on an empty queue, enqueues ``--jobs`` no-op jobs in one transaction, and times from that
commit until no job is queued or running. Scenarios, all in the same run so they share the machine's
state:

- ``modelreg``: ``--workers`` processes running :class:`workers.loop.Worker` (claim with
  ``FOR UPDATE SKIP LOCKED``, lease, heartbeat thread, ``complete``);
- ``modelreg-1``: the same with one process, the scaling baseline;
- ``raw``: ``--workers`` processes claiming with one bare ``UPDATE ... RETURNING`` and finishing with
  one ``UPDATE`` (no lease, no retry, no ORM): the floor the queue's bookkeeping is compared to.

The database is dropped at the end, whatever happened.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Run as a script, this directory would come first on sys.path, and this file would shadow the
# standard library's ``queue`` module for everything imported below.
sys.path[0] = str(REPO)

import argparse  # noqa: E402 (after sys.path[0] is set)
import os  # noqa: E402 (after sys.path[0] is set)
import platform  # noqa: E402 (after sys.path[0] is set)
import signal  # noqa: E402 (after sys.path[0] is set)
import subprocess  # noqa: E402 (after sys.path[0] is set)
import tempfile  # noqa: E402 (after sys.path[0] is set)
import time  # noqa: E402 (after sys.path[0] is set)
from dataclasses import dataclass  # noqa: E402 (after sys.path[0] is set)

from sqlalchemy import func, insert, select, text  # noqa: E402 (after sys.path[0] is set)

from registry.db.models import Job, utcnow  # noqa: E402 (after sys.path[0] is set)
from registry.db.session import make_engine  # noqa: E402 (after sys.path[0] is set)
from tests.support import db as dbsupport  # noqa: E402 (after sys.path[0] is set)

KIND = "bench_noop"


@dataclass(frozen=True)
class Result:
    scenario: str
    workers: int
    jobs: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


def start_workers(count: int, url: str, workdir: Path, *, raw: bool) -> list[subprocess.Popen]:
    env = dict(os.environ, MODELREG_DATABASE_URL=url, MODELREG_DATA_DIR=str(workdir / "data"))
    procs = []
    for index in range(count):
        ready = workdir / f"ready-{time.monotonic_ns()}-{index}"
        args = [sys.executable, "-m", "tests.support.queue_worker", "--ready", str(ready),
                "--poll", "0.01", "--log-level", "WARNING"]
        proc = subprocess.Popen(args + (["--raw"] if raw else []), cwd=REPO, env=env)
        proc.ready_file = ready  # type: ignore[attr-defined]
        procs.append(proc)
    for proc in procs:
        while not proc.ready_file.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"worker process exited with {proc.returncode} before it was ready")
            time.sleep(0.02)
    return procs


def stop_workers(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_scenario(name: str, url: str, jobs: int, workers: int, workdir: Path, *, raw: bool) -> Result:
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE jobs RESTART IDENTITY"))
    procs = start_workers(workers, url, workdir, raw=raw)
    try:
        now = utcnow()
        rows = [{"kind": KIND, "payload": {"n": n}, "state": "queued", "priority": 100, "attempts": 0,
                 "max_attempts": 5, "run_after": now, "created_at": now} for n in range(jobs)]
        with engine.begin() as conn:
            conn.execute(insert(Job), rows)
        started = time.perf_counter()
        unfinished = select(func.count()).select_from(Job).where(Job.state.in_(["queued", "running"]))
        with engine.connect() as conn:
            while conn.execute(unfinished).scalar_one():
                conn.commit()
                time.sleep(0.01)
        seconds = time.perf_counter() - started
    finally:
        stop_workers(procs)
    with engine.connect() as conn:
        done = conn.execute(select(func.count()).select_from(Job).where(Job.state == "succeeded")).scalar_one()
    engine.dispose()
    if done != jobs:
        raise RuntimeError(f"{name}: {done} of {jobs} jobs succeeded")
    return Result(name, workers, jobs, seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    url = dbsupport.create_pg_database()
    try:
        with tempfile.TemporaryDirectory(prefix="modelreg-bench-") as tmp:
            workdir = Path(tmp)
            results = [
                run_scenario("modelreg", url, args.jobs, args.workers, workdir, raw=False),
                run_scenario("modelreg-1", url, args.jobs, 1, workdir, raw=False),
                run_scenario("raw", url, args.jobs, args.workers, workdir, raw=True),
            ]
    finally:
        dbsupport.drop_pg_database(url)

    print(f"queue drain, {args.jobs} no-op jobs, PostgreSQL, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}")
    for r in results:
        print(f"  {r.scenario:<11} {r.workers} process(es): {r.seconds:7.2f} s  {r.rate:8.0f} jobs/s")
    modelreg, single, raw = results
    print(f"  modelreg x{args.workers} / modelreg x1: {modelreg.rate / single.rate:.2f}")
    print(f"  modelreg x{args.workers} / raw UPDATE...RETURNING x{args.workers}: {modelreg.rate / raw.rate:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
