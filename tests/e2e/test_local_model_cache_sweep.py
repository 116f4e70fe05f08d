"""KServe LocalModelCache folders on a node, swept: `modelreg fetch` as KServe's download Job, then `cache sweep`.

The registry is a real ``modelreg serve`` over the seeded ``acme/llm`` (v1 and v2 approved, ``prod`` -> 1).
Each folder is where KServe's node agent would mount it: ``ROOT/models/<first 16 hex of sha256(URI)>``,
filled by ``modelreg fetch URI FOLDER`` as the download Job runs it. The sweeper removes a folder whose
version was revoked (``--once``, and the looping sweeper within seconds of the revocation), whose bytes
changed, or whose release record no longer verifies; other folders stay, byte for byte.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.support.release_seed import MODEL, TENANT, admin_token, seed_release
from tests.support.server import MODELREG, start_server
from tests.support.waiting import wait_until

PROD, PINNED = f"modelreg://{TENANT}/{MODEL}@prod", f"modelreg://{TENANT}/{MODEL}@2"


def storage_key(uri: str) -> str:
    """KServe's folder name for a LocalModelCache (v1alpha1.GetStorageKey)."""
    return hashlib.sha256(uri.encode()).hexdigest()[:16]


class Node:
    """One node: the node group's volume (ROOT), the pinned trust root, the fetch's and the sweeper's state."""

    def __init__(self, server, token: str, tmp: Path) -> None:
        self.server, self.tmp = server, tmp
        self.root = tmp / "volume"
        (self.root / "models").mkdir(parents=True)
        self.trust_root = tmp / "root.json"
        self.trust_root.write_text(httpx.get(f"{server.url}/v1/trust-root", timeout=30).text)
        self.env = {**server.env(token), "MODELREG_TRUST_ROOT": str(self.trust_root)}

    def folder(self, uri: str) -> Path:
        return self.root / "models" / storage_key(uri)

    def fetch(self, uri: str) -> subprocess.CompletedProcess:
        """What KServe's download Job runs: the folder exists (the mount), empty."""
        self.folder(uri).mkdir()
        done = subprocess.run([MODELREG, "fetch", uri, str(self.folder(uri)), "--json"], capture_output=True,
                              text=True, timeout=120,
                              env={**self.env, "MODELREG_CACHE": str(self.tmp / "job-cache")})
        assert done.returncode == 0, done.stderr
        return done

    def sweep(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([MODELREG, "cache", "sweep", str(self.root), "--json", *args], capture_output=True,
                              text=True, timeout=120, env={**self.env, "MODELREG_CACHE": str(self.tmp / "sweeper")})


def _events(stdout: str, kind: str) -> list[dict]:
    return [r for r in map(json.loads, stdout.splitlines()) if r["event"] == kind]


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def registry(tmp_path):
    """A registry of its own per test: a test revokes versions."""
    data_dir = tmp_path / "data"
    token = seed_release(data_dir, 1)[0]
    admin = admin_token(data_dir)
    server = start_server(data_dir, workers=0)
    server.node_token, server.tenant_admin = token, admin
    yield server
    server.stop()


@pytest.fixture
def node(registry, tmp_path):
    return Node(registry, registry.node_token, tmp_path / "node")


def _revoke(server, version: int) -> None:
    done = server.cli("revoke", f"{TENANT}/{MODEL}", str(version), "--reason", "bad weights",
                      token=server.tenant_admin)
    assert done.returncode == 0, done.stderr


def test_fetch_of_an_alias_says_the_version_it_resolved_to_and_a_pinned_one_says_nothing(node):
    prod = node.fetch(PROD)
    [resolved] = _events(prod.stdout, "resolved")
    [summary] = _events(prod.stdout, "summary")
    assert resolved == {"event": "resolved", "resolved_from": f"{TENANT}/{MODEL}@prod", "version": 1}
    assert summary["version"] == 1 and summary["resolved_from"] == f"{TENANT}/{MODEL}@prod"
    pinned = node.fetch(PINNED)
    [summary] = _events(pinned.stdout, "summary")
    assert summary["version"] == 2 and summary["resolved_from"] is None and not _events(pinned.stdout, "resolved")
    # A person reads it as a line before the summary.
    human = subprocess.run([MODELREG, "fetch", PROD, str(node.tmp / "elsewhere")], capture_output=True, text=True,
                           timeout=120, env={**node.env, "MODELREG_CACHE": str(node.tmp / "job-cache")})
    assert human.returncode == 0, human.stderr
    assert (f"resolved {TENANT}/{MODEL}@prod to version 1; a LocalModelCache keeps this version — pin it "
            f"(modelreg://{TENANT}/{MODEL}@1)") in human.stdout.splitlines()[-2]
    # What the sweeper re-checks later is in the folder: the signed envelope, byte for byte as served.
    record = json.loads((node.folder(PROD) / ".git" / "modelreg-release.json").read_text())
    assert json.loads(base64.b64decode(record["envelope"]["payload"]))["version"] == 1


def test_a_revoked_version_s_folder_is_removed_by_one_sweep_and_the_other_stays(node):
    node.fetch(PROD)
    node.fetch(PINNED)
    kept = _contents(node.folder(PINNED))
    clean = node.sweep("--once")
    assert clean.returncode == 0, clean.stderr
    assert _events(clean.stdout, "summary")[0]["ok"] == 2

    _revoke(node.server, 1)
    swept = node.sweep("--once")
    assert swept.returncode == 14, swept.stderr  # revoked
    [revoked] = _events(swept.stdout, "revoked")
    assert revoked["model"] == f"{TENANT}/{MODEL}" and revoked["version"] == 1 and revoked["removed"]
    assert revoked["folder"] == str(node.folder(PROD))
    assert not node.folder(PROD).exists()
    assert _contents(node.folder(PINNED)) == kept
    assert [p.name for p in (node.root / "models").iterdir()] == [storage_key(PINNED)]  # nothing left aside
    # The revocation is remembered: a sweep with no new events finds nothing more to do.
    again = node.sweep("--once")
    assert again.returncode == 0, again.stderr


def test_the_looping_sweeper_removes_a_revoked_version_s_folder_within_seconds(node):
    node.fetch(PROD)
    node.fetch(PINNED)
    sweeper = subprocess.Popen([MODELREG, "cache", "sweep", str(node.root), "--json", "--interval", "3600"],
                               env={**node.env, "MODELREG_CACHE": str(node.tmp / "sweeper")},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(sweeper.stdout), daemon=True).start()
    try:
        wait_until(lambda: any('"summary"' in line for line in lines), "the first sweep's summary", process=sweeper)
        # The event reader may be in its long poll or still before its first read: either way the
        # revocation reaches it as an event, long before the sweeper's next full sweep (an hour away).
        started = time.monotonic()
        _revoke(node.server, 1)
        wait_until(lambda: not node.folder(PROD).exists(), "the revoked folder's removal", process=sweeper)
        took = time.monotonic() - started
        assert node.folder(PINNED).is_dir()
        wait_until(lambda: any(json.loads(line).get("event") == "revoked" for line in list(lines)
                               if line.startswith("{")), "the sweeper's revoked line", process=sweeper)
    finally:
        sweeper.terminate()
        sweeper.wait(15)
    print(f"the revoked folder was removed {took:.2f}s after `modelreg revoke` started")


def test_one_changed_byte_removes_that_folder_and_no_other(node):
    node.fetch(PROD)
    node.fetch(PINNED)
    kept = _contents(node.folder(PINNED))
    weights = node.folder(PROD) / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # same size: only a hash finds it
    weights.chmod(0o644)
    weights.write_bytes(bytes(data))
    unrelated = node.root / "models" / storage_key("hf://org/other")
    unrelated.mkdir()
    (unrelated / "config.json").write_text("{}")

    swept = node.sweep("--once")
    assert swept.returncode == 13, swept.stderr  # digest
    [altered] = _events(swept.stdout, "altered")
    assert altered["folder"] == str(node.folder(PROD)) and altered["removed"]
    assert "model.safetensors" in altered["reason"]
    assert not node.folder(PROD).exists()
    assert _contents(node.folder(PINNED)) == kept
    # Another storage container's cache: reported and left alone.
    [other] = _events(swept.stdout, "unattributed")
    assert other["folder"] == str(unrelated) and not other["removed"]
    assert (unrelated / "config.json").read_text() == "{}"


def test_a_forged_release_record_removes_its_folder_even_when_the_files_match_it(node):
    """The record is rewritten to list the changed file's hash: the files match it, its signature does not."""
    node.fetch(PROD)
    folder = node.folder(PROD)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()[:-1] + b"!"
    weights.chmod(0o644)
    weights.write_bytes(data)
    record_path = folder / ".git" / "modelreg-release.json"
    record = json.loads(record_path.read_text())
    payload = json.loads(base64.b64decode(record["envelope"]["payload"]))
    for f in payload["files"]:
        if f["path"] == "model.safetensors":
            f["sha256"] = hashlib.sha256(data).hexdigest()
    record["envelope"]["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    record_path.chmod(0o644)
    record_path.write_text(json.dumps(record))

    swept = node.sweep("--once")
    assert swept.returncode == 13, swept.stderr
    [altered] = _events(swept.stdout, "altered")
    assert altered["folder"] == str(folder) and altered["removed"] and "signature" in altered["reason"]
    assert not folder.exists()
