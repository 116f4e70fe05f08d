"""Fan-out: N serving nodes long-polling one API process on PostgreSQL; prod moves; how fast all learn it.

Usage (from the repository root)::

    .venv/bin/python bench/fanout.py [--n 2000] [--rounds 3] [--database-url URL] [--baseline-commit 9b550b5]

It creates a fresh, migrated PostgreSQL database beside ``MODELREG_TEST_PG_URL`` (``--database-url``: an
existing, migrated one), seeds ``acme/llm`` v1 and v2 approved with ``prod`` -> 1 and ``--tokens`` node
tokens (the waiters use them in turn), and raises this process's file limit to its hard limit.

Each round, for each variant, it starts ``modelreg serve --workers 0`` (one API process), and:

1. opens N concurrent ``GET .../manifest?ref=prod&wait=120`` with the current ETag (raw asyncio sockets,
   one connection each: the client stays light), and lets them settle;
2. measures, over ``--window`` seconds while they wait, the database's transactions per second
   (``pg_stat_database`` ``xact_commit + xact_rollback`` deltas of the bench database: every statement
   outside a transaction counts as one; this script's own two reads are included) and the server's
   RSS growth since before the waits (``/proc/<pid>/status`` VmRSS), divided by N;
3. moves prod to the other version in-process, and times until every waiter has its 200 with the new
   ETag (p50, max; a waiter answered otherwise, or not within 60 s, counts as missed).

The variants: ``stream`` (this checkout: one event watcher per process, LISTEN/NOTIFY) and ``polling``
(today's per-waiter polling: the code of ``--baseline-commit`` exported with ``git archive`` into a
temporary directory and run with the same interpreter, PYTHONPATH pointing there). The database is
dropped at the end, whatever happened.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[0] = str(REPO)

import argparse  # noqa: E402 (after sys.path[0] is set)
import asyncio  # noqa: E402 (after sys.path[0] is set)
import datetime as dt  # noqa: E402 (after sys.path[0] is set)
import io  # noqa: E402 (after sys.path[0] is set)
import os  # noqa: E402 (after sys.path[0] is set)
import re  # noqa: E402 (after sys.path[0] is set)
import resource  # noqa: E402 (after sys.path[0] is set)
import signal  # noqa: E402 (after sys.path[0] is set)
import statistics  # noqa: E402 (after sys.path[0] is set)
import subprocess  # noqa: E402 (after sys.path[0] is set)
import tarfile  # noqa: E402 (after sys.path[0] is set)
import tempfile  # noqa: E402 (after sys.path[0] is set)
import time  # noqa: E402 (after sys.path[0] is set)

import httpx  # noqa: E402 (after sys.path[0] is set)
import psycopg  # noqa: E402 (after sys.path[0] is set)
from sqlalchemy.engine import make_url  # noqa: E402 (after sys.path[0] is set)

from tests.support import db as dbsupport  # noqa: E402 (after sys.path[0] is set)
from tests.support.release_seed import MODEL, TENANT, promote, seed_release  # noqa: E402 (after sys.path[0] is set)
from tests.support.server import free_port, wait_until_up  # noqa: E402 (after sys.path[0] is set)

PATH = f"/v1/models/{TENANT}/{MODEL}/manifest"


def raise_file_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


# The CLI of any commit, on today's environment: the baseline's code imports ``typer.exceptions``, which typer has
# only from 0.26 on (pyproject.toml keeps typer below 0.26); click's ClickException is the same error there.
SERVE = """
import sys, types
try:
    import typer.exceptions
except ImportError:
    import click.exceptions
    sys.modules["typer.exceptions"] = types.SimpleNamespace(TyperException=click.exceptions.ClickException)
