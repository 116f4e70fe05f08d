"""`modelreg worker` beside `modelreg serve` on the embedded default, as the README runs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import httpx

from tests.support.server import MODELREG, start_server
from tests.support.tiny_model import tiny_model_files


def test_a_worker_on_the_embedded_default_seals_with_the_registrys_key(tmp_path):
    """No signing key setting, the default data directory (./.modelreg): the worker signs with the
    key `serve` made there, and the version is sealed, scanned and verifiable against /v1/keys."""
    model_dir = tmp_path / "tiny"
    model_dir.mkdir()
    for path, data in tiny_model_files(5).items():
        (model_dir / path).write_bytes(data)
    server = start_server(tmp_path / ".modelreg", workers=0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELREG_")}
    log = tmp_path / "worker.log"
    worker = None
    try:
        submitted = json.loads(server.cli("submit", str(model_dir), "--model", "default/tiny", "--json",
                                          check=True).stdout)
        assert submitted["state"] == "mirroring"
        with log.open("wb") as out:
            worker = subprocess.Popen([MODELREG, "worker"], cwd=tmp_path, env=env, stdout=out,
                                      stderr=subprocess.STDOUT)
        auth = {"Authorization": f"Bearer {server.admin_token}"}
        url = f"{server.url}/v1/models/default/tiny/versions/{submitted['version']}"
        deadline = time.monotonic() + 90
        while (version := httpx.get(url, headers=auth).json())["state"] not in ("awaiting_approval",
                                                                                "failed"):
            assert time.monotonic() < deadline and worker.poll() is None, log.read_text()[-3000:]
            time.sleep(0.05)
        assert version["state"] == "awaiting_approval", (version["failure_detail"], log.read_text()[-3000:])
        [key] = httpx.get(f"{server.url}/v1/keys").json()["keys"]
        assert version["signing_key_id"] == key["key_id"]
        keys = tmp_path / ".modelreg" / "keys"
        # One signing key, and the audit log's note key (made once, by whichever process signs first).
        assert sorted(keys.iterdir()) == [keys / "log-key", keys / "signing-key.pem"], \
            "the worker made a key of its own"
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()[-3000:]
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()
        server.stop()
