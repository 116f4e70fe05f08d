"""Receipts: N nodes reporting what they hold every P seconds to one API process on PostgreSQL; then a revocation.

Usage (from the repository root)::

    .venv/bin/python bench/receipts.py [--nodes 2000] [--every 30] [--rounds 3] [--revokes 1] [--database-url URL]

It creates a fresh, migrated PostgreSQL database beside ``MODELREG_TEST_PG_URL`` (``--database-url``: an existing,
migrated one), seeds ``acme/llm`` v1 and v2 approved and ``--tokens`` node tokens (the nodes use them in turn,
so each principal stays under the report rate), and starts ``modelreg serve --workers 1`` (one API process, one
worker process for webhook deliveries) with a Standard Webhooks receiver subscribed to ``version.still_running``.

Each node reports a snapshot of one held place (``cache-warm``, its cache folder, v1) every ``--every`` seconds,
the nodes spread evenly over the period (``POST /v1/receipts``, httpx over a few keep-alive connections). Each
round is one period; per round it prints the reports answered (and any error), their latency (p50, p99), the API
process's CPU (``/proc/<pid>/stat`` utime + stime over the round's wall time; 100% = one core), and the
database's transactions and rows written per second (``pg_stat_database``: ``xact_commit + xact_rollback``, and
``tup_inserted + tup_updated + tup_deleted``, deltas of the bench database). Then it revokes v1 in-process and
times until the receiver holds one ``version.still_running`` per node (the last event's arrival). With
``--revokes R`` it does that R times, on versions 1..R: before revoking version k > 1 every node reports holding
it instead (one more period), so each revocation alerts every node once and
one run prints R revoke -> last event figures. The database is dropped at the end, whatever happened.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[0] = str(REPO)

import argparse  # noqa: E402 (after sys.path[0] is set)
import asyncio  # noqa: E402 (after sys.path[0] is set)
import datetime as dt  # noqa: E402 (after sys.path[0] is set)
import json  # noqa: E402 (after sys.path[0] is set)
import os  # noqa: E402 (after sys.path[0] is set)
import signal  # noqa: E402 (after sys.path[0] is set)
import statistics  # noqa: E402 (after sys.path[0] is set)
import subprocess  # noqa: E402 (after sys.path[0] is set)
import tempfile  # noqa: E402 (after sys.path[0] is set)
import time  # noqa: E402 (after sys.path[0] is set)

import httpx  # noqa: E402 (after sys.path[0] is set)
import psycopg  # noqa: E402 (after sys.path[0] is set)
from sqlalchemy.engine import make_url  # noqa: E402 (after sys.path[0] is set)

from tests.support import db as dbsupport  # noqa: E402 (after sys.path[0] is set)
from tests.support.release_seed import MODEL, TENANT, admin_token, revoke, seed_release  # noqa: E402
from tests.support.server import free_port, wait_until_up  # noqa: E402 (after sys.path[0] is set)
from tests.support.webhook_receiver import Receiver  # noqa: E402 (after sys.path[0] is set)

TICK = os.sysconf("SC_CLK_TCK")


def start_server(database_url: str, data_dir: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELREG_")}
    env.update(MODELREG_DATABASE_URL=database_url, MODELREG_EGRESS_ALLOW='["127.0.0.1/32"]',
               MODELREG_WEBHOOK_POLL_SECONDS="0.1")
    process = subprocess.Popen(
        [sys.executable, "-c", "from registry.cli import main; main()", "serve", "--data-dir", str(data_dir),
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(process, url, log, path="/readyz", timeout=60)
    except RuntimeError:
        process.kill()
        raise
    return process, url


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def db_counters(admin_dsn: str, name: str) -> tuple[int, int]:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT xact_commit + xact_rollback, tup_inserted + tup_updated + tup_deleted "
                           "FROM pg_stat_database WHERE datname = %s", (name,)).fetchone()
        return int(row[0]), int(row[1])


def body(node: int, version: int) -> dict:
    return {"program": "cache-warm", "node": f"node-{node:05d}", "scope": "/var/cache/modelreg", "snapshot": True,
            "places": [{"model": f"{TENANT}/{MODEL}", "version": version, "where": "path",
                        "path": "/var/cache/modelreg"}]}


async def one_period(clients: list[httpx.AsyncClient], tokens: list[str], nodes: int, every: float,
                     version: int = 1) -> dict:
    """Every node reports once, spread evenly over ``every`` seconds; latencies and failures."""
    latencies: list[float] = []
    failures: dict[str, int] = {}
    start = time.monotonic()

    async def report(node: int) -> None:
        await asyncio.sleep(max(0.0, start + node * every / nodes - time.monotonic()))
        client = clients[node % len(clients)]
        sent = time.monotonic()
        try:
            r = await client.post("/v1/receipts", json=body(node, version),
                                  headers={"Authorization": f"Bearer {tokens[node % len(tokens)]}"})
            key = None if r.status_code == 200 else f"HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            key = type(exc).__name__
        if key is None:
            latencies.append(time.monotonic() - sent)
        else:
            failures[key] = failures.get(key, 0) + 1

    await asyncio.gather(*(report(n) for n in range(nodes)))
    latencies.sort()
    return {"answered": len(latencies), "failures": failures, "wall": time.monotonic() - start,
            "p50": statistics.median(latencies) if latencies else float("nan"),
            "p99": latencies[int(0.99 * (len(latencies) - 1))] if latencies else float("nan")}


async def main_async(args: argparse.Namespace) -> None:
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    print(f"receipts: {args.nodes} nodes every {args.every:g} s, {args.rounds} rounds, {args.revokes} revokes; "
          f"load average "
          f"{os.getloadavg()[0]:.2f}; {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; commit "
          f"{head.stdout.strip()}", flush=True)
    created = args.database_url is None
    database_url = args.database_url or dbsupport.create_pg_database()
    db_name = make_url(database_url).database
    admin_dsn = dbsupport._psycopg_dsn(make_url(database_url).set(database="postgres").render_as_string(False))
    process = None
    try:
        with tempfile.TemporaryDirectory(prefix="receipts-") as tmp, Receiver() as hook:
            data_dir = Path(tmp) / "data"
            tokens = seed_release(data_dir, min(args.tokens, args.nodes), database_url,
                                  approved=max(2, args.revokes + 1))
            admin = admin_token(data_dir, database_url)
            process, url = start_server(database_url, data_dir, Path(tmp) / "serve.log")
            r = httpx.post(f"{url}/v1/webhooks", headers={"Authorization": f"Bearer {admin}"}, timeout=30,
                           json={"tenant": TENANT, "url": hook.url, "types": ["version.still_running"]})
            assert r.status_code == 201, r.text
            limits = httpx.Limits(max_connections=8, max_keepalive_connections=8)
            clients = [httpx.AsyncClient(base_url=url, timeout=60, limits=limits) for _ in range(4)]
            try:
                for round_no in range(1, args.rounds + 1):
                    cpu0, (x0, w0) = cpu_seconds(process.pid), db_counters(admin_dsn, db_name)
                    result = await one_period(clients, tokens, args.nodes, args.every)
                    cpu1, (x1, w1) = cpu_seconds(process.pid), db_counters(admin_dsn, db_name)
                    wall = result["wall"]
                    print(f"round {round_no}: {result['answered']}/{args.nodes} reports answered in {wall:.1f} s "
                          f"(p50 {result['p50'] * 1000:.0f} ms, p99 {result['p99'] * 1000:.0f} ms; failures "
                          f"{json.dumps(result['failures'])}); API CPU {100 * (cpu1 - cpu0) / wall:.1f}% of a core; "
                          f"database {(x1 - x0) / wall:.1f} transactions/s, {(w1 - w0) / wall:.1f} rows written/s",
                          flush=True)
                for number in range(1, args.revokes + 1):
                    if number > 1:
                        refill = await one_period(clients, tokens, args.nodes, args.every, version=number)
                        print(f"refill: {refill['answered']}/{args.nodes} nodes report holding v{number} in "
                              f"{refill['wall']:.1f} s (failures {json.dumps(refill['failures'])})", flush=True)
                    await revoke_and_wait(args, data_dir, database_url, hook, number)
            finally:
                for client in clients:
                    await client.aclose()
            print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        if process is not None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        if created:
            dbsupport.drop_pg_database(database_url)


async def revoke_and_wait(args: argparse.Namespace, data_dir: Path, database_url: str, hook: Receiver,
                          number: int) -> None:
    """Revoke v``number`` in-process; print when its commit came and when the last of its events arrived."""
    expected = number * args.nodes
    before = time.monotonic()
    revoke(data_dir, number, "bench", database_url)
    revoked = time.monotonic()
    deadline = revoked + args.alert_timeout
    while len(hook.requests) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    last = time.monotonic()
    arrived = len(hook.requests) - (number - 1) * args.nodes
    print(f"revoke v{number} (in-process, {revoked - before:.2f} s to commit) -> {arrived}/{args.nodes} "
          f"version.still_running events at the receiver; the last {last - revoked:.2f} s after the commit",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between two reports of a node")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=50, help="node tokens the nodes use in turn")
    parser.add_argument("--revokes", type=int, default=1, help="revocations, each of a version every node holds")
    parser.add_argument("--alert-timeout", type=float, default=300.0)
    parser.add_argument("--database-url", default=None)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
