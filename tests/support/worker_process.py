"""Worker processes a test starts, waits on and kills: the crash machinery of the integration tests.

A :class:`Deployment` is what the test and its ``modelreg worker`` processes share (one database and
one blob store, given to the processes as ``MODELREG_*`` variables). A worker runs in its own process
group, so ``os.killpg(worker.pid, SIGKILL)`` kills it and nothing else.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from registry.settings import Settings

WAIT_SECONDS = 30.0
MODELREG = Path(sys.executable).parent / "modelreg"


@dataclass
class Deployment:
    """What the test and its worker processes share: one database and one blob store."""

    kind: str
    settings: Settings
    env: dict[str, str]
    bucket: str | None = None
    s3_client: object | None = None


def start_worker(deployment: Deployment, log: Path) -> subprocess.Popen:
    """Start ``modelreg worker`` in the log's directory, with its own data directory there unless the
    deployment names one: nothing it writes lands in the repository (or another worker's scratch)."""
    env = {**os.environ, "HF_HUB_DISABLE_TELEMETRY": "1",
           "MODELREG_DATA_DIR": str(log.with_name(log.stem + "-data")), **deployment.env}
    with log.open("ab") as out:
        return subprocess.Popen([str(MODELREG), "worker"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                cwd=log.parent, start_new_session=True)


def wait_for(condition: Callable[[], object], what: str, worker: subprocess.Popen, log: Path) -> object:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if worker.poll() is not None:
            pytest.fail(f"worker exited with {worker.returncode} before {what}:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


def stop_worker(worker: subprocess.Popen) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def kill_worker(worker: subprocess.Popen) -> None:
    """SIGKILL the worker's process group: no handler runs, no transaction commits."""
    try:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == -signal.SIGKILL