from registry.cli import main
main()
"""


def start_server(code: Path, database_url: str, data_dir: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELREG_")}
    env.update(MODELREG_DATABASE_URL=database_url, PYTHONPATH=str(code))
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, "serve", "--data-dir", str(data_dir),
         "--host", "127.0.0.1", "--port", str(port), "--workers", "0"],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, cwd=code,
        # The server inherits the raised file limit.
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(process, url, log, timeout=60)
    except RuntimeError:
        process.kill()
        raise
    return process, url


def stop_server(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def transactions(admin_dsn: str, name: str) -> int:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        return int(conn.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                                (name,)).fetchone()[0])


async def long_poll(port: int, token: str, etag: str, out: list, index: int, sent: asyncio.Event,
                    counter: list[int], n: int) -> None:
    """One raw HTTP/1.1 long poll; records (status, etag, time answered)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write((f"GET {PATH}?ref=prod&wait=120 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      f"Authorization: Bearer {token}\r\nIf-None-Match: {etag}\r\n\r\n").encode())
        await writer.drain()
        counter[0] += 1
        if counter[0] == n:
            sent.set()
        head = await reader.readuntil(b"\r\n\r\n")
        at = time.monotonic()
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        await reader.readexactly(int(headers.get("content-length", "0")))
        out[index] = (status, headers.get("etag"), at)
    except Exception as exc:  # noqa: BLE001 - a failed waiter is counted, not fatal
        out[index] = (0, repr(exc), time.monotonic())
    finally:
        writer.close()


def migration_head(code: Path) -> str:
    """The newest Alembic revision of the tree at ``code``: the one no other revision names as its parent."""
    revisions, parents = set(), set()
    for path in (code / "migrations" / "versions").glob("*.py"):
        text = path.read_text()
        revisions.update(re.findall(r'^revision: str = "([^"]+)"', text, re.M))
        parents.update(re.findall(r'^down_revision: [^=]+= "([^"]+)"', text, re.M))
    (head,) = revisions - parents
    return head


def stamp(database_url: str, revision: str) -> None:
    """Set the database's Alembic revision without migrating: the baseline's server, which migrates on
    start, then finds its own head. The revisions after the baseline add tables and columns only, which
    the baseline neither reads nor writes, so it runs on the same schema."""
    dsn = dbsupport._psycopg_dsn(database_url)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = %s", (revision,))


async def one_round(args, variant: str, code: Path, database_url: str, admin_dsn: str, db_name: str,
                    data_dir: Path, tokens: list[str], target: int, log: Path) -> dict:
    ours = migration_head(REPO)
    if code != REPO:
        stamp(database_url, migration_head(code))
    try:
        process, url = start_server(code, database_url, data_dir, log)
    finally:
        if code != REPO:
            stamp(database_url, ours)
    try:
        port = int(url.rsplit(":", 1)[1])
        r = httpx.get(url + PATH, params={"ref": "prod"}, headers={"Authorization": f"Bearer {tokens[0]}"},
                      timeout=30)
        assert r.status_code == 200, r.text
        etag = r.headers["ETag"]
        rss_before = rss_kib(process.pid)
        out: list = [None] * args.n
        sent, counter = asyncio.Event(), [0]
        tasks = [asyncio.create_task(long_poll(port, tokens[i % len(tokens)], etag, out, i, sent, counter, args.n))
                 for i in range(args.n)]
        await asyncio.wait_for(sent.wait(), 120)
        # Every waiter's first issue (a 304) must be done before the window: they go through the threadpool.
        await asyncio.sleep(args.settle)
        x0, t0 = transactions(admin_dsn, db_name), time.monotonic()
        await asyncio.sleep(args.window)
        x1, t1 = transactions(admin_dsn, db_name), time.monotonic()
        rss_after = rss_kib(process.pid)
        early = sum(1 for o in out if o is not None)
        await asyncio.to_thread(promote, data_dir, target, database_url)
        moved = time.monotonic()
        await asyncio.wait(tasks, timeout=60)
        for task in tasks:
            task.cancel()
        answered = [o[2] - moved for o in out if o is not None and o[0] == 200 and o[1] != etag]
        return {"variant": variant, "statements_per_s": (x1 - x0) / (t1 - t0),
                "rss_per_waiter_kib": (rss_after - rss_before) / args.n,
                "answered": len(answered), "missed": args.n - len(answered), "early": early,
                "p50": statistics.median(answered) if answered else float("nan"),
                "max": max(answered) if answered else float("nan")}
    finally:
        stop_server(process)


def export_baseline(commit: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    # The CLI finds the workers by the entry point this checkout installed (workers.entrypoints); a baseline
    # from before that name keeps the same functions in workers/service.py.
    renamed = into / "workers" / "entrypoints.py"
    if not renamed.exists() and (into / "workers" / "service.py").exists():
        renamed.write_text("from workers.service import run_worker_process, start_workers  # noqa: F401\n")
    return into


async def main_async(args) -> None:
    limit = raise_file_limit()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    print(f"fan-out: N={args.n} waiters, {args.rounds} rounds; file limit {limit}; load average "
          f"{os.getloadavg()[0]:.2f}; {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; commit "
          f"{head.stdout.strip()}"
          f"; baseline {args.baseline_commit}")
    created = args.database_url is None
    database_url = args.database_url or dbsupport.create_pg_database()
    db_name = make_url(database_url).database
    admin_dsn = dbsupport._psycopg_dsn(make_url(database_url).set(database="postgres").render_as_string(False))
    try:
        with tempfile.TemporaryDirectory(prefix="fanout-") as tmp:
            tmp_path = Path(tmp)
            data_dir = tmp_path / "data"
            tokens = seed_release(data_dir, min(args.tokens, args.n), database_url)
            baseline = export_baseline(args.baseline_commit, tmp_path / "baseline")
            results = []
            target = 2
            for round_no in range(1, args.rounds + 1):
                for variant, code in (("stream", REPO), ("polling", baseline)):
                    result = await one_round(args, variant, code, database_url, admin_dsn, db_name, data_dir,
                                             tokens, target, tmp_path / f"serve-{variant}-{round_no}.log")
                    target = 3 - target
                    results.append((round_no, result))
                    print(f"round {round_no} {variant:7s} N={args.n}: all new manifests in {result['max']:.2f} s "
                          f"(p50 {result['p50']:.2f} s, {result['answered']} answered, {result['missed']} missed, "
                          f"{result['early']} early), {result['statements_per_s']:.1f} statements/s while waiting, "
                          f"{result['rss_per_waiter_kib']:.1f} KiB RSS per waiter", flush=True)
            print(f"load average after: {os.getloadavg()[0]:.2f}")
            print("ratio (polling / stream), per round:")
            for round_no in range(1, args.rounds + 1):
                s, p = (r for n, r in results if n == round_no)
                statements = (f"{p['statements_per_s'] / s['statements_per_s']:.1f}x" if s["statements_per_s"] > 0
                              else f"{p['statements_per_s']:.1f}/s vs none counted")
                rss = (f"{p['rss_per_waiter_kib'] / s['rss_per_waiter_kib']:.2f}x" if s["rss_per_waiter_kib"] > 0
                       else "n/a")
                print(f"  round {round_no}: time to all {p['max'] / s['max']:.2f}x, statements/s {statements}, "
                      f"RSS per waiter {rss}")
    finally:
        if created:
            dbsupport.drop_pg_database(database_url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--baseline-commit", default="9b550b5")
    parser.add_argument("--tokens", type=int, default=50, help="node tokens the waiters use in turn")
    parser.add_argument("--settle", type=float, default=None, help="seconds after the last wait is sent")
    parser.add_argument("--window", type=float, default=5.0, help="seconds statements are counted over")
    args = parser.parse_args()
    if args.settle is None:
        args.settle = 2.0 + args.n / 250
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
