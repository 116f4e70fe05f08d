"""Verified streaming: the Run:ai Model Streamer reading a safetensors file straight from SeaweedFS and through
``modelreg serve-s3``, cold and warm (issue 23).

Usage (from the repository root)::

    .venv/bin/python bench/stream.py [--size 2G] [--rounds 3]

Setup, once: SeaweedFS (``weed``, ``tests/support/seaweed.py``) on loopback with one bucket; one safetensors
file of about ``--size`` bytes (four large tensors of random bytes, F32 and F16, each one's sha256 noted while
it is written) put there as a plain object (``s3://bench/plain/model.safetensors``), and submitted with a
``config.json`` through the real pipeline in this process into a registry whose blob store is the same
bucket (``s3://bench/registry``; SQLite under a temporary data directory), approved as ``acme/llm`` version
1; then ``modelreg serve`` (no worker threads) on that registry as its own process, a node's token and the
trust root it publishes. So serve-s3 fetches its chunks from the release's transport URLs, presigned
SeaweedFS URLs, and the direct read gets the same bytes from the same server.

Each round, taking turns (which side goes first alternates from round to round):

- (a) direct: the streamer, in its own process (``SafetensorsStreamer.stream_file``, its S3 backend, as a
  loader runs it), reads ``s3://bench/plain/model.safetensors`` from SeaweedFS;
- (b) cold: a fresh ``modelreg serve-s3`` process with an empty node cache; the streamer reads
  ``s3://acme/llm@1/model.safetensors`` through it (every chunk fetched from SeaweedFS and its digest
  checked, the release verified on the first request);
- (c) warm: the same read again through the same serve-s3 (every chunk from the node cache, checked again);
  then serve-s3 is stopped and its cache removed.

For each read the script prints the streamer's wall seconds (from ``stream_file`` to the last tensor in
hand; process start and imports are not counted) and CPU seconds over the same window, the CPU seconds of
serve-s3 and of SeaweedFS over the read (``/proc/<pid>/stat``), and serve-s3's resident memory at the start
and its peak (sampled every 20 ms). Every read is checked: the streamer hashes each tensor it got after the
timed window, and the names, byte counts and sha256 must equal what setup wrote, or the script stops. The
goals: cold / direct <= 1.15, warm / direct <= 1.0. The load average is printed before and after each
round. The temporary directory is removed at the end, whatever happened (kept, and its path printed, with
BENCH_KEEP=1).

The streamer runs with its defaults (16 workers, 8 S3 connections, 8 MiB blocks) and whatever RUNAI_STREAMER_*
variables the caller sets, on both sides alike. Its S3 request timeout is 1 s by default, with no retry: a
serve-s3 that pauses longer between bytes fails the load ("File access error"; its stderr is then written to
``$TMPDIR/bench-stream-streamer.err``); RUNAI_STREAMER_S3_REQUEST_TIMEOUT_MS=30000 raises it.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[0] = str(REPO)

import argparse  # noqa: E402 (after sys.path[0] is set)
import hashlib  # noqa: E402 (after sys.path[0] is set)
import json  # noqa: E402 (after sys.path[0] is set)
import os  # noqa: E402 (after sys.path[0] is set)
import shutil  # noqa: E402 (after sys.path[0] is set)
import statistics  # noqa: E402 (after sys.path[0] is set)
import struct  # noqa: E402 (after sys.path[0] is set)
import subprocess  # noqa: E402 (after sys.path[0] is set)
import tempfile  # noqa: E402 (after sys.path[0] is set)
import time  # noqa: E402 (after sys.path[0] is set)
from dataclasses import dataclass  # noqa: E402 (after sys.path[0] is set)

import httpx  # noqa: E402 (after sys.path[0] is set)

from bench.fetch import cpu_seconds  # noqa: E402 (after sys.path[0] is set)
from bench.oci import MIB, MODEL, TENANT, RssSampler, parse_size, seed, start_server  # noqa: E402 (after sys.path[0] is set)
from tests.support.seaweed import SeaweedS3, start_seaweed  # noqa: E402 (after sys.path[0] is set)
from tests.support.server import free_port, stop_process  # noqa: E402 (after sys.path[0] is set)

BUCKET = "bench"
PLAIN_KEY = "plain/model.safetensors"
FILE = "model.safetensors"
# The key pair serve-s3 accepts (its MODELREG_S3_* env); the streamer signs with it.
NODE_KEY, NODE_SECRET = "bench-node-key", "bench-node-secret-0123456789"
COLD_GOAL, WARM_GOAL = 1.15, 1.0

# Run in its own process, as a loader runs the streamer. The timed window is stream_file to the last tensor;
# the tensors are kept (owned=True, the default, gives them to the caller) and hashed after it.
STREAM_SCRIPT = """
import hashlib, json, resource, sys, time
import torch
from runai_model_streamer import SafetensorsStreamer

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

