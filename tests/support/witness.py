"""A real ``modelreg witness`` process on a free loopback port, for tests of the log's witnesses."""

from __future__ import annotations

import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx

from tests.support.server import MODELREG, free_port, stop_process, wait_until_up


@dataclass
class WitnessProcess:
    url: str
    vkey: str
    state_dir: Path
    process: subprocess.Popen

    def add_checkpoint(self, body: bytes) -> httpx.Response:
        return httpx.post(self.url + "/add-checkpoint", content=body, timeout=10)


def make_witness_key(key: Path, name: str) -> str:
    """Create ``key`` with ``modelreg witness --init NAME``; its verifier key."""
    done = subprocess.run([MODELREG, "witness", "--key", str(key), "--init", name], capture_output=True,
                          text=True, timeout=60, check=True)
    return done.stdout.strip()


@contextmanager
def running_witness(directory: Path, name: str, logs: dict[str, str], *, port: int | None = None,
                    extra_args: tuple[str, ...] = ()) -> Iterator[WitnessProcess]:
    """``modelreg witness`` for ``logs`` (origin to verifier key), its key and state under ``directory``
    (kept across runs: a restarted witness holds what it accepted), on ``port`` (else a free one)."""
    directory.mkdir(parents=True, exist_ok=True)
    vkey = make_witness_key(directory / "key", name)
    port = port or free_port()
    log = directory / f"witness-{port}.log"
    args = [MODELREG, "witness", "--key", str(directory / "key"), "--state-dir", str(directory / "state"),
            "--port", str(port), *extra_args]
    for origin, log_vkey in logs.items():
        args += ["--log", f"{origin}={log_vkey}"]
    process = subprocess.Popen(args, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(process, url, log, timeout=60)
        yield WitnessProcess(url, vkey, directory / "state", process)
    finally:
        stop_process(process)
