"""Fetch: an approved multi-gigabyte model from SeaweedFS to a node, verified, against the raw download floor.

Usage (from the repository root)::

    .venv/bin/python bench/fetch.py [--size-gb 2] [--shards 4] [--parallel 8] [--rounds 3] [--verify-runs 3]

Setup, once: SeaweedFS (``tests.support.seaweed``), a model directory of ``--shards`` safetensors files of
random bytes plus ``config.json`` (five files for the defaults, ``--size-gb`` in all), a ``modelreg serve``
process on a fresh PostgreSQL database (dropped at the end) and an S3 blob store that mirrors, seals, scans and
evaluates it, then the version approved and promoted to ``prod`` (in this process, on the same database) and a node
token.

Each round, in this process, one after the other (``os.sync()`` after each, so no writeback of one phase
runs into the next):

- ``raw http.client``: the manifest's presigned S3 URLs read with parallel ranged GETs (the same
  ``--parallel`` streams and part size as the client) the way the client reads them (``RangeReader``:
  ``http.client``, ``readinto`` a buffer), bytes discarded: the stricter floor, since it parses less per
  byte than httpx;
- ``raw+sha256`` and ``raw+write``: the same GETs through one shared httpx client with each part hashed
  in memory (no disk), or written with ordinary buffered writes into a file per blob (no hashing): what
  each of a fetch's two unavoidable costs adds to the floor on its own, done the plain way;
- ``raw`` (before): the floor: the same GETs through httpx, bytes discarded: no hashing, no disk, no checks;
- ``cold``: ``registry.node.fetch.fetch`` into an empty node cache and a new DEST: manifest, signature and
  root, ranged downloads hashed while streaming, each part written from its buffer into the cache's
  partial file and into DEST's own file (DEST shares no inode with the cache; nothing is read back),
  ``model.sig``;
- ``raw`` (after): the floor again. The goal's ratio is cold / the mean of the floor before and after, so
  a change in the machine's load across the three counts neither for nor against the fetch; both single
  ratios are printed too;
- ``warm``: the same fetch into another new DEST with the cache warm (nothing to download: every cached
  blob is copied into DEST and hashed as it is copied), then, after one untimed read of that DEST (the
  copy was written past the page cache), ``modelreg verify`` of it ``--verify-runs`` times: the cost of one
  hash pass over the same bytes, beside which the warm fetch is read;
- ``verify``: ``modelreg verify DEST --trust-root FILE`` against ``model_signing verify key DEST`` on the
  same directory (both as the commands a person runs, start-up included), after one untimed read of DEST
  (the cold fetch writes past the page cache); each ``--verify-runs`` times (default 3), taking turns,
  which one goes first alternating from round to round; the medians are compared, every time is printed.

It prints every round and the ratios: cold / raw (goal <= 1.10) against each floor, warm seconds (goal <= 0.5, set
when DEST was hard links; a warm fetch now reads every byte once) and warm / ``modelreg verify`` of the warm DEST, and
verify / model_signing (goal <= 0.8), and each round's decomposition: wall time and CPU seconds of this process
and of SeaweedFS for the floors, the two partial floors and the cold fetch. The setup's heap (the pipeline
ran in this process) is frozen out of the collector's reach before the rounds.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[0] = str(REPO)

import argparse  # noqa: E402 (after sys.path[0] is set)
import gc  # noqa: E402 (after sys.path[0] is set)
import hashlib  # noqa: E402 (after sys.path[0] is set)
import json  # noqa: E402 (after sys.path[0] is set)
import os  # noqa: E402 (after sys.path[0] is set)
import resource  # noqa: E402 (after sys.path[0] is set)
import shutil  # noqa: E402 (after sys.path[0] is set)
import statistics  # noqa: E402 (after sys.path[0] is set)
import subprocess  # noqa: E402 (after sys.path[0] is set)
import tempfile  # noqa: E402 (after sys.path[0] is set)
import threading  # noqa: E402 (after sys.path[0] is set)
import time  # noqa: E402 (after sys.path[0] is set)
from concurrent.futures import ThreadPoolExecutor  # noqa: E402 (after sys.path[0] is set)
from typing import Any, Callable  # noqa: E402 (after sys.path[0] is set)

import httpx  # noqa: E402 (after sys.path[0] is set)

from bench.mirror import MIB, write_model  # noqa: E402 (after sys.path[0] is set)
from registry.bootstrap import bootstrap  # noqa: E402 (after sys.path[0] is set)
from registry.client.api import RegistryApi  # noqa: E402 (after sys.path[0] is set)
from registry.client.transfer import RangeReader  # noqa: E402 (after sys.path[0] is set)
from registry.db.models import Version  # noqa: E402 (after sys.path[0] is set)
from registry.domain.aliases import make_target  # noqa: E402 (after sys.path[0] is set)
from registry.node.cache import NodeCache  # noqa: E402 (after sys.path[0] is set)
from registry.node.download import DEFAULT_PART_SIZE, plan_parts  # noqa: E402 (after sys.path[0] is set)
from registry.node.fetch import fetch  # noqa: E402 (after sys.path[0] is set)
from registry.node.opener import NodePolicy  # noqa: E402 (after sys.path[0] is set)
from registry.services import aliases  # noqa: E402 (after sys.path[0] is set)
from registry.settings import Settings  # noqa: E402 (after sys.path[0] is set)
from tests.support import db as dbsupport  # noqa: E402 (after sys.path[0] is set)
from tests.support.registry import make_admin, role_token  # noqa: E402 (after sys.path[0] is set)
from tests.support.releases import approve_standin  # noqa: E402 (after sys.path[0] is set)
from tests.support.seaweed import start_seaweed  # noqa: E402 (after sys.path[0] is set)
from tests.support.server import start_server  # noqa: E402 (after sys.path[0] is set)

BIN = Path(sys.executable).parent
TENANT, NAME = "bench", "big"


def raw_download(api_url: str, token: str, parallel: int, part_size: int, sink: str = "discard",
                 scratch: Path | None = None, transport: str = "httpx") -> tuple[float, int]:
    """Seconds to read every file of the prod release through its presigned URLs.

    ``sink`` says what happens to the bytes: ``discard`` (the floor), ``hash`` (each part through sha256
    in memory: the hashing cost, no disk) or ``write`` (each part written in place into a file per blob
    under ``scratch``: the page-cache cost, no hashing).
    """
    with RegistryApi(api_url, token) as api:
        response = api.manifest(TENANT, NAME, "prod")
    sizes = {f["path"]: f["size"] for f in json.loads(
        __import__("base64").b64decode(response.envelope["payload"]))["files"]}
    parts = [(path, url, start, end) for path, url in response.transport.items()
             for start, end in plan_parts(sizes[path], part_size)]
    fds: dict[str, int] = {}
    if sink == "write":
        assert scratch is not None
        scratch.mkdir(parents=True, exist_ok=True)
        for number, path in enumerate(sizes):
            fds[path] = os.open(scratch / f"blob-{number}", os.O_RDWR | os.O_CREAT, 0o600)
            os.ftruncate(fds[path], sizes[path])
    limits = httpx.Limits(max_connections=parallel, max_keepalive_connections=parallel)
    started = time.perf_counter()
    try:
        if transport == "direct":
            reader, local = RangeReader(timeout=120), threading.local()

            def read(part: tuple[str, str, int, int]) -> int:
                path, url, start, end = part
                if not hasattr(local, "buffer"):
                    local.buffer = memoryview(bytearray(part_size))
                reader.read_into(url, start, end, sizes[path], local.buffer[:end - start], lambda n: None)
                return end - start

            with ThreadPoolExecutor(parallel) as pool:
                total = sum(pool.map(read, parts))
            return time.perf_counter() - started, total
        with httpx.Client(limits=limits, timeout=120) as client:
            def get(part: tuple[str, str, int, int]) -> int:
                path, url, start, end = part
                got = 0
                digest = hashlib.sha256()
                with client.stream("GET", url, headers={"Range": f"bytes={start}-{end - 1}"}) as r:
                    r.raise_for_status()
                    for chunk in r.iter_raw(1 << 20):
                        if sink == "hash":
                            digest.update(chunk)
                        elif sink == "write":
                            os.pwrite(fds[path], chunk, start + got)
                        got += len(chunk)
                return got

            with ThreadPoolExecutor(parallel) as pool:
                total = sum(pool.map(get, parts))
    finally:
        for fd in fds.values():
            os.close(fd)
    return time.perf_counter() - started, total


def cpu_seconds(pid: int | None = None) -> float:
    """User and system CPU seconds of this process (``pid`` None) or of another one, from /proc."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measured(pid: int, run: Callable[[], Any]) -> tuple[float, float, float, Any]:
    """Wall seconds, this process's CPU seconds and process ``pid``'s CPU seconds of ``run()``, and its result."""
    cpu, server_cpu, started = cpu_seconds(), cpu_seconds(pid), time.perf_counter()
    result = run()
    return time.perf_counter() - started, cpu_seconds() - cpu, cpu_seconds(pid) - server_cpu, result


