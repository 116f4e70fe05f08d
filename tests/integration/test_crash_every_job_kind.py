"""The whole state machine, with a worker process killed in the middle of each job kind.

A version is driven through every state before a decision: ``submitted`` (its upstream was unreachable
at submission), ``mirroring``, ``sealed``, ``scanning``, ``evaluating``, ``awaiting_approval``, and, for a model holding
an unsafe file, ``failed``. For each job kind (``resolve_version``, ``mirror_file``, ``seal_version``,
``scan_blob``, ``run_eval``; ``record_chunks`` after them) the jobs before it run in this process; then a
``modelreg worker`` process claims a job of that kind while the test holds the version's row lock, so the worker does
the job's work and stops at the transaction that would record it. The test kills it there (SIGKILL: no handler runs,
nothing commits), lets go of the lock and starts another worker: the version still completes, and every step
of its audit trail happens exactly once.

PostgreSQL only: a row lock is what stops the worker mid-job (SQLite has one write lock, which would stop
the claim itself).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import delete, select, text

from registry.bootstrap import bootstrap
from registry.db.models import AuditEvent, BlobChunks, Job, Version
from registry.db.session import make_engine
from registry.domain.chunks import ChunkHasher
from registry.jobs import SUCCEEDED, JobKind
from registry.services import chunks, versions
from registry.services.versions import SubmitRequest
from registry.settings import Settings
from tests.support import db as dbsupport
from tests.support import scan_samples
from tests.support.registry import make_admin
from tests.support.tiny_model import tiny_model_files
from tests.support.worker_process import Deployment, kill_worker, start_worker, stop_worker, wait_for
from workers.handler_registry import HandlerRegistry
from workers.handlers import build_handlers
from workers.loop import Worker

pytestmark = pytest.mark.postgres

ORDER = [JobKind.RESOLVE_VERSION, JobKind.MIRROR_FILE, JobKind.SEAL_VERSION, JobKind.SCAN_BLOB, JobKind.RUN_EVAL]
# The tiny model's safetensors weights get the shipped `sanity` suite: one run_eval job.
TRAIL = ["version.submitted", "version.resolved", "version.sealed", "version.scanning", "version.scanned",
         "version.eval.recorded", "version.evaluated"]
FAILED_TRAIL = [*TRAIL[:4], "version.failed"]


@pytest.fixture
def deployment(pg_url, tmp_path, signing_key_pem, hub) -> Deployment:
    dbsupport.truncate_all(pg_url)
    env = {
        "MODELREG_DATA_DIR": str(tmp_path / "data"),
        "MODELREG_DATABASE_URL": pg_url,
        "MODELREG_BLOB_STORE_URL": (tmp_path / "blobs").as_uri(),
        "MODELREG_SIGNING_KEY_PEM": signing_key_pem,
        "MODELREG_PRESIGN_SECRET": "test-presign-secret-0123456789ab",
        "MODELREG_HF_ALLOWED_ENDPOINTS": json.dumps([hub.url]),
        # A killed worker's job is claimed again once its lease runs out: make that quick.
        "MODELREG_JOB_LEASE_SECONDS": "2",
        "MODELREG_JOB_BACKOFF_BASE_SECONDS": "0.1",
        "MODELREG_JOB_BACKOFF_MAX_SECONDS": "0.5",
    }
    settings = Settings(data_dir=tmp_path / "data", database_url=pg_url,
                        blob_store_url=env["MODELREG_BLOB_STORE_URL"], signing_key_pem=SecretStr(signing_key_pem),
                        presign_secret=SecretStr("test-presign-secret-0123456789ab"),
                        hf_allowed_endpoints=[hub.url],
                        job_lease_seconds=2)
    return Deployment("pg-local", settings, env)


@pytest.fixture
def container(deployment):
    c = bootstrap(deployment.settings)
    yield c
    c.dispose()


def _submit_while_upstream_is_down(container, hub, files: dict[str, bytes]) -> int:
    """A version left ``submitted``, with a ``resolve_version`` job: the hub was down at submission."""
    hub.add_repo("org/m", gitattributes=False)
    hub.commit("org/m", files)
    admin = make_admin(container)
    hub.unreachable()
    with container.session_factory() as session:
        version, _ = versions.submit(session, admin, "acme", "m",
                                     SubmitRequest(source="hf://org/m", hf_endpoint=hub.url),
                                     open_source=container.open_source, limits=container.limits(),
                                     ports=container.ports)
        assert version.state == "submitted"
        version_id = version.id
    hub.heal()
    return version_id


def _run_in_process(container, kinds: list[JobKind]) -> None:
    """Run every job of these kinds (and only these) in this process until none is left."""
    handlers = build_handlers()
    only = HandlerRegistry([handlers.get(k.value) for k in kinds])
    worker = Worker(container, only, worker_id="test-before")
    while worker.run_once():
        pass


def _waiting_on_a_lock(container) -> bool:
    with container.engine.connect() as conn:
        return bool(conn.scalar(text("SELECT count(*) FROM pg_stat_activity"
                                     " WHERE datname = current_database() AND wait_event_type = 'Lock'")))


def _trail(container, version_id: int) -> list[str]:
    with container.session_factory() as session:
        version = session.get(Version, version_id)
        ref = f"acme/{version.model.name}@{version.number}"
        query = select(AuditEvent.action).where(AuditEvent.subject == ref).order_by(AuditEvent.id)
        return list(session.scalars(query))


def _kill_mid_job_then_complete(container, deployment, version_id: int, kind: JobKind, log: Path) -> str:
    """Kill a worker process mid-way through a job of ``kind``; another worker finishes. Returns the end state."""
    with container.session_factory() as session:
        queued = select(Job.id).where(Job.kind == kind.value, Job.state == "queued").limit(1)
        assert session.scalar(queued) is not None, kind
    holder = make_engine(deployment.settings.database_url)
    try:
        with holder.connect() as conn:
            conn.execute(text("SELECT id FROM versions WHERE id = :id FOR UPDATE"), {"id": version_id})
            first = start_worker(deployment, log)
            try:
                wait_for(lambda: _running(container, kind) and _waiting_on_a_lock(container),
                         f"a worker mid-way through {kind.value}", first, log)
            finally:
                kill_worker(first)
            conn.rollback()
    finally:
        holder.dispose()
    second = start_worker(deployment, log)
    try:
        def settled() -> str | None:
            with container.session_factory() as session:
                state = session.get(Version, version_id).state
                busy = session.scalar(select(Job.id).where(Job.state != SUCCEEDED).limit(1))
            return state if state in ("awaiting_approval", "failed") and busy is None else None

        return wait_for(settled, "the version to settle and every job to finish", second, log)
    finally:
        stop_worker(second)


def _running(container, kind: JobKind) -> bool:
    with container.session_factory() as session:
        running = select(Job.id).where(Job.kind == kind.value, Job.state == "running").limit(1)
        return session.scalar(running) is not None


def _killed_attempts(container, kind: JobKind) -> list[int]:
    with container.session_factory() as session:
        return sorted(session.scalars(select(Job.attempts).where(Job.kind == kind.value)))


@pytest.mark.parametrize("kind", ORDER, ids=lambda k: k.value)
def test_a_worker_killed_mid_job_and_the_version_completes_once(kind, container, deployment, hub, tmp_path):
    version_id = _submit_while_upstream_is_down(container, hub, tiny_model_files(3))
    _run_in_process(container, ORDER[:ORDER.index(kind)])

    state = _kill_mid_job_then_complete(container, deployment, version_id, kind, tmp_path / "workers.log")

    assert state == "awaiting_approval", (tmp_path / "workers.log").read_text()[-3000:]
    # Every state of the way, each entered once: the killed attempt recorded nothing.
    assert _trail(container, version_id) == TRAIL
    # The killed attempt counted: some job of this kind ran twice.
    assert max(_killed_attempts(container, kind)) >= 2


def test_an_unsafe_model_fails_once_after_a_worker_is_killed_mid_scan(container, deployment, hub, tmp_path):
    files = tiny_model_files(4)
    files["pytorch_model.bin"] = scan_samples.torch_zip_payload_in_data_pkl()
    version_id = _submit_while_upstream_is_down(container, hub, files)
    _run_in_process(container, ORDER[:ORDER.index(JobKind.SCAN_BLOB)])

    log = tmp_path / "workers.log"
    state = _kill_mid_job_then_complete(container, deployment, version_id, JobKind.SCAN_BLOB, log)

    assert state == "failed"
    with container.session_factory() as session:
        assert session.get(Version, version_id).failure_reason == "unsafe_file"
    assert _trail(container, version_id) == FAILED_TRAIL


def test_a_worker_killed_mid_record_chunks_and_the_list_is_recorded_once(container, deployment, hub, tmp_path):
    """A backfill job stopped at its write (the test holds the blob row, which the list's foreign key
    needs), killed, then run by another worker: the list is recorded once, and it is the blob's."""
    version_id = _submit_while_upstream_is_down(container, hub, tiny_model_files(5))
    _run_in_process(container, ORDER)
    with container.session_factory() as session:
        digest = next(f.sha256 for f in session.get(Version, version_id).files if f.path.endswith(".safetensors"))
        session.execute(delete(BlobChunks).where(BlobChunks.digest == digest))
        session.commit()
    assert chunks.queue_backfill(container.session_factory, container.ports) == 1
    log = tmp_path / "workers.log"
    holder = make_engine(deployment.settings.database_url)
    try:
        with holder.connect() as conn:
            conn.execute(text("SELECT digest FROM blobs WHERE digest = :d FOR UPDATE"), {"d": digest})
            first = start_worker(deployment, log)
            try:
                wait_for(lambda: _running(container, JobKind.RECORD_CHUNKS) and _waiting_on_a_lock(container),
                         "a worker mid-way through record_chunks", first, log)
            finally:
                kill_worker(first)
            conn.rollback()
    finally:
        holder.dispose()
    second = start_worker(deployment, log)
    try:
        def recorded() -> bytes | None:
            with container.session_factory() as session:
                busy = session.scalar(select(Job.id).where(Job.state != SUCCEEDED).limit(1))
                row = session.get(BlobChunks, digest)
                return row.digests if row is not None and busy is None else None

        digests = wait_for(recorded, "the list to be recorded and every job to finish", second, log)
    finally:
        stop_worker(second)
    data = b"".join(container.blob_store.open_range(digest))
    assert digests == chunk_list_of(data)
    assert max(_killed_attempts(container, JobKind.RECORD_CHUNKS)) >= 2


def chunk_list_of(data: bytes) -> bytes:
    hasher = ChunkHasher()
    hasher.update(data)
    return hasher.finish().digests


def test_every_job_kind_is_crashed_here():
    # deliver_webhook is killed mid-delivery in tests/e2e/test_webhooks_worker.py; build_oci_artifacts runs
    # after the decision (no state of the version moves) and stores in one transaction, run twice and after a
    # failure in tests/integration/test_oci_store.py; record_chunks is killed mid-job above; integrate_audit_log
    # writes each batch in one transaction (a kill loses the open one) and is rerun in
    # tests/integration/test_audit_log_tree.py.
    assert set(ORDER) | {JobKind.DELIVER_WEBHOOK, JobKind.BUILD_OCI_ARTIFACTS, JobKind.RECORD_CHUNKS,
                         JobKind.INTEGRATE_AUDIT_LOG} == set(JobKind)
