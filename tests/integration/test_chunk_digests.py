"""Chunk digests end to end, on SQLite and PostgreSQL (and the local store and SeaweedFS where bytes move):
recorded while mirroring and uploading (equal to a re-read of the stored blob, no job needed), signed by
root in the release, fetched beside it and checked by the node's client; backfilled by a job for blobs
stored before, and never for damaged bytes.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import os

import numpy as np
import pytest
from fastapi.testclient import TestClient
from safetensors.numpy import save
from sqlalchemy import delete, func, select

from api.app import create_app
from registry.client.api import RegistryApi
from registry.db.models import BlobChunks, Job, Version
from registry.domain.chunks import CHUNK_SIZE, ChunkHasher
from registry.domain.errors import ChunkMismatchError, ChunksNotRecordedError, SignatureError
from registry.domain.files import FileEntry
from registry.jobs import JobKind
from registry.node.chunks import fetch_chunk_list, load_chunk_list, verify_chunk
from registry.services import chunks, versions
from registry.signing.release import verify_release
from registry.signing.trust_root import parse_root
from tests.support.live_app import serve_in_thread
from tests.support.registry import drain, make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version
from tests.support.tiny_model import tiny_model_files

T, M = "acme", "llm"
BIG = "extra/big.safetensors"


def big_safetensors() -> bytes:
    """A valid safetensors file of two whole chunks and a partial third."""
    data = save({"big": np.arange((2 * CHUNK_SIZE) // 4 + 1000, dtype=np.float32)})
    assert len(data) > 2 * CHUNK_SIZE and len(data) % CHUNK_SIZE
    return data


def model_files() -> dict[str, bytes]:
    return {**tiny_model_files(1), BIG: big_safetensors()}


def reread(blob_store, digest: str) -> bytes:
    """The chunk list of a stored blob the slow way: read it all, slice, hash."""
    data = b"".join(blob_store.open_range(digest))
    return b"".join(hashlib.sha256(data[i:i + CHUNK_SIZE]).digest() for i in range(0, len(data), CHUNK_SIZE))


def stored_lists(container) -> dict[str, tuple[int, bytes]]:
    with container.session_factory() as session:
        return {r.digest: (r.chunk_size, r.digests) for r in session.scalars(select(BlobChunks))}


def chunk_jobs(container) -> int:
    with container.session_factory() as session:
        return session.scalar(select(func.count()).select_from(Job).where(Job.kind == JobKind.RECORD_CHUNKS.value))


def version_files(container, number: int = 1) -> dict[str, str]:
    with container.session_factory() as session:
        version = session.scalar(select(Version).where(Version.number == number))
        return {f.path: f.sha256 for f in version.files}


def test_a_mirror_records_every_files_chunks_in_its_one_pass(store_container, tmp_path):
    container = store_container
    admin = make_admin(container, T)
    awaiting_version(container, admin, tmp_path / "m", T, M, files=model_files())
    files = version_files(container)
    lists = stored_lists(container)
    assert set(lists) == set(files.values())
    for path, digest in files.items():
        assert lists[digest] == (CHUNK_SIZE, reread(container.blob_store, digest)), path
    assert len(lists[files[BIG]][1]) == 3 * 32
    # Nothing was read a second time: no job had to record a list.
    assert chunk_jobs(container) == 0


def test_an_upload_records_the_chunks_of_what_it_read_and_a_second_tenant_proves_the_same_bytes(store_container):
    container = store_container
    admin = make_admin(container, T)
    make_admin(container, "beta")
    data = os.urandom(CHUNK_SIZE + 1)  # one whole chunk and one byte
    digest = hashlib.sha256(data).hexdigest()
    with container.session_factory() as session:
        assert versions.upload_blob(session, admin, T, digest, io.BytesIO(data), len(data),
                                    blob_store=container.blob_store)
    assert stored_lists(container)[digest] == (CHUNK_SIZE, reread(container.blob_store, digest))
    # Another tenant's upload of the stored bytes is read in full (possession), and the list stays right.
    with container.session_factory() as session:
        session.execute(delete(BlobChunks))
        session.commit()
        pieces = (data[i:i + 4096] for i in range(0, len(data), 4096))
        assert versions.upload_blob(session, admin, "beta", digest, pieces, None, blob_store=container.blob_store)
    assert stored_lists(container)[digest] == (CHUNK_SIZE, reread(container.blob_store, digest))
    # An empty blob has the empty list.
    with container.session_factory() as session:
        empty = hashlib.sha256(b"").hexdigest()
        versions.upload_blob(session, admin, T, empty, io.BytesIO(b""), 0, blob_store=container.blob_store)
    assert stored_lists(container)[empty] == (CHUNK_SIZE, b"")


@pytest.fixture
def released(container, tmp_path):
    """acme/llm@1 approved from model_files(); a node's token; the app under a test client."""
    admin = make_admin(container, T)
    awaiting_version(container, admin, tmp_path / "m", T, M, files=model_files())
    approve_standin(container, T, M, 1)
    node = role_token(container, "node-1", T, "node")
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        yield client, {"Authorization": f"Bearer {node}"}