tensors = []
with SafetensorsStreamer() as streamer:
    cpu0, began = cpu(), time.perf_counter()
    streamer.stream_file(sys.argv[1])
    for name, tensor in streamer.get_tensors():
        tensors.append((name, tensor))
    wall, used = time.perf_counter() - began, cpu() - cpu0
digests = {}
for name, tensor in tensors:
    raw = tensor.contiguous().view(-1).view(torch.uint8).numpy()
    digests[name] = [raw.nbytes, hashlib.sha256(raw).hexdigest()]
print(json.dumps({"wall": wall, "cpu": used, "tensors": digests}))
"""


def write_tensors(path: Path, size: int, seed: int = 0) -> dict[str, list]:
    """A valid safetensors file of about ``size`` bytes: four tensors of random bytes; name -> [bytes, sha256]."""
    import numpy as np

    rng = np.random.default_rng(seed)
    per_tensor = max(4096, (size - 4096) // 4 // 4096 * 4096)  # whole rows of 4096 bytes
    layout, offset = {}, 0
    for index, (dtype, width) in enumerate((("F32", 4), ("F16", 2), ("F32", 4), ("F16", 2))):
        name = f"model.layers.{index}.mlp.weight"
        layout[name] = {"dtype": dtype, "shape": [per_tensor // 4096, 4096 // width],
                        "data_offsets": [offset, offset + per_tensor]}
        offset += per_tensor
    header = json.dumps(layout).encode()
    header += b" " * (-len(header) % 8)
    expected = {}
    with path.open("wb") as out:
        out.write(struct.pack("<Q", len(header)) + header)
        for name in layout:
            digest, left = hashlib.sha256(), per_tensor
            while left:
                piece = rng.bytes(min(left, 64 * MIB))
                digest.update(piece)
                out.write(piece)
                left -= len(piece)
            expected[name] = [per_tensor, digest.hexdigest()]
    return expected


@dataclass
class Read:
    """One streamer read: its wall and CPU seconds, serve-s3's and SeaweedFS's CPU seconds, serve-s3's RSS."""

    wall: float
    streamer_cpu: float
    weed_cpu: float
    serve_cpu: float | None = None
    rss_start: int = 0
    rss_peak: int = 0


def stream(endpoint: str, key: str, secret: str, uri: str, expected: dict[str, list], weed_pid: int,
           serve_pid: int | None = None) -> Read:
    """The streamer reads ``uri`` from the S3 endpoint in its own process; the bytes it got are checked."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MODELREG_"))}
    env.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret,
               AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
               RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING="0")
    env.setdefault("RUNAI_STREAMER_LOG_LEVEL", "WARNING")
    os.sync()
    weed_cpu = cpu_seconds(weed_pid)
    serve_cpu = cpu_seconds(serve_pid) if serve_pid is not None else 0.0
    sampler = RssSampler(serve_pid) if serve_pid is not None else None
    if sampler is not None:
        sampler.__enter__()
    try:
        run = subprocess.run([sys.executable, "-c", STREAM_SCRIPT, uri], capture_output=True, text=True, env=env,
                             timeout=3600)
    finally:
        if sampler is not None:
            sampler.__exit__(None, None, None)
    weed_cpu = cpu_seconds(weed_pid) - weed_cpu
    serve_cpu = cpu_seconds(serve_pid) - serve_cpu if serve_pid is not None else None
    if run.returncode != 0:
        Path(tempfile.gettempdir(), "bench-stream-streamer.err").write_text(run.stderr)
        raise SystemExit(f"the streamer failed on {uri} (exit {run.returncode}; its stderr in "
                         f"{tempfile.gettempdir()}/bench-stream-streamer.err):\n{run.stderr[-3000:]}")
    got = json.loads(run.stdout.strip().splitlines()[-1])
    if got["tensors"] != expected:
        raise SystemExit(f"the streamer read other bytes than were written from {uri}: {got['tensors']} "
                         f"!= {expected}")
    return Read(got["wall"], got["cpu"], weed_cpu, serve_cpu, sampler.start if sampler else 0,
                sampler.peak if sampler else 0)


def start_serve_s3(url: str, token: str, trust_root: Path, cache: Path,
                   log_dir: Path) -> tuple[subprocess.Popen, str]:
    """``modelreg serve-s3`` as its own process with node cache ``cache``, once it listens; and its URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELREG_")}
    env.update(PYTHONPATH=str(REPO), MODELREG_S3_ACCESS_KEY_ID=NODE_KEY, MODELREG_S3_SECRET_ACCESS_KEY=NODE_SECRET)
    out, err = log_dir / "serve-s3.out", log_dir / "serve-s3.log"
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "modelreg"), "serve-s3", "--url", url, "--token", token,
         "--trust-root", str(trust_root), "--cache", str(cache), "--port", str(port), "--json"],
        stdout=open(out, "wb"), stderr=open(err, "wb"), env=env, cwd=REPO)
    # Generous: on a busy machine the CLI's imports alone take seconds.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"serve-s3 exited {process.returncode}:\n{err.read_text()[-3000:]}")
        lines = out.read_text().splitlines()
        if lines and lines[0].startswith("{") and json.loads(lines[0]).get("url") == f"http://127.0.0.1:{port}":
            return process, f"http://127.0.0.1:{port}"
        time.sleep(0.1)
    stop_process(process)
    raise SystemExit(f"serve-s3 did not start:\n{err.read_text()[-3000:]}")


