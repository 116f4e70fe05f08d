"""A real ``modelreg serve`` process on a free loopback port, for end-to-end tests; and starting any peer again
when a port chosen for it was taken before it bound it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

import httpx

MODELREG = str(Path(sys.executable).parent / "modelreg")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    data_dir: Path
    process: subprocess.Popen
    log: Path

    @property
    def admin_token(self) -> str:
        return (self.data_dir / "admin-token").read_text().strip()

    def env(self, token: str | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(MODELREG_URL=self.url, MODELREG_TOKEN=token or self.admin_token,
                   MODELREG_DATA_DIR=str(self.data_dir))
        return env

    def cli(self, *args: str, token: str | None = None, check: bool = False, timeout: float = 120):
        result = subprocess.run([MODELREG, *args], env=self.env(token), capture_output=True, text=True,
                                timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"modelreg {' '.join(args)} exited {result.returncode}: {result.stderr}")
        return result

    def stop(self) -> None:
        stop_process(self.process, signal.SIGINT, grace=15)


def stop_process(process: subprocess.Popen, sig: int = signal.SIGTERM, *, grace: float = 3) -> None:
    """Send ``sig``, wait ``grace`` seconds, then kill: a test's server never outlives it."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class PortTaken(RuntimeError):
    """A peer exited because a port chosen for it was bound by another process before the peer bound it."""


T = TypeVar("T")


def start_again_when_port_taken(start: Callable[[int], T], attempts: int = 3) -> T:
    """``start(attempt)``, called again while it raises :class:`PortTaken` (at most ``attempts`` times).

    For a peer that must be told its port before it binds it: another process can bind the port between the
    check that found it free and the peer's own bind. Any other failure is raised at once."""
    for attempt in range(attempts - 1):
        try:
            return start(attempt)
        except PortTaken:
            continue
    return start(attempts - 1)


def start_server(data_dir: Path, extra_env: dict[str, str] | None = None, workers: int = 2,
                 port: int | None = None) -> Server:
    port = port or free_port()
    log = data_dir.parent / f"serve-{port}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELREG_")}
    env.update(extra_env or {})
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    process = subprocess.Popen(
        [MODELREG, "serve", "--data-dir", str(data_dir), "--host", "127.0.0.1", "--port", str(port),
         "--workers", str(workers)],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env,
    )
    server = Server(f"http://127.0.0.1:{port}", data_dir, process, log)
    try:
        wait_until_up(process, server.url, log, path="/readyz", timeout=60)
    except RuntimeError:
        server.stop()
        raise
    return server


def wait_until_up(process: subprocess.Popen, url: str, log: Path, *, path: str = "/healthz",
                  timeout: float = 60) -> None:
    """Poll ``url + path`` until it answers 200; a process that exits or a timeout raises with the log's tail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"modelreg serve exited {process.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.02)
    raise RuntimeError(f"modelreg serve did not come up in {timeout:.0f} s: {log.read_text()[-2000:]}")
