"""The verifiable audit log on PostgreSQL: integration rate against the registry's audit write rate, proof
request latency over the integrated tree, and tile storage per event.

Usage (from the repository root)::

    .venv/bin/python bench/log.py [--events 1000000] [--appends 2000] [--rounds 3] [--requests 300]

It creates a fresh, migrated PostgreSQL database beside ``MODELREG_TEST_PG_URL`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``) and drops it at the end, whatever happened. Then:

- baseline: ``--appends`` events written through ``registry.audit.append``, half one per transaction as
  the services write them, half 100 per transaction (events/s): the rates the tree has to keep up with;
- ``--events`` chained audit events in total are loaded (the rest by bulk insert, outside the timings);
- each round empties the log's tables and times ``integrate_audit_log`` over every event (events/s, and
  the ratio to the baseline), then asks a real uvicorn server (``modelreg``'s app) ``--requests``
  inclusion proofs and as many consistency proofs at random leaves and sizes of that tree, one at a
  time, and prints p50/p99 of each, beside ``GET /healthz`` (the HTTP floor) and ``tlog.inclusion``
  called in-process (the proof without HTTP); and the tile storage: bytes of tile data and of the table
  (with its index and TOAST) per event.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[0] = str(REPO)

import argparse  # noqa: E402 (after sys.path[0] is set)
import datetime as dt  # noqa: E402 (after sys.path[0] is set)
import os  # noqa: E402 (after sys.path[0] is set)
import platform  # noqa: E402 (after sys.path[0] is set)
import random  # noqa: E402 (after sys.path[0] is set)
import tempfile  # noqa: E402 (after sys.path[0] is set)
import time  # noqa: E402 (after sys.path[0] is set)

import httpx  # noqa: E402 (after sys.path[0] is set)
from sqlalchemy import func, insert, select, text, update  # noqa: E402 (after sys.path[0] is set)

from registry import audit  # noqa: E402 (after sys.path[0] is set)
from registry.db.models import AuditEvent, AuditHead, LogTile  # noqa: E402 (after sys.path[0] is set)
from tests.support import db as dbsupport  # noqa: E402 (after sys.path[0] is set)

BULK = 10_000


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def make_container(database_url: str, data_dir: Path):
    from registry.bootstrap import bootstrap, load_settings, prepare_embedded

    settings = load_settings(database_url=database_url, data_dir=data_dir)
    prepare_embedded(settings)
    return bootstrap(settings)


def baseline_appends(container, count: int, per_transaction: int) -> float:
    """Events per second through audit.append, ``per_transaction`` events per committed transaction."""
    start = time.perf_counter()
    with container.session_factory() as session:
        for i in range(count):
            audit.append(session, actor="bench", action="bench.event", subject=f"bench/{i}", tenant="acme",
                         details={"n": i})
            if (i + 1) % per_transaction == 0:
                session.commit()
        session.commit()
    return count / (time.perf_counter() - start)


def bulk_load(container, total: int) -> None:
    """Chained events up to ``total`` (hashes computed as append does), inserted in batches."""
    with container.session_factory() as session:
        head = session.get(AuditHead, 1)
        last_id, prev = head.last_event_id, head.last_hash
        at = dt.datetime.now(dt.timezone.utc)
        while last_id < total:
            rows = []
            for event_id in range(last_id + 1, min(total, last_id + BULK) + 1):
                details = {"n": event_id}
                h = audit.event_hash(id=event_id, at=at, actor="bench", action="bench.event",
                                     subject=f"bench/{event_id}", tenant="acme", details=details, prev_hash=prev)
                rows.append({"id": event_id, "at": at, "actor": "bench", "action": "bench.event",
                             "subject": f"bench/{event_id}", "tenant": "acme", "details": details,
                             "prev_hash": prev, "hash": h})
                prev = h
            session.execute(insert(AuditEvent), rows)
            last_id = rows[-1]["id"]
            session.execute(update(AuditHead).where(AuditHead.id == 1).values(last_event_id=last_id, last_hash=prev))
            session.commit()


def proof_latencies(url: str, size: int, requests: int, rng: random.Random) -> tuple[list[float], list[float]]:
    inclusion, consistency = [], []
    with httpx.Client(base_url=url, timeout=30) as client:
        client.get("/log/proof/consistency", params={"first": 1, "second": size})  # warm up
        for _ in range(requests):
            start = time.perf_counter()
            r = client.get("/log/proof/inclusion", params={"index": rng.randrange(size), "size": size})
            inclusion.append((time.perf_counter() - start) * 1000)
            assert r.status_code == 200, r.text
            start = time.perf_counter()
            r = client.get("/log/proof/consistency", params={"first": rng.randint(1, size), "second": size})
            consistency.append((time.perf_counter() - start) * 1000)
            assert r.status_code == 200, r.text
    return inclusion, consistency


def floor_and_service_latencies(url: str, session_factory, size: int, requests: int,
                                rng: random.Random) -> tuple[list[float], list[float]]:
    """``GET /healthz`` over HTTP (the floor a request pays before any proof work), and
    ``tlog.inclusion`` called in-process in a fresh session (the proof's own cost, without HTTP)."""
    from registry.services import tlog

    floor, service = [], []
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(requests):
            start = time.perf_counter()
            client.get("/healthz")
            floor.append((time.perf_counter() - start) * 1000)
    for _ in range(requests):
        start = time.perf_counter()
        with session_factory() as session:
            tlog.inclusion(session, index=rng.randrange(size), size=size)
        service.append((time.perf_counter() - start) * 1000)
    return floor, service


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the log")
    parser.add_argument("--appends", type=int, default=2000, help="events of the audit.append baseline")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300, help="proof requests of each kind per round")
    args = parser.parse_args()

    from api.app import create_app
    from registry.services import tlog
    from tests.support.live_app import serve_in_thread

    database_url = dbsupport.create_pg_database()
    workdir = Path(tempfile.mkdtemp(prefix="bench-log-"))
    container = make_container(database_url, workdir / "data")
    rng = random.Random(9162)
    try:
        print(f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, load "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; {args.events} events, {args.rounds} rounds")
        appends = min(args.appends, args.events) // 2
        single = baseline_appends(container, appends, 1)
        append_rate = baseline_appends(container, appends, 100)
        print(f"baseline audit.append: {single:.0f} events/s one event per transaction, {append_rate:.0f} events/s "
              f"100 per transaction (the ratios below are to the faster)")
        start = time.perf_counter()
        bulk_load(container, args.events)
        print(f"loaded {args.events} events in {time.perf_counter() - start:.1f} s (not timed below)")
        with serve_in_thread(create_app(container)) as url:
            for number in range(1, args.rounds + 1):
                with container.engine.begin() as conn:
                    conn.execute(text("TRUNCATE log_tiles, log_head"))
                start = time.perf_counter()
                done = tlog.integrate_audit_log(container.session_factory)
                seconds = time.perf_counter() - start
                assert done.new_size == args.events, done
                rate = args.events / seconds
                inclusion, consistency = proof_latencies(url, args.events, args.requests, rng)
                floor, service = floor_and_service_latencies(url, container.session_factory, args.events,
                                                             args.requests, rng)
                with container.session_factory() as session:
                    data = session.scalar(select(func.sum(func.length(LogTile.data))))
                    table = session.scalar(text("SELECT pg_total_relation_size('log_tiles')"))
                print(f"round {number}: integrated {args.events} events in {seconds:.1f} s: {rate:.0f} events/s, "
                      f"{rate / append_rate:.1f}x audit.append; inclusion p50 {percentile(inclusion, 50):.2f} ms "
                      f"p99 {percentile(inclusion, 99):.2f} ms; consistency p50 {percentile(consistency, 50):.2f} ms "
                      f"p99 {percentile(consistency, 99):.2f} ms; tiles {data / args.events:.1f} B/event data, "
                      f"{table / args.events:.1f} B/event table; /healthz p50 {percentile(floor, 50):.2f} ms "
                      f"p99 {percentile(floor, 99):.2f} ms; tlog.inclusion in-process p50 "
                      f"{percentile(service, 50):.2f} ms p99 {percentile(service, 99):.2f} ms; "
                      f"load {os.getloadavg()[0]:.1f}")
        return 0
    finally:
        container.dispose()
        dbsupport.drop_pg_database(database_url)


if __name__ == "__main__":
    sys.exit(main())