def read_once(directory: Path) -> None:
    """Read every file under ``directory`` once (untimed): its bytes in the page cache, as a hash pass finds them."""
    for f in (f for f in directory.rglob("*") if f.is_file()):
        with f.open("rb") as handle:
            while handle.read(8 << 20):
                pass


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-800:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-gb", type=float, default=2.0)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--verify-runs", type=int, default=3, help="runs of each verifier per round")
    args = parser.parse_args()
    part_size = DEFAULT_PART_SIZE
    work = Path(tempfile.mkdtemp(prefix="modelreg-bench-fetch-"))
    s3 = start_seaweed(work / "seaweed")
    server = database_url = None
    try:
        bucket = "bench-fetch"
        s3.client().create_bucket(Bucket=bucket)
        model = work / "model"
        model.mkdir()
        write_model(model, int(args.size_gb * 1024 * MIB), args.shards)
        data = work / "data"
        data.mkdir()
        database_url = dbsupport.create_pg_database()
        env = {"MODELREG_DATABASE_URL": database_url,
               "MODELREG_BLOB_STORE_URL": f"s3://{bucket}/registry", "MODELREG_S3_ENDPOINT_URL": s3.endpoint_url,
               "MODELREG_S3_REGION": s3.region, "MODELREG_S3_ACCESS_KEY_ID": s3.access_key,
               "MODELREG_S3_SECRET_ACCESS_KEY": s3.secret_key, "MODELREG_LOCAL_SOURCE_ROOTS": json.dumps([str(work)])}
        server = start_server(data, extra_env=env, workers=2)
        settings = Settings(**{k.removeprefix("MODELREG_").lower(): (json.loads(v) if k.endswith("ROOTS") else v)
                               for k, v in env.items()}, data_dir=data)
        container = bootstrap(settings)
        admin = make_admin(container, TENANT)
        token = role_token(container, "node-1", TENANT, "node")
        admin_token = (data / "admin-token").read_text().strip()
        submitted = subprocess.run([str(BIN / "modelreg"), "submit", str(model), "--no-upload", "--model",
                                    f"{TENANT}/{NAME}", "--wait", "--timeout", "1800", "--json"],
                                   env={**os.environ, "MODELREG_URL": server.url, "MODELREG_TOKEN": admin_token},
                                   capture_output=True, text=True)
        if submitted.returncode != 0:
            raise SystemExit(f"submit failed: {submitted.stderr[-2000:]}")
        number = json.loads(submitted.stdout)["version"]
        with container.session_factory() as session:
            state = session.query(Version).filter_by(number=number).one().state
        assert state == "awaiting_approval", state
        approve_standin(container, TENANT, NAME, number)
        with container.session_factory() as session:
            aliases.promote(session, admin, TENANT, NAME, "prod", make_target(number), policy=container.policy,
                            clock=container.clock)
        root_file = work / "root.json"
        root_file.write_text(httpx.get(f"{server.url}/v1/trust-root").text)
        public_key = work / "registry.pub"
        subprocess.run([str(BIN / "modelreg"), "keys", "export", "-o", str(public_key)],
                       env={**os.environ, "MODELREG_URL": server.url}, check=True, capture_output=True)
        size = sum(p.stat().st_size for p in model.iterdir())
        print(f"model: {len(list(model.iterdir()))} files, {size / MIB:.0f} MiB; parallel {args.parallel}, "
              f"part {part_size // MIB} MiB; load {os.getloadavg()[0]:.2f}")
        node_env = {**os.environ, "MODELREG_URL": server.url, "MODELREG_TOKEN": token}
        weed = s3.process.pid
        # The setup ran the pipeline in this process (a large heap): out of the collector's reach, so a full
        # collection cannot stall the fetch's threads and be counted as the fetch's time.
        gc.collect()
        gc.freeze()
        for round_no in range(1, args.rounds + 1):
            floors = {}

            def floor(sink: str, transport: str = "httpx") -> tuple[float, float, float]:
                scratch = work / f"scratch-{round_no}"
                wall, cpu, weed_cpu, (_, got) = measured(weed, lambda: raw_download(
                    server.url, token, args.parallel, part_size, "discard" if sink == "direct" else sink, scratch,
                    transport))
                assert got == size, (sink, got, size)
                shutil.rmtree(scratch, ignore_errors=True)
                os.sync()  # no writeback of this phase runs into the next one
                return wall, cpu, weed_cpu

            for sink, transport in (("direct", "direct"), ("hash", "httpx"), ("write", "httpx")):
                floors[sink] = floor(sink, transport)
            # The floor right before and right after the cold fetch: the ratio is against their mean, so a
            # change in the machine's load during the three is not counted for or against the fetch.
            floors["discard"] = floor("discard")
            cache_dir = work / f"cache-{round_no}"
            with RegistryApi(server.url, token) as api:
                cold_s, cold_cpu, cold_weed, cold = measured(weed, lambda: fetch(
                    f"{TENANT}/{NAME}@prod", work / f"dest-{round_no}", api=api, policy=NodePolicy(root_file),
                    cache=NodeCache(cache_dir), parallel=args.parallel))
                os.sync()
                floors["after"] = floor("discard")
                started = time.perf_counter()
                warm = fetch(f"{TENANT}/{NAME}@prod", work / f"dest-{round_no}-warm", api=api,
                             policy=NodePolicy(root_file), cache=NodeCache(cache_dir), parallel=args.parallel)
                warm_s = time.perf_counter() - started
            warm_dest = work / f"dest-{round_no}-warm"
            read_once(warm_dest)
            warm_verify = [timed([str(BIN / "modelreg"), "verify", str(warm_dest), "--trust-root", str(root_file)],
                                 node_env) for _ in range(args.verify_runs)]
            dest = work / f"dest-{round_no}"
            # The cold fetch wrote past the page cache (O_DIRECT): read DEST once, untimed, so both verifiers
            # start from the same warm page cache, and take turns going first.
            read_once(dest)
            commands = {
                "ours": [str(BIN / "modelreg"), "verify", str(dest), "--trust-root", str(root_file)],
                "theirs": [str(BIN / "model_signing"), "verify", "key", str(dest), "--public_key", str(public_key),
                           "--signature", str(dest / "model.sig")]}
            # Each command --verify-runs times, taking turns (which goes first alternates from round to round);
            # the median of each is compared, every time is printed.
            order = ["ours", "theirs"] if round_no % 2 else ["theirs", "ours"]
            took: dict[str, list[float]] = {"ours": [], "theirs": []}
            for _ in range(args.verify_runs):
                for name in order:
                    took[name].append(timed(commands[name], node_env))
            ours, theirs = statistics.median(took["ours"]), statistics.median(took["theirs"])
            before, after, direct = floors["discard"][0], floors["after"][0], floors["direct"][0]
            raw = (before + after) / 2
            phases = ", ".join(f"{k} {v:.2f}" for k, v in cold.timings.items())
            warm_phases = ", ".join(f"{k} {v:.3f}" for k, v in warm.timings.items())
            cpu_of = ", ".join(f"{name} {wall:.2f} s (cpu: client {cpu:.2f} s, SeaweedFS {weed_cpu:.2f} s)"
                               for name, (wall, cpu, weed_cpu) in (
                                   ("raw before", floors["discard"]), ("raw after", floors["after"]),
                                   ("raw http.client", floors["direct"]),
                                   ("raw+sha256", floors["hash"]),
                                   ("raw+write", floors["write"]), ("cold", (cold_s, cold_cpu, cold_weed))))
            times = {name: "/".join(f"{t:.2f}" for t in took[name]) for name in took}
            print(f"round {round_no}: raw {before:.2f} s before, {after:.2f} s after ({size / MIB / raw:.0f} MiB/s); "
                  f"cold fetch {cold_s:.2f} s ({phases}); cold/raw {cold_s / raw:.2f} (goal <= 1.10; "
                  f"{cold_s / before:.2f} and {cold_s / after:.2f} against each); raw http.client {direct:.2f} s, "
                  f"cold/raw http.client {cold_s / direct:.2f}; warm fetch {warm_s:.3f} s ({warm_phases}) "
                  f"(goal <= 0.5), beside modelreg verify of its DEST {statistics.median(warm_verify):.2f} s "
                  f"({'/'.join(f'{t:.2f}' for t in warm_verify)}): warm / verify "
                  f"{warm_s / statistics.median(warm_verify):.2f}; modelreg verify {ours:.2f} s ({times['ours']}), "
                  "model_signing verify "
                  f"{theirs:.2f} s ({times['theirs']}), ratio of medians {ours / theirs:.2f} (goal <= 0.8); "
                  f"load {os.getloadavg()[0]:.2f}")
            print(f"round {round_no} decomposition: {cpu_of}; raw+sha256/raw {floors['hash'][0] / raw:.2f}, "
                  f"raw+write/raw {floors['write'][0] / raw:.2f}")
            shutil.rmtree(cache_dir, ignore_errors=True)
            for d in (work / f"dest-{round_no}", work / f"dest-{round_no}-warm"):
                shutil.rmtree(d, ignore_errors=True)
        container.dispose()
    finally:
        if server is not None:
            server.stop()
        if database_url is not None:
            dbsupport.drop_pg_database(database_url)
        s3.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
