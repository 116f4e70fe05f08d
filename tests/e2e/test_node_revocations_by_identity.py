"""Every node program learns of a revocation, whichever identity it runs as: a registry ``node`` token, or
the pod's projected service-account token (``--token-file``, as deploy/k8s and deploy/kserve run them).

A real ``modelreg serve`` with a worker over the seeded ``acme/llm`` (v1 and v2 approved, ``prod`` -> 1)
trusts a Kubernetes issuer (``tests/support/kube_issuer.py``) whose ``serving/fetcher`` is bound to
``acme``. Each test runs the real CLI as a subprocess: ``cache sweep --once`` over a LocalModelCache
folder, ``cache warm --once``, and ``serve-s3``; each must apply the revocation from the event stream
(not only by asking again later) and say nothing failed.
"""

from __future__ import annotations

import hashlib
import json
import queue
import subprocess
import threading
from pathlib import Path

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.support.kube_issuer import KubeIssuer
from tests.support.release_seed import MODEL, TENANT, admin_token, seed_release
from tests.support.server import MODELREG, start_server, stop_process

PROD = f"modelreg://{TENANT}/{MODEL}@prod"
KEY, SECRET = "node-key", "node-secret-0123456789"


@pytest.fixture
def registry(tmp_path):
    """A registry of its own per test (a test revokes v1), with a worker, trusting a bound issuer."""
    data_dir = tmp_path / "data"
    node_token = seed_release(data_dir, 1)[0]
    admin = admin_token(data_dir)
    with KubeIssuer() as issuer:
        server = start_server(data_dir, workers=1, extra_env={"MODELREG_WORKLOAD_ISSUERS": json.dumps(
            [{"issuer": issuer.url, "audience": "modelreg"}])})
        try:
            server.cli("node", "bind", "--issuer", issuer.url, "--namespace", "serving", "--service-account",
                       "fetcher", "--tenant", TENANT, token=admin, check=True)
            server.node_token, server.tenant_admin, server.issuer = node_token, admin, issuer
            yield server
        finally:
            server.stop()


@pytest.fixture(params=["node-token", "service-account"])
def node_env(request, registry, tmp_path) -> dict[str, str]:
    """The environment of a node program: the registry, the pinned trust root, and the identity."""
    root = tmp_path / "root.json"
    root.write_text(httpx.get(f"{registry.url}/v1/trust-root", timeout=30).text)
    env = {**registry.env(registry.node_token), "MODELREG_TRUST_ROOT": str(root)}
    if request.param == "service-account":
        token_file = tmp_path / "sa-token"
        token_file.write_text(registry.issuer.mint("serving", "fetcher") + "\n")
        del env["MODELREG_TOKEN"]
        env["MODELREG_TOKEN_FILE"] = str(token_file)
    return env


