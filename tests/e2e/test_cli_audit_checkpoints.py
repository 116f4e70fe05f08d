"""Signed audit checkpoints end to end.

`modelreg audit checkpoint`, `GET /v1/audit/checkpoints`, `modelreg audit checkpoints --json` saved
by an auditor, and `modelreg audit verify --checkpoints` naming a chain cut or recomputed behind
them; on the way, the reserved principal name and the modes of a fresh data directory.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import stat
import subprocess

import httpx
import pytest

from registry.bootstrap import bootstrap, load_settings
from registry.signing.keys import SigningKey
from tests.support.audit_attacks import cut_after, rewrite
from tests.support.server import MODELREG, start_server


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def permissive_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_checkpoints_saved_by_an_auditor_expose_a_cut_and_a_recomputed_chain(tmp_path, permissive_umask):
    data = tmp_path / "data"
    s = start_server(data, workers=0)
    try:
        # A fresh data directory and its database are the owner's alone, whatever the umask.
        assert _mode(data) == 0o700
        for name in ("registry.db", "registry.db-wal", "registry.db-shm"):
            assert _mode(data / name) == 0o600, name

        for name in ("t1", "t2", "t3"):
            s.cli("tenant", "create", name, check=True)
        s.cli("principal", "create", "aud", check=True)
        s.cli("principal", "grant", "aud", "--tenant", "t1", "--role", "auditor", check=True)
        s.cli("principal", "create", "sub", check=True)
        s.cli("principal", "grant", "sub", "--tenant", "t1", "--role", "submitter", check=True)
        auditor = s.cli("principal", "token", "aud", check=True).stdout.strip()
        submitter = s.cli("principal", "token", "sub", check=True).stdout.strip()

        first = json.loads(s.cli("audit", "checkpoint", "--data-dir", str(data), "--json", check=True).stdout)
        s.cli("tenant", "create", "t4", check=True)
        second = json.loads(s.cli("audit", "checkpoint", "--data-dir", str(data), "--json", check=True).stdout)
        assert second["event_id"] > first["event_id"]

        # The audit log's own actor for the registry's actions is no principal's name.
        reserved = httpx.post(s.url + "/v1/principals", json={"name": "system"},
                              headers={"Authorization": f"Bearer {s.admin_token}"})
        assert reserved.status_code == 422
        assert reserved.json()["type"] == "https://modelreg.dev/problems/reserved-name"
        refused = s.cli("principal", "create", "system")
        assert refused.returncode == 1 and "reserved" in refused.stderr

        url = s.url + "/v1/audit/checkpoints"
        body = httpx.get(url, headers={"Authorization": f"Bearer {auditor}"}).json()
        assert [c["event_id"] for c in body] == [first["event_id"], second["event_id"]]
        assert body[0]["envelope"]["payloadType"] == "application/vnd.modelreg.audit-checkpoint.v1+json"
        paged = httpx.get(url, params={"after": body[0]["id"], "limit": 1},
                          headers={"Authorization": f"Bearer {s.admin_token}"}).json()
        assert [c["id"] for c in paged] == [body[1]["id"]]
        assert httpx.get(url, headers={"Authorization": f"Bearer {submitter}"}).status_code == 403
        assert httpx.get(url).status_code == 401

        saved = s.cli("audit", "checkpoints", "--json", token=auditor, check=True).stdout
        assert json.loads(saved) == body
        (tmp_path / "checkpoints.json").write_text(saved)
        s.cli("keys", "export", "-o", str(tmp_path / "registry.pub"), check=True)
    finally:
        s.stop()

    def verify(directory, *extra):
        return s.cli("audit", "verify", "--data-dir", str(directory), "--checkpoints",
                     str(tmp_path / "checkpoints.json"), *extra)

    ok = verify(data, "--public-key", str(tmp_path / "registry.pub"), "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["checkpoints"] == 2
    assert verify(data).returncode == 0  # the embedded registry's own key by default

    recomputed = tmp_path / "recomputed"
    shutil.copytree(data, recomputed)
    container = bootstrap(load_settings(data_dir=recomputed))
    with container.session_factory() as session:
        rewrite(session, 2, actor="mallory")
    container.dispose()
    assert s.cli("audit", "verify", "--data-dir", str(recomputed)).returncode == 0  # unseen without checkpoints
    bad = verify(recomputed)
    assert bad.returncode == 1
    assert f"audit chain was rewritten at or before event {first['event_id']}" in bad.stderr

    container = bootstrap(load_settings(data_dir=data))
    with container.session_factory() as session:
        cut_after(session, second["event_id"] - 1)
    container.dispose()
    assert s.cli("audit", "verify", "--data-dir", str(data)).returncode == 0  # unseen without checkpoints
    bad = verify(data)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
    assert (f"ends at event {second['event_id'] - 1} but the checkpoint signed at" in bad.stderr
            and "were removed" in bad.stderr)

    # A checkpoint whose signed payload was edited, or one checked against another key: bad signature.
    forged = json.loads(saved)
    payload = json.loads(base64.b64decode(forged[1]["envelope"]["payload"]))
    payload["event_id"] -= 1
    forged[1]["envelope"]["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    (tmp_path / "checkpoints.json").write_text(json.dumps(forged))
    bad = verify(data)
    assert bad.returncode == 1 and "checkpoint 1 has a bad signature" in bad.stderr
    other = tmp_path / "other.pub"
    other.write_bytes(SigningKey.generate().public_key.public_pem())
    (tmp_path / "checkpoints.json").write_text(saved)
    bad = verify(data, "--public-key", str(other))
    assert bad.returncode == 1 and "checkpoint 0 has a bad signature" in bad.stderr
    (tmp_path / "checkpoints.json").write_text("{not json")
    bad = verify(data)
    assert bad.returncode == 1 and "checkpoints.json is not JSON" in bad.stderr


@pytest.mark.parametrize("args", [
    ("audit", "verify", "--checkpoints", "none.json"),
    ("audit", "checkpoint"),
], ids=["verify", "checkpoint"])
def test_audit_commands_without_a_registry_fail_in_one_line(tmp_path, args):
    r = subprocess.run([MODELREG, *args], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "MODELREG_DATA_DIR": str(tmp_path / "d")})
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("error: no embedded registry in")
    assert not (tmp_path / "d").exists()
