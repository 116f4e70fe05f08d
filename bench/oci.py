"""OCI pulls: an approved five-file version from modelreg's ``/v2`` against the CNCF distribution registry.

Usage (from the repository root)::

    .venv/bin/python bench/oci.py [--size 2G] [--rounds 3]

Setup, once: five files of random bytes, ``--size`` in all (one safetensors file of 60 %, three of about
13 % and a ``config.json``; the safetensors headers are valid, so the scanner passes them), submitted through
the real pipeline in this process on SQLite and the local blob store under a temporary data directory, and
approved as ``acme/llm`` version 1 (``prod``); then ``modelreg serve`` (uvicorn, no worker threads) on that
data directory as its own process, a serving node's token, and Debian's ``docker-registry`` on loopback
(``tests/support/distribution_registry.py``) into which ``skopeo copy`` replicates the same artifact, so both
registries hold the same manifest bytes and blobs.

Each round, taking turns (which one goes first alternates from round to round), each into a new directory
that is removed afterwards, after ``os.sync()``:

- ``skopeo copy docker://<modelreg>/acme/llm:prod oci:DIR`` (the token dance, then every blob streamed by
  the API from the local store) against the same copy from ``docker-registry``: the goal is modelreg /
  reference <= 1.05;
- oras-py (``OrasClient.pull``, the library KServe's ``oci+fetch`` uses) from modelreg against raw GETs of
  the same objects with httpx: the presigned URLs the local store makes (``/v1/blobs/sha256/...``, served
  by the same process without the OCI layer), streamed to files one after the other as oras-py does.

While each pull runs, a thread samples the API process's resident memory every 20 ms (psutil where
installed, else ``/proc/<pid>/status``); the script prints its start and peak per pull: a flat line means
no blob is held in memory whole. The temporary directory is removed at the end, whatever happened.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[0] = str(REPO)

import argparse  # noqa: E402 (after sys.path[0] is set)
import datetime as dt  # noqa: E402 (after sys.path[0] is set)
import hashlib  # noqa: E402 (after sys.path[0] is set)
import json  # noqa: E402 (after sys.path[0] is set)
import os  # noqa: E402 (after sys.path[0] is set)
import shutil  # noqa: E402 (after sys.path[0] is set)
import statistics  # noqa: E402 (after sys.path[0] is set)
import struct  # noqa: E402 (after sys.path[0] is set)
import subprocess  # noqa: E402 (after sys.path[0] is set)
import tempfile  # noqa: E402 (after sys.path[0] is set)
import threading  # noqa: E402 (after sys.path[0] is set)
import time  # noqa: E402 (after sys.path[0] is set)
from typing import Callable  # noqa: E402 (after sys.path[0] is set)

import httpx  # noqa: E402 (after sys.path[0] is set)

from tests.support.distribution_registry import distribution_registry  # noqa: E402 (after sys.path[0] is set)
from tests.support.server import free_port, wait_until_up  # noqa: E402 (after sys.path[0] is set)

TENANT, MODEL = "acme", "llm"
MIB = 1024 * 1024
SHARES = [("model-00001-of-00004.safetensors", 0.60), ("model-00002-of-00004.safetensors", 0.133),
          ("model-00003-of-00004.safetensors", 0.133), ("model-00004-of-00004.safetensors", 0.134)]


def parse_size(text: str) -> int:
    units = {"K": 1024, "M": MIB, "G": 1024 * MIB}
    text = text.strip().upper().removesuffix("B")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1:] in units else int(text)


def write_safetensors(path: Path, size: int, seed: int) -> None:
    """A valid one-tensor (U8) safetensors file of exactly ``size`` bytes, the tensor random."""
    import numpy as np

    rng = np.random.default_rng(seed)
    probe = json.dumps({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}).encode()
    data_len = size - 8 - len(probe) - 16
    header = json.dumps({"w": {"dtype": "U8", "shape": [data_len], "data_offsets": [0, data_len]}}).encode()
    header += b" " * (size - 8 - data_len - len(header))
    with path.open("wb") as out:
        out.write(struct.pack("<Q", len(header)) + header)
        left = data_len
        while left:
            n = min(left, 64 * MIB)
            out.write(rng.bytes(n))
            left -= n


def write_model(directory: Path, total: int) -> dict[str, Path]:
    directory.mkdir(parents=True)
    config = json.dumps({"architectures": ["BenchModel"], "model_type": "llama", "hidden_size": 4096}).encode()
    files = {"config.json": directory / "config.json"}
    files["config.json"].write_bytes(config)
    body = total - len(config)
    for index, (name, share) in enumerate(SHARES):
        size = int(body * share) if index < len(SHARES) - 1 else body - sum(int(body * s) for _, s in SHARES[:-1])
        files[name] = directory / name
        write_safetensors(files[name], size, seed=index)
    return files


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(8 * MIB):
            h.update(chunk)
    return h.hexdigest()


def seed(data_dir: Path, files: dict[str, Path], **settings_overrides: object) -> tuple[str, dict[str, str]]:
    """Version 1 of acme/llm through the pipeline, approved as prod; a node's token and each file's digest.

    ``settings_overrides`` go to the settings (``blob_store_url=...`` and the ``s3_*`` ones for an S3 store).
    """
    from registry.bootstrap import bootstrap, load_settings, prepare_embedded
    from registry.domain.aliases import make_target
    from registry.domain.files import FileEntry
    from registry.services import aliases, versions
    from tests.support.registry import drain, make_admin, role_token
    from tests.support.releases import approve_standin

    settings = load_settings(data_dir=data_dir, **settings_overrides)
    prepare_embedded(settings)
    container = bootstrap(settings, migrate=True)
    try:
        admin = make_admin(container, TENANT)
        entries, digests = [], {}
        with container.session_factory() as session:
            for path, file in files.items():
                digest = sha256_file(file)
                with file.open("rb") as stream:
                    versions.upload_blob(session, admin, TENANT, digest, stream, file.stat().st_size,
                                         blob_store=container.blob_store)
                entries.append(FileEntry(path, file.stat().st_size, digest))
                digests[path] = digest
            versions.submit_uploaded(session, admin, TENANT, MODEL, entries, label="bench",
                                     limits=container.limits(), ports=container.ports)
        drain(container)
        approve_standin(container, TENANT, MODEL, 1)
        with container.session_factory() as session:
            aliases.promote(session, admin, TENANT, MODEL, "prod", make_target(1), policy=container.policy,
                            clock=container.clock)
        return role_token(container, "bench-node", TENANT, "node"), digests
    finally:
        container.dispose()


def presigned_urls(data_dir: Path, url: str, digests: dict[str, str]) -> dict[str, str]:
    """The local store's presigned URLs of the files, as the release manifest gives them (same data dir)."""
    from registry.bootstrap import bootstrap, load_settings, prepare_embedded

    settings = load_settings(data_dir=data_dir, public_url=url)
    prepare_embedded(settings)
    container = bootstrap(settings)
    try:
        return {path: container.blob_store.presign_get(d, dt.timedelta(hours=6)) for path, d in digests.items()}
    finally:
        container.dispose()