def print_read(label: str, read: Read) -> None:
    line = (f"    {label:<22} {read.wall:8.2f} s   streamer cpu {read.streamer_cpu:6.2f} s   "
            f"weed cpu {read.weed_cpu:6.2f} s")
    if read.serve_cpu is not None:
        line += (f"   serve-s3 cpu {read.serve_cpu:6.2f} s   serve-s3 RSS {read.rss_start / MIB:7.1f} -> peak "
                 f"{read.rss_peak / MIB:7.1f} MiB (+{(read.rss_peak - read.rss_start) / MIB:.1f})")
    print(line, flush=True)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="2G", help="bytes of the safetensors file (2G, 512M, ...)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    total = parse_size(args.size)

    work = Path(tempfile.mkdtemp(prefix="modelreg-bench-stream-"))
    weed: SeaweedS3 | None = None
    server = None
    try:
        began = time.perf_counter()
        weed = start_seaweed(work / "seaweed")
        weed.client().create_bucket(Bucket=BUCKET)
        model = work / "model"
        model.mkdir()
        expected = write_tensors(model / FILE, total)
        size = (model / FILE).stat().st_size
        (model / "config.json").write_text(json.dumps({"architectures": ["BenchModel"], "model_type": "llama"}))
        weed.client().upload_file(str(model / FILE), BUCKET, PLAIN_KEY)
        store = dict(blob_store_url=f"s3://{BUCKET}/registry", s3_endpoint_url=weed.endpoint_url,
                     s3_access_key_id=weed.access_key, s3_secret_access_key=weed.secret_key)
        token, _ = seed(work / "data", {"config.json": model / "config.json", FILE: model / FILE}, **store)
        server, url = start_server(work / "data", work / "serve.log",
                                   {f"MODELREG_{k.upper()}": v for k, v in store.items()})
        trust_root = work / "trust-root.json"
        trust_root.write_text(httpx.get(f"{url}/v1/trust-root", timeout=60).text)
        shutil.rmtree(model)  # the bytes live in SeaweedFS now; their digests are in ``expected``
        print(f"setup: {FILE} {size / MIB:.1f} MiB ({len(expected)} tensors) in SeaweedFS as a plain object and "
              f"as {TENANT}/{MODEL}@1 in the registry (S3 store on the same SeaweedFS), "
              f"{time.perf_counter() - began:.1f} s", flush=True)

        plain_uri = f"s3://{BUCKET}/{PLAIN_KEY}"
        release_uri = f"s3://{TENANT}/{MODEL}@1/{FILE}"
        cold_ratios, warm_ratios = [], []
        for number in range(1, args.rounds + 1):
            print(f"round {number} (load {load()}):", flush=True)
            reads: dict[str, Read] = {}

            def direct() -> None:
                reads["direct"] = stream(weed.endpoint_url, weed.access_key, weed.secret_key, plain_uri, expected,
                                         weed.process.pid)
                print_read("(a) direct SeaweedFS", reads["direct"])

            def through_serve_s3() -> None:
                cache = work / f"cache-{number}"
                node, node_url = start_serve_s3(url, token, trust_root, cache, work)
                try:
                    for label, name in (("(b) serve-s3 cold", "cold"), ("(c) serve-s3 warm", "warm")):
                        reads[name] = stream(node_url, NODE_KEY, NODE_SECRET, release_uri, expected,
                                             weed.process.pid, node.pid)
                        print_read(label, reads[name])
                finally:
                    stop_process(node)
                    shutil.rmtree(cache, ignore_errors=True)

            sides = [direct, through_serve_s3]
            if number % 2 == 0:
                sides.reverse()
            for side in sides:
                side()
            cold_ratios.append(reads["cold"].wall / reads["direct"].wall)
            warm_ratios.append(reads["warm"].wall / reads["direct"].wall)
            print(f"round {number}: cold/direct {cold_ratios[-1]:.3f} (goal <= {COLD_GOAL}), warm/direct "
                  f"{warm_ratios[-1]:.3f} (goal <= {WARM_GOAL}); {len(expected)} tensors, {size / MIB:.1f} MiB, "
                  f"every sha256 equal; load after {load()}", flush=True)
        cold, warm = statistics.median(cold_ratios), statistics.median(warm_ratios)
        print(f"median of rounds: cold/direct {cold:.3f} ({'met' if cold <= COLD_GOAL else 'missed'}), "
              f"warm/direct {warm:.3f} ({'met' if warm <= WARM_GOAL else 'missed'})", flush=True)
    finally:
        if server is not None:
            stop_process(server, grace=15)
        if weed is not None:
            weed.stop()
        if os.environ.get("BENCH_KEEP"):
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