def manifest(client, auth):
    r = client.get(f"/v1/models/{T}/{M}/manifest", params={"ref": "1"}, headers=auth)
    assert r.status_code == 200, r.text
    return r.json()


def verified(client, body):
    root = parse_root(client.get("/v1/trust-root").json())
    return verify_release(body["envelope"], root, now=dt.datetime.now(dt.timezone.utc), model=f"{T}/{M}", ref="1")


def chunk_list(client, auth, digest: str):
    return client.get(f"/v1/models/{T}/{M}/versions/1/chunks/{digest}", headers=auth)


def test_the_release_signs_each_files_chunk_root_and_a_node_checks_every_chunk_with_it(released, container):
    client, auth = released
    body = manifest(client, auth)
    release = verified(client, body)
    lists = stored_lists(container)
    assert set(release.payload["chunks"]) == {f.path for f in release.files}
    for entry in release.files:
        assert (entry.chunk_size, entry.chunk_root) == (CHUNK_SIZE, hashlib.sha256(lists[entry.sha256][1]).hexdigest())
        answer = chunk_list(client, auth, entry.sha256)
        assert answer.status_code == 200 and answer.headers["content-type"] == "application/octet-stream"
        assert answer.headers["x-chunk-size"] == str(CHUNK_SIZE)
        chunked = load_chunk_list(entry, answer.content)
        data = client.get(body["transport"][entry.path]).content
        for index in range(chunked.count):
            start, end = chunked.span(index)
            verify_chunk(chunked, index, data[start:end])
    # A flipped byte in the big file's last, partial chunk is refused.
    big = next(f for f in release.files if f.path == BIG)
    chunked = load_chunk_list(big, chunk_list(client, auth, big.sha256).content)
    data = bytearray(client.get(body["transport"][BIG]).content)
    start, end = chunked.span(2)
    data[end - 1] ^= 0x01
    with pytest.raises(ChunkMismatchError):
        verify_chunk(chunked, 2, bytes(data[start:end]))


def test_a_tampered_chunk_root_or_list_is_refused(released, container):
    import base64
    import json

    client, auth = released
    body = manifest(client, auth)
    release = verified(client, body)
    big = next(f for f in release.files if f.path == BIG)
    # The root is under the signature: swapping it breaks the release.
    doc = json.loads(base64.b64decode(body["envelope"]["payload"]))
    forged = bytearray(stored_lists(container)[big.sha256][1])
    forged[0] ^= 1
    doc["chunks"][BIG]["root"] = hashlib.sha256(forged).hexdigest()
    body["envelope"]["payload"] = base64.b64encode(json.dumps(doc).encode()).decode()
    with pytest.raises(SignatureError):
        verified(client, body)
    # A list altered in the database (or on the wire) does not match the signed root.
    with container.session_factory() as session:
        session.get(BlobChunks, big.sha256).digests = bytes(forged)
        session.commit()
    with pytest.raises(ChunkMismatchError):
        load_chunk_list(big, chunk_list(client, auth, big.sha256).content)


