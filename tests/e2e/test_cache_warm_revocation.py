"""Revocation reaches nodes in seconds: `modelreg cache warm` against `modelreg serve` (API and its workers).

Two versions mirrored from a Hugging Face hub, scanned by the server's workers, approved and promoted
(``prod`` 1, ``stable`` 2); they share every file but the weights. A node runs ``cache warm`` on both
aliases with ``--json``; once both are cached, version 1 is revoked with ``modelreg revoke`` and the
test watches the cache directory: version 1's own blobs are gone within 5 seconds, the shared ones
stay for version 2, a ``{"event": "revoked"}`` line is printed, the textfile counts it, and the warm
thread on ``prod`` (now refused by the registry) neither exits nor floods stderr.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import subprocess
import threading
import time

import httpx
import pytest

from tests.support.hf_upstream import HfUpstream
from tests.support.server import MODELREG, start_server
from tests.support.tiny_model import tiny_model_files

FIRST, SECOND = tiny_model_files(41), tiny_model_files(42)


@pytest.fixture(scope="module")
def hub():
    with HfUpstream() as upstream:
        upstream.add_repo("org/tiny", card_data={"license": "mit"})
        upstream.revisions = [upstream.commit("org/tiny", FIRST), upstream.commit("org/tiny", SECOND)]
        yield upstream


@pytest.fixture(scope="module")
def server(tmp_path_factory, hub):
    s = start_server(tmp_path_factory.mktemp("warm") / "data",
                     extra_env={"MODELREG_HF_ALLOWED_ENDPOINTS": json.dumps([hub.url])})
    s.cli("tenant", "create", "team", check=True)
    s.tokens = {}
    for name, role, capacity in (("sam", "submitter", ""), ("sec", "approver", "security"),
                                 ("mia", "approver", "ml"), ("node-1", "node", "")):
        s.cli("principal", "create", name, check=True)
        grant = ["principal", "grant", name, "--tenant", "team", "--role", role]
        s.cli(*grant, *(["--capacity", capacity] if capacity else []), check=True)
        s.tokens[name] = s.cli("principal", "token", name, check=True).stdout.strip()
    s.versions = []
    for revision, alias in zip(hub.revisions, ("prod", "stable")):
        submitted = s.cli("submit", "hf://org/tiny", "--model", "team/tiny", "--revision", revision,
                          "--hf-endpoint", hub.url, "--wait", "--json", token=s.tokens["sam"], timeout=300)
        assert submitted.returncode == 0, submitted.stderr
        number = json.loads(submitted.stdout)["version"]
        for name, capacity in (("sec", "security"), ("mia", "ml")):
            s.cli("approve", "team/tiny", str(number), "--capacity", capacity, token=s.tokens[name], check=True)
        s.cli("promote", "team/tiny", alias, str(number), "--comment", "release", token=s.tokens["mia"], check=True)
        s.versions.append(number)
    yield s
    s.stop()


def _digests(files: dict[str, bytes]) -> set[str]:
    return {hashlib.sha256(data).hexdigest() for data in files.values()}


def _cached(cache) -> set[str]:
    store = cache / "tenants" / "team" / "blobs" / "sha256"
    return {p.name for p in store.glob("*/*")} if store.is_dir() else set()


class Lines:
    """A process's output lines, read as they come (so the test sees each the moment it is printed)."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def events(self, kind: str) -> list[dict]:
        found = []
        for line in list(self.lines):
            if line.startswith("{"):
                record = json.loads(line)
                if record.get("event") == kind:
                    found.append(record)
        return found


def _until(condition, seconds: float, what: str, warm: subprocess.Popen, err: Lines):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        assert warm.poll() is None, f"cache warm exited {warm.returncode}: {err.lines[-5:]}"
        time.sleep(0.02)
    pytest.fail(f"{what} not within {seconds}s; stderr: {err.lines[-5:]}")


