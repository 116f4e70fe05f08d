"""The revocation drill (issue 36): "is version V still running anywhere, and since when?", asked of a real
``modelreg serve`` with a worker, after every kind of node program and an admission decision said they hold it.

The seeded ``acme/llm`` (``tests/support/release_seed.py``: v1 and v2 approved) plays V = v1. It is fetched
by two nodes, one with a ``node`` token into a folder, one with a bound service account's projected token
(``tests/support/kube_issuer.py``) into a KServe LocalModelCache folder (ROOT/models/<key>); ``cache warm``
holds it in a node cache; ``serve-s3`` streams it; and a Pod fetching it is admitted by the real ``modelreg
admission`` webhook. Then v1 is revoked: ``modelreg provenance running acme/llm@1 --json`` lists every place,
and one ``version.still_running`` event per place reaches a Standard Webhooks receiver within 2 s of the
revocation (printed). Each place leaves the answer when its node reports the drop: serve-s3 and cache warm from
the event stream, the sweeper removing the LocalModelCache folder, a fetch of v2 into the first folder, and for
the pod, ``cluster watch``'s report of it gone (sent here as that program sends it: ``POST /v1/receipts``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
import signal
import subprocess
from pathlib import Path

import boto3
import httpx
import standardwebhooks
from botocore.config import Config

from registry.bootstrap import bootstrap
from registry.policy import default_policy_dir
from registry.settings import Settings
from tests.support.admission_webhook import admission_review, start_webhook
from tests.support.kube_issuer import KubeIssuer
from tests.support.registry import role_token
from tests.support.release_seed import MODEL, TENANT, admin_token, seed_release
from tests.support.server import MODELREG, start_server, stop_process
from tests.support.waiting import wait_until
from tests.support.webhook_receiver import Receiver

V = 1
REF = f"{TENANT}/{MODEL}@{V}"
KEY, SECRET = "node-key", "node-secret-0123456789"
FAST_WEBHOOKS = {"MODELREG_EGRESS_ALLOW": '["127.0.0.1/32"]', "MODELREG_WEBHOOK_POLL_SECONDS": "0.1",
                 "MODELREG_JOB_LEASE_SECONDS": "5"}


def _policies(tmp_path: Path) -> Path:
    policies = tmp_path / "policies"
    shutil.copytree(default_policy_dir(), policies)
    data = json.loads((policies / "data.json").read_text())
    data["modelreg"]["config"]["admission"]["namespaces"] = {"team-a": {"tenant": TENANT, "mode": "enforce"}}
    (policies / "data.json").write_text(json.dumps(data))
    return policies


def _pod(name: str, ref: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "initContainers": [{"name": "fetch", "image": "modelreg:latest", "command": ["modelreg", "fetch"],
                            "args": [ref, "/mnt/models"]}],
        "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.9.0"}]}}


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([MODELREG, *args], capture_output=True, text=True, timeout=120, env=env)


def _places(server, admin: str) -> list[dict]:
    result = server.cli("provenance", "running", REF, "--json", token=admin, check=True)
    return json.loads(result.stdout)["places"]


def _programs(places: list[dict]) -> list[str]:
    return sorted(p["program"] for p in places)


def test_revocation_drill(tmp_path):
    data_dir = tmp_path / "data"
    node_token = seed_release(data_dir, 1)[0]
    admin = admin_token(data_dir)
    setup = bootstrap(Settings(data_dir=data_dir))
    webhook_token = role_token(setup, "webhook", TENANT, "admission")
    setup.engine.dispose()
    with KubeIssuer() as issuer, Receiver() as hook:
        server = start_server(data_dir, workers=1, extra_env={
            **FAST_WEBHOOKS, "MODELREG_POLICY_DIR": str(_policies(tmp_path)),
            "MODELREG_WORKLOAD_ISSUERS": json.dumps([{"issuer": issuer.url, "audience": "modelreg"}])})
        processes: list = []
        try:
            server.cli("node", "bind", "--issuer", issuer.url, "--namespace", "serving", "--service-account",
                       "fetcher", "--tenant", TENANT, token=admin, check=True)
            added = json.loads(server.cli("webhook", "add", hook.url, "--tenant", TENANT, "--type",
                                          "version.still_running", "--json", token=admin, check=True).stdout)
            root = tmp_path / "root.json"
            root.write_text(httpx.get(f"{server.url}/v1/trust-root", timeout=30).text)
            token_file = tmp_path / "sa-token"
            token_file.write_text(issuer.mint("serving", "fetcher") + "\n")
            base = {**server.env(node_token), "MODELREG_TRUST_ROOT": str(root)}
            node_a = {**base, "MODELREG_NODE_NAME": "node-a", "MODELREG_CACHE": str(tmp_path / "cache-a")}
            node_b = {**{k: v for k, v in base.items() if k != "MODELREG_TOKEN"},
                      "MODELREG_TOKEN_FILE": str(token_file), "MODELREG_NODE_NAME": "node-b",
                      "MODELREG_CACHE": str(tmp_path / "cache-b")}

            # Node A (node token): fetch into a folder, and keep v1 in its cache.
            folder_a = tmp_path / "models-a"
            assert _run(node_a, "fetch", REF, str(folder_a)).returncode == 0
            warmed = _run(node_a, "cache", "warm", "--once", REF)
            assert warmed.returncode == 0, warmed.stderr
            # Node B (service account): KServe's LocalModelCache folder, as its download job fills it.
            volume = tmp_path / "volume"
            lmc = volume / "models" / hashlib.sha256(REF.encode()).hexdigest()[:16]
            lmc.mkdir(parents=True)
            fetched = _run(node_b, "fetch", REF, str(lmc))
            assert fetched.returncode == 0 and "warning" not in fetched.stderr, fetched.stderr
            # serve-s3 on node A streams it.
            s3_env = {**node_a, "MODELREG_CACHE": str(tmp_path / "cache-s3"), "MODELREG_S3_ACCESS_KEY_ID": KEY,
                      "MODELREG_S3_SECRET_ACCESS_KEY": SECRET}
            serve_s3 = subprocess.Popen([MODELREG, "serve-s3", "--port", "0", "--json"], env=s3_env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            processes.append(serve_s3)
            s3 = boto3.client("s3", endpoint_url=json.loads(serve_s3.stdout.readline())["url"],
                              aws_access_key_id=KEY, aws_secret_access_key=SECRET, region_name="us-east-1",
                              config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
            assert s3.get_object(Bucket=TENANT, Key=f"{MODEL}@{V}/config.json")["Body"].read()
            # One pod admitted by the real admission webhook.
            webhook = start_webhook(tmp_path / "hook", server.url, webhook_token, root)
            processes.append(webhook.process)
            assert webhook.send(admission_review(_pod("server-0", REF), "team-a"))["allowed"] is True

            expected = ["admission", "cache-warm", "fetch", "fetch", "serve-s3"]
            wait_until(lambda: _programs(_places(server, admin)) == expected, "every place to report", timeout=60)
            places = _places(server, admin)
            by_program = {p["program"]: p for p in places}
            assert by_program["admission"]["place"] == {"where": "pod", "node": "", "namespace": "team-a",
                                                        "pod": "server-0", "uid": "",
                                                        "volume": "/spec/initContainers/0/args/0"}
            assert len({p["principal"] for p in places if p["program"] == "fetch"}) == 2

            # Revoke: one still_running event per place, to the Standard Webhooks receiver, within 2 s.
            # serve-s3 drops a revoked version within milliseconds: paused, it shows the answer right after the
            # revocation with every place, and goes on when continued.
            serve_s3.send_signal(signal.SIGSTOP)
            server.cli("revoke", f"{TENANT}/{MODEL}", str(V), "--reason", "drill", token=admin, check=True)
            wait_until(lambda: len(hook.requests) >= len(expected), "one still_running per place", timeout=30,
                       interval=0.005)
            arrived = dt.datetime.now(dt.timezone.utc)
            answer = json.loads(server.cli("provenance", "running", REF, "--json", token=admin, check=True).stdout)
            revoked_at = dt.datetime.fromisoformat(answer["revocation"]["at"])
            took = (arrived - revoked_at).total_seconds()
            print(f"revoke -> last version.still_running event at the receiver: {took:.3f} s")
            bodies = [standardwebhooks.Webhook(added["secret"]).verify(r.body, r.headers) for r in hook.requests]
            assert all(b["type"] == "dev.modelreg.version.still_running" and b["data"]["version"] == V
                       for b in bodies), bodies
            assert sorted(b["data"]["program"] for b in bodies) == expected
            assert len({json.dumps(b["data"]["place"], sort_keys=True) + b["data"]["principal"]
                        for b in bodies}) == len(expected)
            assert took < 2.0, f"the last still_running event arrived {took:.3f} s after the revocation"
            assert answer["revocation"]["reason"] == "drill"
            assert _programs(answer["places"]) == expected  # revoked, and listed: each node still holds it

            # Each place leaves the answer when its node reports the drop.
            serve_s3.send_signal(signal.SIGCONT)
            wait_until(lambda: "serve-s3" not in _programs(_places(server, admin)), "serve-s3's drop")
            assert _run(node_a, "cache", "warm", "--once", f"{TENANT}/{MODEL}@2").returncode == 0
            assert "cache-warm" not in _programs(_places(server, admin))
            swept = _run({**node_b, "MODELREG_CACHE": str(tmp_path / "sweep-state")}, "cache", "sweep",
                         str(volume), "--once", "--json")
            assert swept.returncode == 14, swept.stderr  # it removed a revoked folder
            assert _programs(_places(server, admin)) == ["admission", "fetch"]
            shutil.rmtree(folder_a)
            assert _run(node_a, "fetch", f"{TENANT}/{MODEL}@2", str(folder_a)).returncode == 0
            assert _programs(_places(server, admin)) == ["admission"]
            gone = httpx.post(f"{server.url}/v1/receipts", headers={"Authorization": f"Bearer {node_token}"},
                              timeout=30, json={"program": "cluster-watch", "node": "node-a", "places": [
                                  {"model": f"{TENANT}/{MODEL}", "version": V, "where": "pod", "namespace": "team-a",
                                   "pod": "server-0", "uid": "0b6c1c1e-1111-4111-8111-000000000001",
                                   "volume": "model", "held": False}]})
            assert gone.status_code == 200 and gone.json()["dropped"] == 1, gone.text
            assert _places(server, admin) == []
            # Nothing more was sent: one event per place per revocation.
            assert len(hook.requests) == len(expected)
        finally:
            for process in processes:
                stop_process(process)
            server.stop()
