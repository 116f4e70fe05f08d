"""``modelreg serve`` refuses to start with a secret anyone could know (issue 30): the console key
docker-compose.yml used to ship, or the Kubernetes Secret's ``change-me`` as presign secret. One line on
stderr, a non-zero exit, and no server."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.server import MODELREG, free_port

OLD_COMPOSE_CONSOLE_KEY = "3f1c0a9e7b2d4c6f8a1e3b5d7f9c2a4e6b8d0f1a3c5e7a9b2d4f6a8c0e2b4d6f"


@pytest.mark.parametrize(("variable", "value", "says"), [
    ("MODELREG_CONSOLE_KEY", OLD_COMPOSE_CONSOLE_KEY, "MODELREG_CONSOLE_KEY is an example published"),
    ("MODELREG_PRESIGN_SECRET", "change-me", "MODELREG_PRESIGN_SECRET is an example published"),
    ("MODELREG_PRESIGN_SECRET", "nine-byte", "MODELREG_PRESIGN_SECRET has 9 bytes, fewer than 32"),
])
def test_serve_refuses_to_start_with_a_published_or_short_key(tmp_path, variable, value, says):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELREG_")}
    env[variable] = value
    process = subprocess.Popen(
        [MODELREG, "serve", "--data-dir", str(tmp_path / "data"), "--host", "127.0.0.1", "--port", str(free_port()),
         "--workers", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # A server that started anyway never exits on its own: the wait's timeout fails the test.
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], err[-2000:]