def test_a_revoked_version_leaves_the_warm_node_cache_within_5_seconds(server, tmp_path):
    first, second = server.versions
    shared, own_first = _digests(FIRST) & _digests(SECOND), _digests(FIRST) - _digests(SECOND)
    assert shared and own_first
    root = tmp_path / "root.json"
    root.write_text(httpx.get(f"{server.url}/v1/trust-root", timeout=30).text)
    cache, prom = tmp_path / "node-cache", tmp_path / "warm.prom"
    env = {**server.env(server.tokens["node-1"]), "MODELREG_CACHE": str(cache)}
    warm = subprocess.Popen([MODELREG, "cache", "warm", "team/tiny@prod", "team/tiny@stable", "--trust-root",
                             str(root), "--json", "--metrics-textfile", str(prom)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = Lines(warm.stdout), Lines(warm.stderr)
    try:
        _until(lambda: len(out.events("summary")) >= 2, 60, "both releases cached", warm, err)
        assert {s["version"] for s in out.events("summary")} == {first, second}
        assert _cached(cache) >= _digests(FIRST) | _digests(SECOND)
        # The reader has read to the head of the stream (its cursor is in the textfile) before the revocation.
        _until(lambda: prom.exists() and "modelreg_cache_events_cursor" in prom.read_text(), 60,
               "the event reader started", warm, err)

        # The promise is 5 seconds from the revocation on the server to the node: timed from the revocation
        # event's own time (stamped by the server as it records the revocation, the same machine's clock), not
        # from before the revoke command starts, so the CLI's Python start-up on a loaded machine does not
        # count, nor does its exit after the commit. The wait is longer, so a miss reports how long it took.
        revoked = server.cli("revoke", "team/tiny", str(first), "--reason", "bad weights",
                             token=server.admin_token)
        assert revoked.returncode == 0, revoked.stderr
        _until(lambda: not _cached(cache) & own_first, 60, "the revoked version's blobs gone", warm, err)
        removed = time.time()
        events = httpx.get(f"{server.url}/v1/events", headers={"Authorization": f"Bearer {server.admin_token}"},
                           params={"type": "version.revoked", "limit": 1000}, timeout=30).json()["events"]
        [event] = events  # this server's one revocation
        committed = dt.datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
        took = removed - committed.timestamp()
        assert 0 <= took < 5, f"the revocation reached the node cache {took:.2f}s after it was recorded"
        assert _cached(cache) >= _digests(SECOND), "a blob the live version 2 lists was removed"

        [line] = _until(lambda: out.events("revoked"), 30, "the revoked JSON line", warm, err)
        assert line["model"] == "team/tiny" and line["version"] == first
        # The hub adds a .gitattributes both versions hold: kept too.
        assert line["blobs_removed"] == len(own_first) and line["blobs_kept"] >= len(shared)
        assert line["bytes_removed"] == sum(len(d) for d in FIRST.values()
                                            if hashlib.sha256(d).hexdigest() in own_first)
        _until(lambda: "modelreg_cache_revoked_versions_total 1.0" in prom.read_text(), 30, "the textfile count",
               warm, err)
        assert f"modelreg_cache_revoked_blobs_removed_total {float(len(own_first))!r}" in prom.read_text()

        # prod now gives a revoked version: its long poll, woken by the revocation, is refused; the warmer
        # says so once and goes on (it asks again in 10 s, telling nothing new), it neither exits nor spins.
        _until(lambda: [e for e in err.lines if "team/tiny@prod" in e], 30, "the refusal of prod told", warm, err)
        assert warm.poll() is None
        refusals = [e for e in err.lines if "team/tiny@prod" in e]
        assert len(refusals) == 1 and "revoked" in refusals[0], err.lines
        assert _cached(cache) >= _digests(SECOND) and not _cached(cache) & own_first
    finally:
        warm.terminate()
        warm.wait(15)
    print(f"revocation reached the node cache in {took:.2f}s")
