"""The CNCF distribution registry (Debian's ``docker-registry``) on a free loopback port, as a reference peer.

A plain registry that modelreg's artifacts are replicated into (``skopeo copy``) and pulled back from, in the
tests and in ``bench/oci.py``. It runs from its own YAML config with its storage in a temporary directory, no
authentication, plain HTTP on ``127.0.0.1``; it is never run as a system service. ``require`` finds a tool
(``skopeo``, ``docker-registry``) that ``make test`` installs with apt when missing, and fails under CI when it
is still missing rather than skipping.

Usage::

    with distribution_registry(tmp_path / "registry") as reference:
        reference.host   # '127.0.0.1:4xxxx'
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx

from tests.support.server import PortTaken, start_again_when_port_taken, stop_process

CONFIG = """\
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {root}
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:{port}
  secret: modelreg-tests-only
"""


def require(tool: str) -> str:
    """The path of ``tool``; a test that needs a missing one fails under CI, and is skipped elsewhere."""
    import pytest

    found = shutil.which(tool) or (f"/usr/bin/{tool}" if os.access(f"/usr/bin/{tool}", os.X_OK) else None)
    if found:
        return found
    reason = f"`{tool}` is not installed (make test installs it: apt-get install -y skopeo docker-registry)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason}, and CI is set", pytrace=False)
    pytest.skip(reason)


def free_loopback_port(start: int = 10000, stop: int = 12000) -> int:
    """A free port in ``[start, stop)``, chosen from the pid for spread.

    Below SeaweedFS' ports (tests/support/seaweed.py) and below the kernel's ephemeral range, from which every
    outgoing connection takes its local port: a port there could be taken between this check and the bind.
    """
    candidate = start + (os.getpid() * 7919) % (stop - start)
    for _ in range(stop - start):
        candidate = start + (candidate - start + 1) % (stop - start)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return candidate
    raise RuntimeError("no free loopback port for docker-registry")


@dataclass
class DistributionRegistry:
    url: str
    process: subprocess.Popen
    directory: Path

    @property
    def host(self) -> str:
        return self.url.removeprefix("http://")

    def stop(self) -> None:
        stop_process(self.process)


def start_distribution_registry(directory: Path, binary: str = "docker-registry",
                                timeout: float = 60.0, attempts: int = 3) -> DistributionRegistry:
    """Start ``docker-registry serve`` with storage under ``directory``; return once ``/v2/`` answers 200.

    When another process bound the chosen port first, it starts again on another.
    """
    return start_again_when_port_taken(lambda _attempt: _start_distribution_registry(directory, binary, timeout),
                                       attempts)


def _start_distribution_registry(directory: Path, binary: str, timeout: float) -> DistributionRegistry:
    directory.mkdir(parents=True, exist_ok=True)
    port = free_loopback_port()
    config = directory / "config.yml"
    config.write_text(CONFIG.format(root=directory / "storage", port=port))
    log = open(directory / "registry.log", "wb")
    # A cleared environment: REGISTRY_* variables would override the config file.
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    process = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)
    registry = DistributionRegistry(f"http://127.0.0.1:{port}", process, directory)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.close()
            output = (directory / "registry.log").read_text(errors="replace")
            error = PortTaken if "address already in use" in output else RuntimeError
            raise error(f"docker-registry exited {process.returncode}: {output[-2000:]}")
        try:
            if httpx.get(f"{registry.url}/v2/", timeout=1).status_code == 200:
                return registry
        except httpx.HTTPError:
            pass
        time.sleep(0.02)
    registry.stop()
    raise RuntimeError("docker-registry did not answer /v2/")


@contextmanager
def distribution_registry(directory: Path, binary: str = "docker-registry") -> Iterator[DistributionRegistry]:
    registry = start_distribution_registry(directory, binary)
    try:
        yield registry
    finally:
        registry.stop()
