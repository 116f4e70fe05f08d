"""Release manifest latency: 200 serving nodes asking a real `modelreg serve` on PostgreSQL for prod's release.

Usage (from the repository root)::

    .venv/bin/python bench/manifest.py [--clients 200] [--requests 5] [--rounds 3] [--interval 1.0]

It creates a fresh, migrated PostgreSQL database beside ``MODELREG_TEST_PG_URL`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``; ``--database-url`` uses an existing, migrated one),
seeds it in-process through the services (tenant ``acme``, a five-file version of ``acme/llm`` through the
real pipeline, approved, ``prod`` pointing at it, a ``node`` principal and token per client), and starts
``modelreg serve`` on it (no worker threads) as its own process.

Each round, ``--clients`` httpx async clients (one keep-alive connection each, as many nodes) each ask
``GET /v1/models/acme/llm/manifest?ref=prod`` ``--requests`` times, ``--interval`` seconds apart on
average (jittered, the first at a random point of the first interval, so the nodes do not march in
step; ``--clients / --interval`` is the offered rate): every answer is a full issuance (resolve,
serial, a signature, presigned URLs, an issuance row). With ``--interval 0`` each client asks again as
soon as it has its answer (a closed loop: the server's throughput, not a node's latency). A request
counts as an error unless it is a 200 whose envelope verifies against the trust root (checked after the
round, outside the timing). The script prints p50, p99, max, errors and the throughput of each round.

The database is dropped at the end, whatever happened.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[0] = str(REPO)

import argparse  # noqa: E402 (after sys.path[0] is set)
import asyncio  # noqa: E402 (after sys.path[0] is set)
import datetime as dt  # noqa: E402 (after sys.path[0] is set)
import gc  # noqa: E402 (after sys.path[0] is set)
import hashlib  # noqa: E402 (after sys.path[0] is set)
import io  # noqa: E402 (after sys.path[0] is set)
import json  # noqa: E402 (after sys.path[0] is set)
import os  # noqa: E402 (after sys.path[0] is set)
import platform  # noqa: E402 (after sys.path[0] is set)
import random  # noqa: E402 (after sys.path[0] is set)
import ssl  # noqa: E402 (after sys.path[0] is set)
import subprocess  # noqa: E402 (after sys.path[0] is set)
import tempfile  # noqa: E402 (after sys.path[0] is set)
import time  # noqa: E402 (after sys.path[0] is set)
from collections.abc import Callable  # noqa: E402 (after sys.path[0] is set)

import httpx  # noqa: E402 (after sys.path[0] is set)

from tests.support import db as dbsupport  # noqa: E402 (after sys.path[0] is set)
from tests.support.server import free_port, wait_until_up  # noqa: E402 (after sys.path[0] is set)

TENANT, MODEL = "acme", "llm"
PATH = f"/v1/models/{TENANT}/{MODEL}/manifest"


def seed(database_url: str, data_dir: Path, clients: int) -> list[str]:
    """The approved version behind prod, and one node token per client."""
    from registry.auth import issue_token
    from registry.bootstrap import bootstrap, load_settings, prepare_embedded
    from registry.db.models import Principal, RoleBinding, Tenant
    from registry.domain.aliases import make_target
    from registry.domain.files import FileEntry
    from registry.services import aliases, versions
    from tests.support.registry import drain, make_admin
    from tests.support.releases import approve_standin

    settings = load_settings(database_url=database_url, data_dir=data_dir)
    prepare_embedded(settings)
    container = bootstrap(settings)
    try:
        admin = make_admin(container, TENANT)
        files = {"config.json": json.dumps({"model_type": "llama", "hidden_size": 8}).encode(),
                 "tokenizer.json": b'{"version": "1.0"}', "generation_config.json": b"{}",
                 "README.md": b"# llm\n", "model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "}
        entries = []
        with container.session_factory() as session:
            for path, data in files.items():
                digest = hashlib.sha256(data).hexdigest()
                versions.upload_blob(session, admin, TENANT, digest, io.BytesIO(data), len(data),
                                     blob_store=container.blob_store)
                entries.append(FileEntry(path, len(data), digest))
            versions.submit_uploaded(session, admin, TENANT, MODEL, entries, label="bench",
                                     limits=container.limits(), ports=container.ports)
        drain(container)
        approve_standin(container, TENANT, MODEL, 1)
        with container.session_factory() as session:
            aliases.promote(session, admin, TENANT, MODEL, "prod", make_target(1), policy=container.policy,
                            clock=container.clock)
        tokens = []
        with container.session_factory() as session:
            tenant = session.query(Tenant).filter_by(name=TENANT).one()
            for index in range(clients):
                node = Principal(name=f"node-{index}")
                session.add(node)
                session.flush()
                session.add(RoleBinding(principal_id=node.id, tenant_id=tenant.id, role="node", capacity=""))
                tokens.append(issue_token(session, node).token)
            session.commit()
        return tokens
    finally:
        container.dispose()


def start_server(database_url: str, data_dir: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELREG_")}
    env.update(MODELREG_DATABASE_URL=database_url, PYTHONPATH=str(REPO))
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "modelreg"), "serve", "--data-dir", str(data_dir), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "0"], stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(process, url, log, timeout=60)
    except RuntimeError:
        process.kill()
        raise
    return process, url


async def client_loop(url: str, token: str, requests: int, interval: float, start: asyncio.Event,
                      out: list[tuple[float, int, bytes]], path: str, ready: Callable[[], None],
                      tls: ssl.SSLContext) -> None:
    # uvicorn closes a connection idle for 5 s; a client that keeps one longer races that close.
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=4.0)
    # One TLS context for all: httpx builds one per client otherwise (about 20 ms of CPU each, 4 s for
    # 200 clients), and this event loop would still be building them while the round is timed.
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60, verify=tls,
                                 headers={"Authorization": f"Bearer {token}"}) as http:
        ready()
        await start.wait()
        for index in range(requests):
            if interval:
                # The first request at a random point of the first interval: nodes in a steady state, not
                # 200 pods created in the same millisecond (that burst is --interval 0's first wave).
                await asyncio.sleep(random.uniform(0, 1) * interval if index == 0
                                    else random.uniform(0.5, 1.5) * interval)
            began = time.perf_counter()
            try:
                r = await http.get(path, params={"ref": "prod"})
                out.append((time.perf_counter() - began, r.status_code, r.content))
            except httpx.HTTPError as err:
                out.append((time.perf_counter() - began, 0, repr(err).encode()))


async def one_round(url: str, tokens: list[str], requests: int, interval: float,
                    path: str = PATH) -> tuple[list, float]:
    start, all_ready = asyncio.Event(), asyncio.Event()
    out: list[tuple[float, int, bytes]] = []
    waiting = len(tokens)

    def ready() -> None:
        nonlocal waiting
        waiting -= 1
        if not waiting:
            all_ready.set()

    tls = ssl.create_default_context()
    tasks = [asyncio.create_task(client_loop(url, t, requests, interval, start, out, path, ready, tls))
             for t in tokens]
    # Every client is built and waiting on the start line before the clock starts (a client that failed to
    # build would leave this waiting: bounded).
    try:
        await asyncio.wait_for(all_ready.wait(), timeout=120)
    except asyncio.TimeoutError:
        failed = [t.exception() for t in tasks if t.done() and t.exception()]
        raise SystemExit(f"the clients did not get ready: {failed[:1] or 'timeout'}") from None
    # No collection in this load generator while a round is timed: a pause here would hold back every
    # client's request and answer at once and count as the server's latency (a round's garbage is small).
    gc.collect()
    gc.disable()
    try:
        began = time.perf_counter()
        start.set()
        await asyncio.gather(*tasks)
    finally:
        gc.enable()
    return out, time.perf_counter() - began


def errors_of(url: str, results: list[tuple[float, int, bytes]]) -> list[str]:
    """Every answer that is not a 200 with an envelope that verifies against the served trust root."""
    from registry.signing.release import verify_release
    from registry.signing.trust_root import parse_root

    root = parse_root(httpx.get(f"{url}/v1/trust-root").json())
    now = dt.datetime.now(dt.timezone.utc)
    problems = []
    for _, status, content in results:
        if status != 200:
            problems.append(f"{status}: {content[:200]!r}")
            continue
        try:
            verify_release(json.loads(content)["envelope"], root, now=now, model=f"{TENANT}/{MODEL}", ref="prod")
        except Exception as err:  # noqa: BLE001 - any failure to verify is an error of the run
            problems.append(f"does not verify: {err}")
    return problems


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--requests", type=int, default=5, help="requests per client per round")
    parser.add_argument("--interval", type=float, default=1.0, help="mean seconds between a client's requests")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", action="store_true", help="first, the same load on GET /healthz")
    parser.add_argument("--database-url", help="an existing, migrated database (default: a fresh one, dropped)")
    args = parser.parse_args()

    created = args.database_url is None
    database_url = args.database_url or dbsupport.create_pg_database()
    workdir = Path(tempfile.mkdtemp(prefix="bench-manifest-"))
    process = None
    try:
        tokens = seed(database_url, workdir / "data", args.clients)
        # Seeding ran the pipeline here (scanner and eval imports: a large heap). Out of the collector's
        # reach, so a full collection in this load generator cannot stall all 200 clients at once and be
        # counted as the server's latency.
        gc.collect()
        gc.freeze()
        process, url = start_server(database_url, workdir / "data", workdir / "serve.log")
        # Warm up (imports, the connection pool, the root cache), outside the figures.
        for token in tokens[:5]:
            httpx.get(f"{url}{PATH}", params={"ref": "prod"}, headers={"Authorization": f"Bearer {token}"})
        print(f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, load "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; {args.clients} clients x {args.requests} requests, "
              f"interval {args.interval} s")
        if args.baseline:
            # The floor on this machine: the same clients on GET /healthz (no database, no token check).
            results, elapsed = asyncio.run(one_round(url, tokens, args.requests, args.interval, "/healthz"))
            latencies = [r[0] * 1000 for r in results]
            print(f"baseline /healthz: {len(results)} requests in {elapsed:.1f} s: p50 "
                  f"{percentile(latencies, 50):.1f} ms, p99 {percentile(latencies, 99):.1f} ms, errors "
                  f"{sum(r[1] != 200 for r in results)}")
        for number in range(1, args.rounds + 1):
            results, elapsed = asyncio.run(one_round(url, tokens, args.requests, args.interval))
            latencies = [r[0] * 1000 for r in results]
            errors = errors_of(url, results)
            print(f"round {number}: {len(results)} requests in {elapsed:.1f} s ({len(results) / elapsed:.0f}/s): "
                  f"p50 {percentile(latencies, 50):.1f} ms, p99 {percentile(latencies, 99):.1f} ms, "
                  f"max {max(latencies):.1f} ms, errors {len(errors)}; load {os.getloadavg()[0]:.1f}")
            for line in errors[:5]:
                print(f"  error: {line}")
        return 0
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
        if created:
            dbsupport.drop_pg_database(database_url)


if __name__ == "__main__":
    sys.exit(main())
