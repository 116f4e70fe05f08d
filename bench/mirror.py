"""Mirror throughput: a multi-gigabyte model from a loopback Hugging Face hub into SeaweedFS S3.

Usage (from the repository root)::

    .venv/bin/python bench/mirror.py [--size-gb 2] [--shards 4] [--workers 2] [--rounds 1]

It writes a model of ``--shards`` safetensors files of random weights plus a ``config.json``
(``--size-gb`` in all) to a temporary directory, serves it from ``tests.support.hf_upstream.HfUpstream``
and starts a SeaweedFS server (``tests.support.seaweed``). Then, in each round, in the same process:

- ``modelreg``: the real pipeline: a fresh migrated SQLite database, an ``S3BlobStore`` on a fresh
  bucket, ``versions.submit`` and ``--workers`` worker threads (``workers.loop.run_workers``) running
  the ``mirror_file`` and ``seal_version`` jobs; timed from submit until the version is sealed;
- ``raw``: the floor: each resolve URL streamed by ``--workers`` threads with the same HTTP session
  and chunk size into an S3 multipart upload with the same part size and part concurrency, no
  hashing, no checks, no database.

Last, sealing alone: versions of the same files are submitted again (nothing to mirror, every blob is
stored) and ``mirroring.seal_version`` (file list, in-toto statement, DSSE signature, database update,
scan jobs queued) is timed on each. Everything temporary is removed at the end.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[0] = str(REPO)

import argparse  # noqa: E402 (after sys.path[0] is set)
import itertools  # noqa: E402 (after sys.path[0] is set)
import json  # noqa: E402 (after sys.path[0] is set)
import os  # noqa: E402 (after sys.path[0] is set)
import platform  # noqa: E402 (after sys.path[0] is set)
import shutil  # noqa: E402 (after sys.path[0] is set)
import statistics  # noqa: E402 (after sys.path[0] is set)
import struct  # noqa: E402 (after sys.path[0] is set)
import tempfile  # noqa: E402 (after sys.path[0] is set)
import threading  # noqa: E402 (after sys.path[0] is set)
import time  # noqa: E402 (after sys.path[0] is set)
from collections import deque  # noqa: E402 (after sys.path[0] is set)
from concurrent.futures import ThreadPoolExecutor  # noqa: E402 (after sys.path[0] is set)
from dataclasses import dataclass  # noqa: E402 (after sys.path[0] is set)

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import numpy as np  # noqa: E402 (after sys.path[0] is set)
from huggingface_hub import get_session, hf_hub_url  # noqa: E402 (after sys.path[0] is set)
from pydantic import SecretStr  # noqa: E402 (after sys.path[0] is set)

from registry.bootstrap import Container, bootstrap  # noqa: E402 (after sys.path[0] is set)
from registry.db.models import Version  # noqa: E402 (after sys.path[0] is set)
from registry.domain.stages import PIPELINE  # noqa: E402 (after sys.path[0] is set)
from registry.domain.states import VersionState  # noqa: E402 (after sys.path[0] is set)
from registry.services import mirroring, versions  # noqa: E402 (after sys.path[0] is set)
from registry.services.versions import SubmitRequest  # noqa: E402 (after sys.path[0] is set)
from registry.settings import Settings  # noqa: E402 (after sys.path[0] is set)
from registry.signing.keys import SigningKey  # noqa: E402 (after sys.path[0] is set)
from registry.sources.huggingface import CHUNK_SIZE  # noqa: E402 (after sys.path[0] is set)
from registry.storage import S3BlobStore, make_s3_client  # noqa: E402 (after sys.path[0] is set)
from tests.support.hf_upstream import HfUpstream  # noqa: E402 (after sys.path[0] is set)
from tests.support.registry import make_admin  # noqa: E402 (after sys.path[0] is set)
from tests.support.seaweed import SeaweedS3, start_seaweed  # noqa: E402 (after sys.path[0] is set)
from workers.handlers import build_handlers  # noqa: E402 (after sys.path[0] is set)
from workers.loop import run_workers  # noqa: E402 (after sys.path[0] is set)

MB = 1_000_000
MIB = 1024 * 1024
REPO_ID = "bench/model"
SEALED_OR_LATER = frozenset(PIPELINE[PIPELINE.index(VersionState.SEALED):]) | {VersionState.APPROVED}
"""Where a sealed version may be without failing: the state machine's forward stages from sealing on
(its own order, not a hand list), or approved when the policy needs no person."""


@dataclass(frozen=True)
class Timing:
    scenario: str
    seconds: float
    size: int

    @property
    def rate(self) -> float:
        return self.size / self.seconds / MB


def write_model(directory: Path, total: int, shards: int) -> dict[str, Path]:
    """``shards`` valid one-tensor safetensors files of random bytes and a config.json, ``total`` bytes in all."""
    rng = np.random.default_rng(20261129)
    config = json.dumps({"architectures": ["BenchModel"], "hidden_size": 4096}, indent=2).encode() + b"\n"
    files = {"config.json": directory / "config.json"}
    files["config.json"].write_bytes(config)
    shard_size = (total - len(config)) // shards
    for index in range(1, shards + 1):
        path = directory / f"model-{index:05d}-of-{shards:05d}.safetensors"
        header = json.dumps({"w": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}}).encode()
        data_len = shard_size - 8 - len(header) - 32
        header = json.dumps({"w": {"dtype": "U8", "shape": [data_len], "data_offsets": [0, data_len]}}).encode()
        header += b" " * (shard_size - 8 - data_len - len(header))
        with path.open("wb") as out:
            out.write(struct.pack("<Q", len(header)) + header)
            left = data_len
            while left:
                n = min(left, 64 * MIB)
                out.write(rng.bytes(n))
                left -= n
        files[path.name] = path
    return files


def make_settings(work: Path, s3: SeaweedS3, bucket: str, pem: str, part_size: int, hub_url: str) -> Settings:
    return Settings(
        data_dir=work / "data",
        database_url=f"sqlite:///{work / 'registry.db'}",
        blob_store_url=f"s3://{bucket}/registry",
        s3_endpoint_url=s3.endpoint_url,
        s3_region=s3.region,
        s3_access_key_id=s3.access_key,
        s3_secret_access_key=SecretStr(s3.secret_key),
        multipart_part_size=part_size,
        signing_key_pem=SecretStr(pem),
        hf_endpoint=hub_url,
    )


def state_of(container: Container, version_id: int) -> str:
    with container.session_factory() as session:
        return session.get(Version, version_id).state


def run_pipeline(container: Container, hub: HfUpstream, workers: int, size: int) -> tuple[Timing, int]:
    elapsed, version_id = mirror(container, make_admin(container, "bench"), "bench", "model", hub, workers)
    return Timing("modelreg", elapsed, size), version_id


def mirror(container: Container, admin, tenant: str, name: str, hub: HfUpstream, workers: int) -> tuple[float, int]:
    """Submit the hub's model as ``tenant/name`` and run ``workers`` worker threads until it is sealed;
    return the seconds from submit to sealed and the version id."""
    stop = threading.Event()
    threads = run_workers(container, build_handlers(), workers, stop, poll_interval=0.02)
    try:
        started = time.perf_counter()
        with container.session_factory() as session:
            version, _ = versions.submit(session, admin, tenant, name,
                                         SubmitRequest(source=f"hf://{REPO_ID}", hf_endpoint=hub.url),
                                         open_source=container.open_source, limits=container.limits(),
                                         ports=container.ports)
            version_id = version.id
        while (state := state_of(container, version_id)) in ("submitted", "mirroring"):
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    if VersionState(state) not in SEALED_OR_LATER:
        with container.session_factory() as session:
            v = session.get(Version, version_id)
            raise SystemExit(f"the version ended {state}: {v.failure_reason} {v.failure_detail}")
    return elapsed, version_id


def run_raw(hub: HfUpstream, revision: str, files: dict[str, Path], client, bucket: str, *,
            workers: int, part_size: int, part_concurrency: int) -> Timing:
    session = get_session()

    def copy(path: str) -> None:
        url = hf_hub_url(REPO_ID, path, revision=revision, endpoint=hub.url)
        key = f"raw/{path}"
        upload_id = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]

        def upload(number: int, body: bytes) -> dict:
            etag = client.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number,
                                      Body=body)["ETag"]
            return {"PartNumber": number, "ETag": etag}

        parts: list[dict] = []
        in_flight: deque = deque()
        with ThreadPoolExecutor(part_concurrency) as pool, \
                session.stream("GET", url, headers={"Accept-Encoding": "identity"}, timeout=30) as response:
            response.raise_for_status()
            pending: list[bytes] = []
            length = number = 0
            chunks = response.iter_bytes(CHUNK_SIZE)
            for chunk in itertools.chain(chunks, [b""]):
                pending.append(chunk)
                length += len(chunk)
                if length >= part_size or (not chunk and (length or not number)):
                    while len(in_flight) >= part_concurrency:
                        parts.append(in_flight.popleft().result())
                    number += 1
                    in_flight.append(pool.submit(upload, number, b"".join(pending)))
                    pending, length = [], 0
            while in_flight:
                parts.append(in_flight.popleft().result())
        client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id,
                                         MultipartUpload={"Parts": parts})

    size = sum(p.stat().st_size for p in files.values())
    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(copy, sorted(files, key=lambda p: -files[p].stat().st_size)))
    return Timing("raw", time.perf_counter() - started, size)


def time_sealing(container: Container, hub: HfUpstream, repetitions: int) -> list[float]:
    """Seal ``repetitions`` fresh versions of files the tenant holds already; return each seal's seconds
    (file list, facts and licenses read from the stored headers, statement, signature)."""
    admin = make_admin(container, "seal")
    # Blobs are owned per tenant: the tenant mirrors the files once, then each version is only sealed.
    mirror(container, admin, "seal", "warm-up", hub, workers=2)
    took = []
    for index in range(repetitions):
        with container.session_factory() as session:
            version, _ = versions.submit(session, admin, "seal", f"model-{index}",
                                         SubmitRequest(source=f"hf://{REPO_ID}", hf_endpoint=hub.url),
                                         open_source=container.open_source, limits=container.limits(),
                                         ports=container.ports)
            version_id = version.id
        started = time.perf_counter()
        mirroring.seal_version(container.session_factory, version_id, ports=container.ports)
        took.append(time.perf_counter() - started)
        # The warm-up's verdicts are cached, so sealing goes on to decide the scan and judge the policy:
        # the version is in whichever forward stage that left it, never failed.
        state = state_of(container, version_id)
        assert VersionState(state) in SEALED_OR_LATER, state
    return took


def sha256_rate(buffer_mib: int = 64, repetitions: int = 5) -> float:
    """Bytes per second sha256 hashes on one core (best of a few 64 MiB buffers): the cost of checking."""
    import hashlib

    buffer = os.urandom(buffer_mib * MIB)
    best = min(_timed(lambda: hashlib.sha256(buffer).digest()) for _ in range(repetitions))
    return len(buffer) / best


def _timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-gb", type=float, default=2.0, help="model size in GB (10^9 bytes)")
    parser.add_argument("--shards", type=int, default=4, help="safetensors files (plus config.json)")
    parser.add_argument("--workers", type=int, default=2, help="worker threads, and raw copies at once")
    parser.add_argument("--part-size-mib", type=int, default=64, help="multipart part size")
    parser.add_argument("--rounds", type=int, default=1, help="pipeline + raw rounds, alternating")
    parser.add_argument("--seal-repetitions", type=int, default=20)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()

    part_size = args.part_size_mib * MIB
    part_concurrency = S3BlobStore.__init__.__kwdefaults__["max_concurrency"]
    work = Path(tempfile.mkdtemp(prefix="modelreg-bench-mirror-"))
    s3 = hub = None
    try:
        started = time.perf_counter()
        (work / "model").mkdir()
        files = write_model(work / "model", int(args.size_gb * 1e9), args.shards)
        size = sum(p.stat().st_size for p in files.values())
        print(f"model: {len(files)} files, {size / MB:.0f} MB, written in {time.perf_counter() - started:.1f} s")
        s3 = start_seaweed(work / "seaweedfs")
        hub = HfUpstream(work / "hub").start()
        hub.add_repo(REPO_ID, gitattributes=False)
        revision = hub.commit(REPO_ID, dict(files))
        pem = SigningKey.generate().private_pem().decode()
        print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, Python {platform.python_version()}, "
              f"sha256 {sha256_rate() / MB:.0f} MB/s on one core; "
              f"{args.workers} workers, part size {args.part_size_mib} MiB, {part_concurrency} parts at once")

        results: list[tuple[Timing, Timing]] = []
        container = None
        for round_index in range(args.rounds):
            bucket, raw_bucket = f"bench-{round_index}", f"raw-{round_index}"
            s3.client().create_bucket(Bucket=bucket)
            s3.client().create_bucket(Bucket=raw_bucket)
            round_dir = work / f"round-{round_index}"
            round_dir.mkdir()
            settings = make_settings(round_dir, s3, bucket, pem, part_size, hub.url)
            if container is not None:
                container.dispose()
            container = bootstrap(settings, migrate=True)
            pipeline, version_id = run_pipeline(container, hub, args.workers, size)
            raw = run_raw(hub, revision, files, make_s3_client(settings), raw_bucket, workers=args.workers,
                          part_size=part_size, part_concurrency=part_concurrency)
            results.append((pipeline, raw))
            print(f"round {round_index + 1}: modelreg {pipeline.seconds:.2f} s ({pipeline.rate:.0f} MB/s), "
                  f"raw {raw.seconds:.2f} s ({raw.rate:.0f} MB/s), ratio {pipeline.seconds / raw.seconds:.3f}, "
                  f"load {os.getloadavg()[0]:.2f}")

        assert container is not None
        seals = time_sealing(container, hub, args.seal_repetitions)
        container.dispose()

        best_pipeline = min(r[0].seconds for r in results)
        best_raw = min(r[1].seconds for r in results)
        print()
        print(f"modelreg submit→sealed: best {best_pipeline:.2f} s ({size / best_pipeline / MB:.0f} MB/s)")
        print(f"raw stream copy:        best {best_raw:.2f} s ({size / best_raw / MB:.0f} MB/s)")
        print(f"ratio (best/best): {best_pipeline / best_raw:.3f} (goal <= 1.15); per round: "
              + ", ".join(f"{p.seconds / r.seconds:.3f}" for p, r in results))
        print(f"seal_version ({len(files)} files, {args.seal_repetitions} runs): median "
              f"{statistics.median(seals) * 1000:.1f} ms, min {min(seals) * 1000:.1f} ms, "
              f"max {max(seals) * 1000:.1f} ms (goal < 50 ms)")
    finally:
        if hub is not None:
            hub.stop()
        if s3 is not None:
            s3.stop()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
