"""Webhooks end to end: a real ``modelreg serve`` (API only) and ``modelreg worker`` processes delivering
to a real receiver; the worker is killed with SIGKILL in the middle of a delivery.

What is checked: the tenant admin subscribes with the CLI; events arrive in order, each verified by the
``standardwebhooks`` library and parsed by ``cloudevents``; the event being delivered when the worker
died is delivered again by the next worker with the same ``webhook-id`` and nothing is lost or reordered;
a receiver down for a while gets everything, in order, once it is back; ``modelreg webhook test`` queues a
ping the worker sends and waits for its answer.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import standardwebhooks
from cloudevents.core.formats.json import JSONFormat

from registry import audit
from registry.bootstrap import bootstrap
from registry.db.session import begin_write
from registry.settings import Settings
from tests.support.server import MODELREG, start_server
from tests.support.webhook_receiver import Receiver

T = "acme"
ENV = {"MODELREG_EGRESS_ALLOW": '["127.0.0.1/32"]', "MODELREG_JOB_LEASE_SECONDS": "1.5",
       "MODELREG_WEBHOOK_POLL_SECONDS": "0.1", "MODELREG_WEBHOOK_BACKOFF_BASE_SECONDS": "0.2",
       "MODELREG_WEBHOOK_BACKOFF_MAX_SECONDS": "0.5", "MODELREG_WEBHOOK_TIMEOUT_SECONDS": "8"}


def _start_worker(cwd: Path, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODELREG_")}
    env.update(ENV, HF_HUB_DISABLE_TELEMETRY="1")
    with log.open("ab") as out:
        return subprocess.Popen([MODELREG, "worker"], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _wait(condition, what: str, log: Path, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


def _collapsed(ids: list[str]) -> list[str]:
    """The ids with each run of repeats (a redelivery of the same event) made one."""
    return [i for n, i in enumerate(ids) if n == 0 or ids[n - 1] != i]


def test_order_holds_across_a_kill_of_the_delivering_worker_and_a_receiver_outage(tmp_path):
    data_dir = tmp_path / ".modelreg"
    server = start_server(data_dir, extra_env=ENV, workers=0)
    log = tmp_path / "worker.log"
    worker = None
    container = None
    try:
        server.cli("tenant", "create", T, check=True)
        with Receiver() as hook:
            added = json.loads(server.cli("webhook", "add", hook.url, "--tenant", T, "--type", "version.revoked",
                                          "--json", check=True).stdout)
            secret = added["secret"]
            listed = json.loads(server.cli("webhook", "list", "--json", check=True).stdout)
            assert [w["id"] for w in listed] == [added["id"]] and "secret" not in listed[0]
            container = bootstrap(Settings(data_dir=data_dir))

            def revoke(number: int) -> str:  # as revocations.revoke appends it
                with container.session_factory() as session:
                    begin_write(session)
                    row = audit.append(session, actor="sec", action="version.revoked", subject=f"{T}/m@{number}",
                                       tenant=T, details={"state": "revoked", "reason": "CVE", "aliases": []})
                    session.commit()
                    return str(row.id)

            ids = [revoke(n) for n in range(1, 7)]
            hook.delay = 30.0  # the worker will be busy delivering the first event when it dies
            worker = _start_worker(tmp_path, log)
            _wait(lambda: len(hook.requests) >= 1, "the first delivery", log)
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)
            hook.delay = 0.0
            worker = _start_worker(tmp_path, log)
            _wait(lambda: set(ids) <= set(hook.ids()), "every event after the kill", log)
            assert hook.ids()[:2] == [ids[0], ids[0]], hook.ids()  # the same event again, with its id
            assert _collapsed(hook.ids()) == ids

            hook.stop()  # down for a while: connections refused
            more = [revoke(n) for n in range(7, 10)]
            _wait(lambda: server.cli("webhook", "show", str(added["id"]), "--json",
                                     check=True).stdout.count('"failed_attempts": 0') == 0, "a failed attempt", log)
            hook.start()  # the failed attempt shows the outage was met: no need to stay down longer
            _wait(lambda: set(more) <= set(hook.ids()), "the events sent while the receiver was down", log)
            assert _collapsed(hook.ids()) == ids + more
            for request in hook.requests:
                body = standardwebhooks.Webhook(secret).verify(request.body, request.headers)
                event = JSONFormat().read(None, request.body)
                assert event.get_id() == request.headers["webhook-id"] and body["type"].endswith("version.revoked")
            first_two = hook.requests[:2]
            assert first_two[0].body == first_two[1].body  # a duplicate is the same event, byte for byte

            deliveries = json.loads(server.cli("webhook", "deliveries", str(added["id"]), "--limit", "500",
                                               "--json", check=True).stdout)
            assert any(d["status_code"] is None for d in deliveries)  # the outage is on record
            shown = json.loads(server.cli("webhook", "show", str(added["id"]), "--json", check=True).stdout)
            assert shown["state"] == "active" and shown["failed_attempts"] == 0
            refused = server.cli("webhook", "add", "http://169.254.169.254/", "--tenant", T, "--type", "*")
            assert refused.returncode == 1 and "link-local" in refused.stderr, refused.stderr
            # A test ping goes through the worker; the CLI waits for its answer.
            ping = json.loads(server.cli("webhook", "test", str(added["id"]), "--json", check=True).stdout)
            assert (ping["state"], ping["status_code"]) == ("delivered", 204), ping
            assert hook.requests[-1].headers["webhook-id"] == ping["event_id"]
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()[-3000:]
    finally:
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        if container is not None:
            container.dispose()
        server.stop()
