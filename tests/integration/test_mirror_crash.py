"""A worker process killed with SIGKILL in the middle of mirroring a file, then another worker started:
the version still completes, every blob is whole and right, and the killed attempt's partial write
never shows under a final key and is gone after the garbage-collection sweep.

Real processes (``modelreg worker``), a real upstream (the HF-compatible hub, throttled so the kill
lands mid-file) and real stores: a local directory with SQLite, and SeaweedFS S3 with PostgreSQL. On
S3 the retried job itself aborts the multipart upload its killed attempt left; a local temporary file
waits for the sweep.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from registry.bootstrap import bootstrap
from registry.db.models import EvalResult, Job, Version, VersionFile
from registry.services import versions
from registry.services.versions import SubmitRequest
from registry.storage import BlobStore, LocalBlobStore, S3BlobStore
from tests.support.registry import drain, make_admin
from tests.support.worker_process import Deployment, kill_worker, start_worker, stop_worker, wait_for

MIB = 1024 * 1024
PART_SIZE = 5 * MIB  # the deployment fixture's part size (tests/integration/conftest.py)
SHARD_SIZE = 24 * MIB
SLOW_RATE = 2 * MIB  # bytes per second while the first worker runs: the shard takes ~12 s


@pytest.fixture
def crash_container(deployment):
    c = bootstrap(deployment.settings)
    yield c
    c.dispose()


def write_safetensors(path: Path, size: int) -> bytes:
    """A valid one-tensor safetensors file of exactly ``size`` bytes of random weights; returns its bytes."""
    header = b""
    for _ in range(3):  # the header's length depends on the data length written in it
        data_len = size - 8 - len(header)
        header = json.dumps({"w": {"dtype": "U8", "shape": [data_len], "data_offsets": [0, data_len]}}).encode()
    header += b" " * (size - 8 - len(header) - data_len)
    content = struct.pack("<Q", len(header)) + header + os.urandom(data_len)
    assert len(content) == size
    path.write_bytes(content)
    return content


def partial_writes(deployment: Deployment, store: BlobStore) -> list[str]:
    """Puts in progress or abandoned: temporary files, or multipart uploads with at least one part."""
    if isinstance(store, LocalBlobStore):
        return [f"{p.name}:{p.stat().st_size}" for p in (store.root / "tmp").iterdir() if p.stat().st_size > 0]
    assert isinstance(store, S3BlobStore)
    client = deployment.s3_client
    found = []
    for upload in client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", ()):
        parts = client.list_parts(Bucket=store.bucket, Key=upload["Key"], UploadId=upload["UploadId"])
        if parts.get("Parts"):
            found.append(f"{upload['Key']}:{upload['UploadId']}")
    return found


def leftovers(deployment: Deployment, store: BlobStore) -> list[str]:
    """Everything a sweep would have to remove: temporary files or keys, and unfinished uploads."""
    if isinstance(store, LocalBlobStore):
        return [p.name for p in (store.root / "tmp").iterdir()]
    client = deployment.s3_client
    uploads = [u["Key"] for u in client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", ())]
    tmp_keys = [o["Key"] for o in client.list_objects_v2(Bucket=store.bucket, Prefix="registry/tmp/")
                .get("Contents", ())]
    return uploads + tmp_keys


def blob_sha256(store: BlobStore, digest: str) -> str:
    hasher = hashlib.sha256()
    for chunk in store.open_range(digest):
        hasher.update(chunk)
    return hasher.hexdigest()


def test_killed_worker_mid_file_then_another_completes_the_version(deployment, crash_container, hub, tmp_path):
    c = crash_container
    c.settings.hf_allowed_endpoints = [hub.url]
    deployment.env["MODELREG_HF_ALLOWED_ENDPOINTS"] = json.dumps([hub.url])
    store = c.blob_store
    shard = write_safetensors(tmp_path / "model.safetensors", SHARD_SIZE)
    config = b'{"architectures": ["CrashTest"], "hidden_size": 16}\n'
    hub.add_repo("org/crash", card_data={"license": "apache-2.0"}, gitattributes=False)
    hub.commit("org/crash", {"config.json": config, "model.safetensors": tmp_path / "model.safetensors"})
    originals = {"config.json": config, "model.safetensors": shard}
    shard_digest = hashlib.sha256(shard).hexdigest()
    hub.throttle(SLOW_RATE)

    admin = make_admin(c)
    with c.session_factory() as session:
        version, _ = versions.submit(session, admin, "acme", "crash",
                                     SubmitRequest(source="hf://org/crash", hf_endpoint=hub.url),
                                     open_source=c.open_source, limits=c.limits(), ports=c.ports)
        version_id = version.id
        assert version.state == "mirroring"

    log = tmp_path / "workers.log"
    first = start_worker(deployment, log)
    try:
        # At least one part (S3) or some bytes (local) of the shard are written: the kill lands mid-file.
        wait_for(lambda: partial_writes(deployment, store), "bytes of the shard being written", first, log)
    finally:
        kill_worker(first)

    # The killed attempt left a partial write behind, and nothing of the shard under its final key.
    assert partial_writes(deployment, store)
    assert not store.exists(shard_digest)
    for info in store.iter_blobs():
        assert blob_sha256(store, info.digest) == info.digest

    hub.throttle(None)
    second = start_worker(deployment, log)
    try:
        def settled() -> str | None:
            with c.session_factory() as session:
                state = session.get(Version, version_id).state
            return state if state in ("awaiting_approval", "failed") else None

        wait_for(settled, "the version to settle", second, log)
    finally:
        stop_worker(second)

    with c.session_factory() as session:
        v = session.get(Version, version_id)
        assert v.state == "awaiting_approval", (v.failure_reason, v.failure_detail, log.read_text()[-3000:])
        mirrored = {f.path: (f.sha256, f.size) for f in v.files}
    assert mirrored == {p: (hashlib.sha256(b).hexdigest(), len(b)) for p, b in originals.items()}

    # Every committed blob is complete and holds exactly the bytes its name says: no torn write. (The
    # eval runner's log of the version is a blob too.)
    with c.session_factory() as session:
        logs = set(session.scalars(select(EvalResult.log_digest).where(EvalResult.log_digest.is_not(None))))
    blobs = {info.digest: info.size for info in store.iter_blobs() if info.digest not in logs}
    assert blobs == {digest: size for digest, size in mirrored.values()}
    for digest in blobs:
        assert blob_sha256(store, digest) == digest

    if deployment.kind == "s3":
        # The retry aborted the multipart upload its killed attempt left at the shard's final key.
        assert leftovers(deployment, store) == []
    else:
        # A local temporary file names no digest: it stays until the sweep.
        assert len(leftovers(deployment, store)) == 1

    # The garbage-collection sweep removes whatever the killed attempt left, and nothing else.
    store.sweep_incomplete(timedelta(0))
    assert leftovers(deployment, store) == []
    assert {info.digest for info in store.iter_blobs()} == set(blobs) | logs


@pytest.mark.s3
@pytest.mark.parametrize("sibling_running", [False, True], ids=["abandoned", "sibling-running"])
def test_mirror_aborts_an_abandoned_upload_of_its_bytes_but_not_a_running_siblings(
    container, s3_server, s3_bucket, hub, tmp_path, sibling_running
):
    """The retry's cleanup aborts uploads at the blob's key only when no other mirror of those bytes runs."""
    container.settings.hf_allowed_endpoints = [hub.url]
    client = s3_server.client()
    store = S3BlobStore(client, s3_bucket, "registry", PART_SIZE)
    container.__dict__["blob_store"] = store
    shard = write_safetensors(tmp_path / "model.safetensors", 2 * PART_SIZE + 1)
    digest = hashlib.sha256(shard).hexdigest()
    for repo in ("org/a", "org/b"):  # the same shard in two models
        hub.add_repo(repo, gitattributes=False)
        hub.commit(repo, {"model.safetensors": tmp_path / "model.safetensors"})
    admin = make_admin(container)
    ids = {}
    for name in ("a", "b"):
        with container.session_factory() as session:
            version, _ = versions.submit(session, admin, "acme", name,
                                         SubmitRequest(source=f"hf://org/{name}", hf_endpoint=hub.url),
                                         open_source=container.open_source, limits=container.limits(),
                                         ports=container.ports)
            ids[name] = version.id
    # An upload at the shard's final key, as a writer left it (killed) or is still sending it.
    key = f"registry/blobs/sha256/{digest[:2]}/{digest}"
    other = client.create_multipart_upload(Bucket=s3_bucket, Key=key)["UploadId"]
    client.upload_part(Bucket=s3_bucket, Key=key, UploadId=other, PartNumber=1, Body=shard[:PART_SIZE])
    with container.session_factory() as session:
        b_file = session.scalars(select(VersionFile.id).where(VersionFile.version_id == ids["b"])).one()
        # Model b's mirror job is held by another (live) worker, or it is simply not running yet.
        state = "running" if sibling_running else "failed"
        session.execute(update(Job).where(Job.idempotency_key == f"mirror_file:{b_file}")
                        .values(state=state, lease_expires_at=None))
        session.commit()

    drain(container)

    with container.session_factory() as session:
        assert session.get(Version, ids["a"]).state == "awaiting_approval"
        assert session.get(VersionFile, b_file).sha256 is None
    assert blob_sha256(store, digest) == digest
    assert store.unfinished_uploads(digest) == ([other] if sibling_running else [])