def start_server(data_dir: Path, log: Path, extra_env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """``modelreg serve`` on ``data_dir`` (no worker threads), ``extra_env`` added to its MODELREG_-free env."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELREG_")}
    env.update(extra_env or {}, PYTHONPATH=str(REPO), MODELREG_PUBLIC_URL=url)
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "modelreg"), "serve", "--data-dir", str(data_dir), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "0"], stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, cwd=REPO)
    # Generous: on a busy machine the serve process's imports alone take tens of seconds.
    try:
        wait_until_up(process, url, log, timeout=300)
    except RuntimeError:
        process.kill()
        raise
    return process, url


def rss_of(pid: int) -> int:
    try:
        import psutil
    except ImportError:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no VmRSS for {pid}") from None
    return psutil.Process(pid).memory_info().rss


class RssSampler:
    """The API process's RSS every ``interval`` seconds while entered: its value at start and its peak."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.pid, self.interval = pid, interval
        self.start = self.peak = 0
        self._stop = threading.Event()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, rss_of(self.pid))

    def __enter__(self) -> "RssSampler":
        self.start = self.peak = rss_of(self.pid)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_of(self.pid))


def skopeo(*args: str) -> None:
    proc = subprocess.run(["skopeo", "--insecure-policy", *args], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"skopeo {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")


def check_layout(layout: Path, manifest_digest: str, digests: dict[str, str]) -> None:
    """The layout holds the manifest and every file under its digest (sizes checked; hashes once, in setup)."""
    index = json.loads((layout / "index.json").read_text())
    assert index["manifests"][0]["digest"] == manifest_digest, index
    for path, digest in digests.items():
        assert (layout / "blobs" / "sha256" / digest).exists(), path


def raw_get(urls: dict[str, str], out: Path) -> None:
    out.mkdir(parents=True)
    with httpx.Client(timeout=600) as http:
        for path, url in urls.items():
            with http.stream("GET", url) as r, (out / path).open("wb") as f:
                r.raise_for_status()
                for chunk in r.iter_raw(MIB):
                    f.write(chunk)