def _run(env: dict[str, str], *args: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([MODELREG, *args], capture_output=True, text=True, timeout=120,
                          env={**env, "MODELREG_CACHE": str(cache)})


def _revoke(server) -> None:
    server.cli("revoke", f"{TENANT}/{MODEL}", "1", "--reason", "bad weights", token=server.tenant_admin, check=True)


def _records(stdout: str, kind: str) -> list[dict]:
    return [r for r in map(json.loads, stdout.splitlines()) if r.get("event") == kind]


def test_the_sweeper_follows_revocations_with_either_identity(registry, node_env, tmp_path):
    folder = tmp_path / "volume" / "models" / hashlib.sha256(PROD.encode()).hexdigest()[:16]
    folder.mkdir(parents=True)
    fetched = _run(node_env, "fetch", PROD, str(folder), cache=tmp_path / "job-cache")
    assert fetched.returncode == 0, fetched.stderr
    _revoke(registry)
    swept = _run(node_env, "cache", "sweep", str(tmp_path / "volume"), "--once", "--json", cache=tmp_path / "state")
    assert swept.returncode == 14, swept.stderr  # revoked
    [revoked] = _records(swept.stdout, "revoked")
    assert revoked["version"] == 1 and revoked["removed"] and not folder.exists()
    [summary] = _records(swept.stdout, "summary")
    assert summary["event_stream"] == "ok", summary
    assert "error: sweep" not in swept.stderr, swept.stderr


def test_cache_warm_applies_a_revocation_with_either_identity(registry, node_env, tmp_path):
    warmed = _run(node_env, "cache", "warm", "--once", "--json", f"{TENANT}/{MODEL}@prod", cache=tmp_path / "cache")
    assert warmed.returncode == 0, warmed.stderr
    _revoke(registry)
    again = _run(node_env, "cache", "warm", "--once", "--json", f"{TENANT}/{MODEL}@2", cache=tmp_path / "cache")
    assert again.returncode == 0, again.stderr
    [revoked] = _records(again.stdout, "revoked")
    assert (revoked["tenant"], revoked["model"], revoked["version"]) == (TENANT, f"{TENANT}/{MODEL}", 1) \
        and revoked["blobs_removed"] > 0
    assert "error: revocations" not in again.stderr, again.stderr


def test_serve_s3_stops_serving_a_revoked_version_with_either_identity(registry, node_env, tmp_path):
    env = {**node_env, "MODELREG_CACHE": str(tmp_path / "cache"), "MODELREG_S3_ACCESS_KEY_ID": KEY,
           "MODELREG_S3_SECRET_ACCESS_KEY": SECRET}
    process = subprocess.Popen([MODELREG, "serve-s3", "--port", "0", "--json"], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stderr: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [stderr.put(line) for line in process.stderr], daemon=True).start()
    try:
        url = json.loads(process.stdout.readline())["url"]
        s3 = boto3.client("s3", endpoint_url=url, aws_access_key_id=KEY, aws_secret_access_key=SECRET,
                          region_name="us-east-1",
                          config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
        assert s3.get_object(Bucket=TENANT, Key=f"{MODEL}@1/config.json")["Body"].read()
        _revoke(registry)
        # serve-s3 tells each revocation its follower applies; a refused event stream is told instead.
        while True:
            line = stderr.get(timeout=60)
            assert "error: revocations" not in line, line
            if f"revoked {TENANT}/{MODEL}@1: no longer served" in line:
                break
        with pytest.raises(ClientError) as refused:
            s3.get_object(Bucket=TENANT, Key=f"{MODEL}@1/config.json")
        assert refused.value.response["Error"]["Code"] == "AccessDenied"
    finally:
        stop_process(process)


def test_a_sweeper_that_missed_the_revocation_event_still_removes_the_folder(registry, node_env, tmp_path):
    """The full sweep asks the real registry about each folder's version: here the sweeper's cursor is past
    the revocation's event (as a stream that was refused, or lost its events, leaves it)."""
    from registry.node.cache import NodeCache

    folder = tmp_path / "volume" / "models" / hashlib.sha256(PROD.encode()).hexdigest()[:16]
    folder.mkdir(parents=True)
    assert _run(node_env, "fetch", PROD, str(folder), cache=tmp_path / "job-cache").returncode == 0
    clean = _run(node_env, "cache", "sweep", str(tmp_path / "volume"), "--once", "--json", cache=tmp_path / "state")
    assert clean.returncode == 0, clean.stderr
    _revoke(registry)
    state = NodeCache(tmp_path / "state")
    state.set_state(f"events.cursor {registry.url}", str(10**9))
    state.close()
    swept = _run(node_env, "cache", "sweep", str(tmp_path / "volume"), "--once", "--json", cache=tmp_path / "state")
    assert swept.returncode == 14, swept.stderr  # revoked
    [revoked] = _records(swept.stdout, "revoked")
    assert revoked["version"] == 1 and revoked["removed"] and not folder.exists()
