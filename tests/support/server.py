"""A real ``modelreg serve`` process on a free loopback port, for end-to-end tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

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
        env.update(MODELREG_URL=self.url, MODELREG_TOKEN=token or self.admin_token, MODELREG_DATA_DIR=str(self.data_dir))
        return env

    def cli(self, *args: str, token: str | None = None, check: bool = False, timeout: float = 120):
        result = subprocess.run([MODELREG, *args], env=self.env(token), capture_output=True, text=True,
                                timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"modelreg {' '.join(args)} exited {result.returncode}: {result.stderr}")
        return result

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


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
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"modelreg serve exited {process.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(server.url + "/readyz", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"modelreg serve did not become ready: {log.read_text()[-2000:]}")
