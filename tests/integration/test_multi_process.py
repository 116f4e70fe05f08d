"""API replicas and workers are stateless: two `modelreg serve` and three `modelreg worker` processes on one
PostgreSQL and one SeaweedFS bucket, as deploy/kubernetes/ runs them, take one workload and finish each
version exactly once.

The schema comes from `modelreg migrate` first (the migration Job); both API replicas then start at the
same time, as a Deployment's pods do. Versions are submitted through either replica and followed through
the other; workers share the queue, and one console session works on both replicas. Afterwards every
job ran once to completion, each version's stage transitions are each one audit event, no scan or eval
was recorded twice, the audit chain is intact, and both replicas report the same database series on
/metrics.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import time
from collections import Counter

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from registry import audit
from registry.db.models import AuditEvent, AuditHead, EvalResult, Job, LogHead, Model, ScanResult, Version
from tests.support import db as dbsupport
from tests.support.console import csrf_of
from tests.support.server import MODELREG, Server, free_port
from tests.support.tiny_model import tiny_model_files
from tests.support.worker_process import Deployment, start_worker, stop_worker

pytestmark = [pytest.mark.postgres, pytest.mark.s3, pytest.mark.slow]

VERSIONS = 8
TENANT = "acme"
DONE = {"awaiting_approval", "approved"}
DEADLINE_SECONDS = 240


@pytest.fixture
def shared_env(pg_url, s3_server, s3_bucket, signing_key_pem, tmp_path) -> dict[str, str]:
    """What every process of the deployment reads (the ConfigMap and Secret of deploy/kubernetes/)."""
    dbsupport.truncate_all(pg_url)
    return {
        "MODELREG_DATABASE_URL": pg_url,
        "MODELREG_BLOB_STORE_URL": f"s3://{s3_bucket}/registry",
        "MODELREG_S3_ENDPOINT_URL": s3_server.endpoint_url,
        "MODELREG_S3_REGION": s3_server.region,
        "MODELREG_S3_ACCESS_KEY_ID": s3_server.access_key,
        "MODELREG_S3_SECRET_ACCESS_KEY": s3_server.secret_key,
        "MODELREG_SIGNING_KEY_PEM": signing_key_pem,
        "MODELREG_PRESIGN_SECRET": "multi-process-presign-secret-of-32-bytes",
        "MODELREG_CONSOLE_KEY": "5a" * 32,
        "MODELREG_LOCAL_SOURCE_ROOTS": json.dumps([str(tmp_path / "models")]),
        "MODELREG_METRICS_CACHE_SECONDS": "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("MODELREG_")}, **extra}


def _start_replicas(shared_env, tmp_path, count: int) -> list[Server]:
    """Start ``count`` API processes at once (no worker threads: the workers are their own processes)."""
    servers = []
    for i in range(count):
        port = free_port()
        data_dir = tmp_path / f"api-{i}"  # the pod's own scratch directory: nothing shared lives there
        log = tmp_path / f"api-{i}.log"
        process = subprocess.Popen(
            [MODELREG, "serve", "--data-dir", str(data_dir), "--host", "127.0.0.1", "--port", str(port),
             "--workers", "0"], stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=_clean_env(shared_env),
            cwd=tmp_path)
        servers.append(Server(f"http://127.0.0.1:{port}", data_dir, process, log))
    deadline = time.monotonic() + 90
    for server in servers:
        while True:
            assert server.process.poll() is None, f"serve exited: {server.log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"serve not ready: {server.log.read_text()[-3000:]}"
            try:
                if httpx.get(server.url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
    return servers


def _start_worker(shared_env: dict[str, str], log) -> subprocess.Popen:
    return start_worker(Deployment("pg-s3", None, shared_env), log)


def _admin_token(servers: list[Server]) -> str:
    """One replica created the first administrator; its token file is in that replica's directory."""
    found = [s.admin_token for s in servers if (s.data_dir / "admin-token").exists()]
    assert len(found) == 1, f"expected one first administrator, found token files in {len(found)} replicas"
    return found[0]