def test_the_node_client_fetches_and_checks_a_list_over_http(released, container):
    client, auth = released
    release = verified(client, manifest(client, auth))
    big = next(f for f in release.files if f.path == BIG)
    with serve_in_thread(create_app(container)) as url:
        api = RegistryApi(url, auth["Authorization"].removeprefix("Bearer "))
        try:
            chunked = fetch_chunk_list(api, T, M, 1, big)
            assert chunked.count == 3
            with container.session_factory() as session:
                session.execute(delete(BlobChunks).where(BlobChunks.digest == big.sha256))
                session.commit()
            with pytest.raises(ChunksNotRecordedError):
                fetch_chunk_list(api, T, M, 1, big)
        finally:
            api.close()


def test_a_version_sealed_before_gets_its_lists_from_the_backfill_and_releases_omit_them_until_then(
        released, container):
    client, auth = released
    files = version_files(container)
    with container.session_factory() as session:
        session.execute(delete(BlobChunks))
        session.commit()
    container.release_cache.versions.clear()  # a process started after the upgrade
    body = manifest(client, auth)
    assert "chunks" not in verified(client, body).payload
    assert all(f.chunk_root is None for f in verified(client, body).files)
    r = chunk_list(client, auth, files[BIG])
    assert r.status_code == 404 and r.json()["type"].endswith("/chunks-not-recorded")

    assert chunks.queue_backfill(container.session_factory, container.ports) == len(set(files.values()))
    assert chunks.queue_backfill(container.session_factory, container.ports) == len(set(files.values()))  # once
    drain(container)
    lists = stored_lists(container)
    for digest in files.values():
        assert lists[digest] == (CHUNK_SIZE, reread(container.blob_store, digest))
    assert chunks.queue_backfill(container.session_factory, container.ports) == 0
    # The cached release parts of the version are read again: the next release has every root.
    release = verified(client, manifest(client, auth))
    assert {f.path: f.chunk_root for f in release.files} == {
        p: hashlib.sha256(lists[d][1]).hexdigest() for p, d in files.items()}


def test_the_backfill_job_records_nothing_for_damaged_bytes(released, container):
    files = version_files(container)
    digest = files[BIG]
    with container.session_factory() as session:
        session.execute(delete(BlobChunks).where(BlobChunks.digest == digest))
        session.commit()
    path = container.blob_store._path(digest)
    path.chmod(0o644)
    damaged = bytearray(path.read_bytes())
    damaged[CHUNK_SIZE + 7] ^= 0x01
    path.write_bytes(bytes(damaged))
    with pytest.raises(Exception) as caught:
        chunks.record_blob_chunks(container.session_factory, digest, ports=container.ports)
    assert caught.value.__class__.__name__ == "DigestMismatchError"
    assert digest not in stored_lists(container)


def test_sealing_queues_the_lists_a_put_could_not_record(container):
    """An owner's upload of bytes it already stored reads nothing: sealing has a job record the list."""
    admin = make_admin(container, T)
    data = os.urandom(1000)
    digest = hashlib.sha256(data).hexdigest()
    with container.session_factory() as session:
        versions.upload_blob(session, admin, T, digest, io.BytesIO(data), len(data), blob_store=container.blob_store)
        session.execute(delete(BlobChunks))
        session.commit()
        versions.submit_uploaded(session, admin, T, M, [FileEntry("data.txt", len(data), digest)], label="upload",
                                 limits=container.limits(), ports=container.ports)
    drain(container)
    assert chunk_jobs(container) == 1
    assert stored_lists(container)[digest] == (CHUNK_SIZE, reread(container.blob_store, digest))


def test_the_hasher_in_the_tap_sees_a_file_object_as_the_store_reads_it(container):
    hasher = ChunkHasher()
    data = os.urandom(3 * 1024 * 1024 + 5)
    result = container.blob_store.put(chunks.tap(io.BytesIO(data), hasher), expected_size=len(data))
    assert chunks.chunks_of_put(hasher, result).digests == reread(container.blob_store, result.digest)
    # The blob is stored now: a put of it reads nothing, and there is no list to take from it.
    again = ChunkHasher()
    result = container.blob_store.put(chunks.tap(io.BytesIO(data), again), expected_sha256=result.digest)
    assert chunks.chunks_of_put(again, result) is None