def timed(label: str, pid: int, work: Callable[[], None], scratch: Path) -> float:
    os.sync()
    with RssSampler(pid) as rss:
        began = time.perf_counter()
        work()
        took = time.perf_counter() - began
    print(f"    {label:<28} {took:8.2f} s   API RSS {rss.start / MIB:7.1f} -> peak {rss.peak / MIB:7.1f} MiB "
          f"(+{(rss.peak - rss.start) / MIB:.1f})", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="2G", help="total bytes of the five files (2G, 200M, ...)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    total = parse_size(args.size)
    for tool in ("skopeo", "docker-registry"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (apt-get install -y skopeo docker-registry)")
    import oras.client

    work = Path(tempfile.mkdtemp(prefix="modelreg-bench-oci-"))
    server = None
    try:
        began = time.perf_counter()
        files = write_model(work / "model", total)
        data_dir = work / "data"
        token, digests = seed(data_dir, files)
        print(f"setup: {len(files)} files, {total / MIB:.1f} MiB, approved in {time.perf_counter() - began:.1f} s",
              flush=True)
        server, url = start_server(data_dir, work / "serve.log")
        host = url.removeprefix("http://")
        urls = presigned_urls(data_dir, url, digests)
        with distribution_registry(work / "reference") as reference:
            source = f"docker://{host}/{TENANT}/{MODEL}:prod"
            creds = f"anyone:{token}"
            skopeo("copy", "--src-tls-verify=false", "--dest-tls-verify=false", "--src-creds", creds, source,
                   f"docker://{reference.host}/{TENANT}/{MODEL}:prod")
            r = httpx.get(f"{url}/v2/{TENANT}/{MODEL}/manifests/prod", headers={"Authorization": f"Bearer {token}"})
            manifest_digest = r.headers["docker-content-digest"]
            replica = httpx.get(f"{reference.url}/v2/{TENANT}/{MODEL}/manifests/prod",
                                headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
            assert replica.content == r.content, "the replica's manifest differs from modelreg's"
            print(f"replicated into docker-registry at {reference.host}: manifest {manifest_digest}", flush=True)
            oras = oras.client.OrasClient(hostname=host, insecure=True)
            oras.auth.set_basic_auth("anyone", token)
            pid = server.pid

            def skopeo_from(registry: str, extra: list[str], out: Path) -> Callable[[], None]:
                def run() -> None:
                    skopeo("copy", "--src-tls-verify=false", *extra,
                           f"docker://{registry}/{TENANT}/{MODEL}:prod", f"oci:{out}:prod")
                    check_layout(out, manifest_digest, digests)
                return run

            def oras_pull(out: Path) -> Callable[[], None]:
                def run() -> None:
                    oras.pull(target=f"{host}/{TENANT}/{MODEL}:prod", outdir=str(out))
                    assert {p: (out / p).stat().st_size for p in files} == \
                        {p: f.stat().st_size for p, f in files.items()}
                return run

            skopeo_ratios, oras_ratios = [], []
            for number in range(1, args.rounds + 1):
                print(f"round {number}:", flush=True)
                order = [("modelreg", True), ("reference", False)]
                if number % 2 == 0:
                    order.reverse()
                times: dict[str, float] = {}
                for label, ours in order:
                    out = work / f"layout-{label}"
                    times[label] = timed(f"skopeo copy from {label}", pid, skopeo_from(
                        host if ours else reference.host, ["--src-creds", creds] if ours else [], out), out)
                pulls = [("oras-py", oras_pull(work / "oras")), ("raw GETs", lambda: raw_get(urls, work / "raw"))]
                if number % 2 == 0:
                    pulls.reverse()
                for label, run in pulls:
                    times[label] = timed(f"{label} from modelreg", pid, run,
                                         work / ("oras" if label == "oras-py" else "raw"))
                skopeo_ratios.append(times["modelreg"] / times["reference"])
                oras_ratios.append(times["oras-py"] / times["raw GETs"])
                print(f"round {number}: skopeo modelreg/reference {skopeo_ratios[-1]:.3f} (goal <= 1.05); "
                      f"oras-py/raw GETs {oras_ratios[-1]:.3f}", flush=True)
            print(f"median of rounds: skopeo modelreg/reference {statistics.median(skopeo_ratios):.3f}; "
                  f"oras-py/raw GETs {statistics.median(oras_ratios):.3f}", flush=True)
    finally:
        if server is not None and server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