def _database_series(server: Server) -> dict[tuple, float]:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name.startswith(("modelreg_jobs", "modelreg_versions", "modelreg_mirrored",
                                  "modelreg_scan_results", "modelreg_manifests_issued"))}


def test_two_api_replicas_and_three_workers_finish_every_version_once(shared_env, pg_url, tmp_path):
    migrated = subprocess.run([MODELREG, "migrate", "--json"], env=_clean_env(shared_env), capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    servers = _start_replicas(shared_env, tmp_path, 2)
    workers = [_start_worker(shared_env, tmp_path / f"worker-{i}.log") for i in range(3)]
    try:
        token = _admin_token(servers)
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.post(f"{servers[0].url}/v1/tenants", json={"name": TENANT}, headers=auth).status_code == 201
        _check_one_console_session_on_both_replicas(servers, token)

        submitted: list[tuple[str, int]] = []
        for i, server in zip(range(VERSIONS), itertools.cycle(servers)):
            root = tmp_path / "models" / f"m{i}"
            for path, data in tiny_model_files(seed=100 + i).items():
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_bytes(data)
            r = httpx.post(f"{server.url}/v1/models/{TENANT}/m{i}/versions", json={"source": str(root)},
                           headers=auth, timeout=60)
            assert r.status_code == 202, r.text
            submitted.append((f"m{i}", r.json()["version"]))

        # Followed through the other replica than the one that took the submission.
        states: dict[str, str] = {}
        deadline = time.monotonic() + DEADLINE_SECONDS
        while len(states) < VERSIONS:
            for i, (name, number) in enumerate(submitted):
                if name in states:
                    continue
                server = servers[(i + 1) % len(servers)]
                version = httpx.get(f"{server.url}/v1/models/{TENANT}/{name}/versions/{number}", headers=auth,
                                    timeout=30).json()
                if version["state"] in DONE | {"failed", "rejected"}:
                    states[name] = version["state"]
            for w, worker in enumerate(workers):
                assert worker.poll() is None, (tmp_path / f"worker-{w}.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"unfinished after {DEADLINE_SECONDS}s: {states}"
            time.sleep(0.1)
        assert set(states.values()) <= DONE, states
        # A version's last transition queues the log's integration after the version reads done: the
        # workers stay until no job is left to run.
        _wait_for_no_pending_job(pg_url, workers, tmp_path)

        replica_series = [_database_series(s) for s in servers]
        assert replica_series[0] == replica_series[1], "replicas disagree on the database series"
    finally:
        for worker in workers:
            stop_worker(worker)
        for server in servers:
            server.stop()

    engine = create_engine(pg_url)
    try:
        with Session(engine) as session:
            _check_each_job_ran_once(session, _worker_warnings(tmp_path))
            _check_each_transition_is_one_event(session, submitted)
            _check_no_scan_or_eval_twice(session)
            report = audit.verify(session)
            assert report.events > 0
    finally:
        engine.dispose()


def _check_one_console_session_on_both_replicas(servers: list[Server], token: str) -> None:
    """Signed in through replica A's form and B's answer, the session opens pages and signs out on either."""
    a, b = servers[0].url, servers[1].url
    # One cookie jar for both: the replicas share a host, and cookies are not per port.
    with httpx.Client(timeout=30) as browser:
        form = browser.get(f"{a}/ui/sign-in", params={"next": "/ui/approvals"})
        signed_in = browser.post(f"{b}/ui/sign-in", data={"token": token, "csrf": csrf_of(form.text),
                                                          "next": "/ui/approvals"}, follow_redirects=False)
        assert signed_in.status_code == 303, signed_in.text
        for url in (a, b):
            page = browser.get(f"{url}/ui/approvals", follow_redirects=False)
            assert page.status_code == 200, f"{url} refused the console session opened on the other replica"
        signed_out = browser.post(f"{a}/ui/sign-out", data={"csrf": csrf_of(page.text)},
                                  follow_redirects=False)
        assert signed_out.status_code == 303
        assert browser.get(f"{b}/ui/approvals", follow_redirects=False).status_code == 303


def _wait_for_no_pending_job(pg_url: str, workers: list[subprocess.Popen], tmp_path) -> None:
    """Until no job is queued or running and the verifiable log holds and has checkpointed the whole chain.

    A worker's timer (``workers/checkpoints.py``, every few seconds) queues the log's integration after
    the last version reads done: an empty queue alone is not the end of the work, and a replica read
    before the timer's job and the other after it report different job series."""
    engine = create_engine(pg_url)
    try:
        deadline = time.monotonic() + 60
        while True:
            with Session(engine) as session:
                pending = session.scalars(select(Job.kind).where(Job.state.in_(("queued", "running")))).all()
                chain = session.scalar(select(AuditHead.last_event_id)) or 0
                log = session.execute(select(LogHead.size, LogHead.checkpoint_size)).first()
            integrated = log is not None and log.size == chain and log.checkpoint_size == chain
            if not pending and integrated:
                return
            for w, worker in enumerate(workers):
                assert worker.poll() is None, (tmp_path / f"worker-{w}.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"jobs still pending after 60 s: {pending}, chain {chain}, log {log}"
            time.sleep(0.1)
    finally:
        engine.dispose()


def _worker_warnings(tmp_path) -> str:
    """The workers' warnings and errors (a failed attempt's traceback, a lost lease), for a failure message."""
    lines = []
    for log in sorted(tmp_path.glob("worker-*.log")):
        text = log.read_text(errors="replace").splitlines()
        lines += [f"{log.name}: {line}" for i, line in enumerate(text)
                  if " WARNING " in line or " ERROR " in line or (i and " ERROR " in text[i - 1])]
    return "\n".join(lines)[-6000:]


def _check_each_job_ran_once(session: Session, warnings: str = "") -> None:
    jobs = session.scalars(select(Job)).all()
    assert jobs
    # The audit log's integration is one standing job, queued again (attempts back to 0) whenever the log has
    # work, such as a checkpoint falling due: re-armed after the workers' last run, it waits, run by no one.
    unfinished = [(j.kind, j.state, j.attempts, j.last_error) for j in jobs
                  if (j.state != "succeeded" or j.attempts != 1)
                  and (j.kind, j.state, j.attempts) != ("integrate_audit_log", "queued", 0)]
    assert not unfinished, f"jobs that did not run exactly once to completion: {unfinished}\n{warnings}"
    # Each version was sealed by one job, and the work was shared: no single worker took it all.
    seals = Counter(j.payload["version_id"] for j in jobs if j.kind == "seal_version")
    assert sorted(seals.values()) == [1] * VERSIONS, seals
    takers = {j.locked_by for j in jobs}
    assert len(takers) >= 2, f"one worker ran every job: {takers}"


def _check_each_transition_is_one_event(session: Session, submitted: list[tuple[str, int]]) -> None:
    paths = set()
    for name, number in submitted:
        actions = session.scalars(select(AuditEvent.action).where(
            AuditEvent.subject == f"{TENANT}/{name}@{number}").order_by(AuditEvent.id)).all()
        repeated = [a for a, n in Counter(actions).items() if n > 1]
        assert not repeated, f"{name}: a transition recorded twice: {actions}"
        paths.add(tuple(actions))
    # Same inputs, same pipeline: every version took the same path through the states.
    assert len(paths) == 1, paths


def _check_no_scan_or_eval_twice(session: Session) -> None:
    scans = session.execute(select(ScanResult.blob_digest, ScanResult.path, ScanResult.scanner)).all()
    assert scans and len(scans) == len(set(scans))
    evals = session.execute(select(EvalResult.version_id, EvalResult.suite, EvalResult.status)).all()
    assert len(evals) == len({(v, s) for v, s, _ in evals})
    assert {status for _, _, status in evals} <= {"completed"}, evals
    versions = session.execute(select(Version.id).join(Model)).all()
    assert len(versions) == VERSIONS
