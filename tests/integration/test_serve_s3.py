"""`modelreg serve-s3` against the real API (SQLite and PostgreSQL), with boto3 as the loaders' S3 client:
ListObjectsV2, HeadObject and ranged GetObject over a verified release, each chunk checked against the
digest the release signs and kept in the node cache; S3 XML errors; SigV4 refusals; loopback only.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import re
import threading
from collections.abc import Iterator

import boto3
import httpx
import numpy as np
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from safetensors.numpy import save

from api.app import create_app
from registry.bootstrap import ensure_trust_root
from registry.client.api import RegistryApi
from registry.client.cache import NodeCache
from registry.client.serve_s3 import ChunkSource, S3Server
from registry.domain.chunks import CHUNK_SIZE
from registry.domain.errors import InvalidInputError
from tests.support.live_app import serve_in_thread
from tests.support.registry import make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version
from tests.support.tiny_model import tiny_model_files
from tests.support.waiting import wait_until

T, M = "acme", "llm"
BIG = "extra/big.safetensors"
KEY, SECRET = "node-key", "node-secret-0123456789"


def model_files() -> dict[str, bytes]:
    big = save({"big": np.arange((2 * CHUNK_SIZE) // 4 + 1000, dtype=np.float32)})
    assert len(big) > 2 * CHUNK_SIZE
    return {**tiny_model_files(1), BIG: big}


def s3_client(url: str, key: str = KEY, secret: str = SECRET):
    return boto3.client("s3", endpoint_url=url, aws_access_key_id=key, aws_secret_access_key=secret,
                        region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


@pytest.fixture
def endpoint(store_container, tmp_path):
    """acme/llm@1 approved; serve-s3 in a thread in front of the live API, with a node cache."""
    container = store_container
    admin = make_admin(container, T)
    files = model_files()
    awaiting_version(container, admin, tmp_path / "m", T, M, files=files)
    approve_standin(container, T, M, 1)
    ensure_trust_root(container)  # as `modelreg serve` does at start: the newest root names the log
    token = role_token(container, "node-1", T, "node")
    with serve_in_thread(create_app(container)) as url:
        root = tmp_path / "root.json"
        root.write_text(httpx.get(f"{url}/v1/trust-root").text)
        with RegistryApi(url, token) as api:
            cache = NodeCache(tmp_path / "cache")
            source = ChunkSource(api, cache, max_chunks=4, trust_root_file=root)
            with running(source) as s3_url:
                yield {"url": s3_url, "files": files, "cache": cache, "source": source,
                       "container": container, "admin": admin, "tmp_path": tmp_path}


@contextlib.contextmanager
def running(source: ChunkSource) -> Iterator[str]:
    """serve-s3 over ``source`` in a thread, on a free loopback port: its URL."""
    server = S3Server("127.0.0.1", 0, source, {KEY: SECRET})
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def signed_get(url: str, target: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """GET ``url + target`` as sent (percent-encoded, as boto3 sends it), signed with SigV4 by botocore at
    its clock (``botocore.auth.get_current_datetime``): for what boto3's own calls will not send."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method="GET", url=url + target, headers=dict(headers or {}))
    S3SigV4Auth(Credentials(KEY, SECRET), "s3", "us-east-1").add_auth(request)
    return httpx.get(url + target, headers=dict(request.headers.items()))


def s3_error_code(response: httpx.Response) -> str:
    match = re.search(rb"<Code>([^<]*)</Code>", response.content)
    assert match is not None and response.headers["content-type"] == "application/xml", response.content[:300]
    return match.group(1).decode()


def flip_stored_byte(store, digest: str, offset: int) -> None:
    """Flip one byte of a blob where the store keeps it (behind the store's back, as a bad disk would)."""
    from registry.storage import S3BlobStore

    if isinstance(store, S3BlobStore):
        key = store._blob_key(digest)
        data = bytearray(store.client.get_object(Bucket=store.bucket, Key=key)["Body"].read())
        data[offset] ^= 0x01
        store.client.put_object(Bucket=store.bucket, Key=key, Body=bytes(data))
    else:
        path = store._path(digest)
        path.chmod(0o644)
        data = bytearray(path.read_bytes())
        data[offset] ^= 0x01
        path.write_bytes(bytes(data))


def _cached_chunks(cache: NodeCache) -> set[str]:
    return {b.digest for b in cache.blobs() if b.tenant == T}


def _wait_cached(cache: NodeCache, digests: set[str]) -> None:
    """A fetched chunk goes into the node cache once its bytes went out: it is there moments later."""
    wait_until(lambda: digests <= _cached_chunks(cache), f"the chunks {sorted(digests)} in the node cache")


def _chunk_digests(data: bytes) -> set[str]:
    return {hashlib.sha256(data[i:i + CHUNK_SIZE]).hexdigest() for i in range(0, len(data), CHUNK_SIZE)}


def test_list_head_and_ranged_gets_answer_the_releases_bytes_and_cache_the_chunks(endpoint):
    s3, files = s3_client(endpoint["url"]), endpoint["files"]
    listed = s3.list_objects_v2(Bucket=T, Prefix=f"{M}@1/")
    assert {o["Key"]: o["Size"] for o in listed["Contents"]} == {f"{M}@1/{p}": len(d) for p, d in files.items()}
    paged = s3.list_objects_v2(Bucket=T, Prefix=f"{M}@1/", MaxKeys=1)
    assert paged["IsTruncated"] and paged["KeyCount"] == 1
    rest = s3.list_objects_v2(Bucket=T, Prefix=f"{M}@1/", ContinuationToken=paged["NextContinuationToken"])
    assert len(rest["Contents"]) == len(files) - 1
    big = files[BIG]
    head = s3.head_object(Bucket=T, Key=f"{M}@1/{BIG}")
    assert head["ContentLength"] == len(big)
    # A range across the first chunk boundary, one inside the last chunk, a suffix range, and the whole file.
    for first, last in ((CHUNK_SIZE - 10, CHUNK_SIZE + 9), (2 * CHUNK_SIZE + 5, len(big) - 1), (0, 0)):
        got = s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range=f"bytes={first}-{last}")
        assert got["ContentRange"] == f"bytes {first}-{last}/{len(big)}"
        assert got["Body"].read() == big[first:last + 1]
    assert s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=-100")["Body"].read() == big[-100:]
    assert s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}")["Body"].read() == big
    _wait_cached(endpoint["cache"], _chunk_digests(big))
    # The form s3://<tenant>/<model>@<ref>/<path> is the same bucket and key.
    small = next(p for p in files if p != BIG)
    assert s3.get_object(Bucket=T, Key=f"{M}@1/{small}")["Body"].read() == files[small]


def test_parallel_ranges_over_one_chunk_fetch_it_once(endpoint, monkeypatch):
    source, big = endpoint["source"], endpoint["files"][BIG]
    reads = []
    original = source.api.read_range_into

    def counting(url, start, end, total, into, advance):
        reads.append((start, end))
        return original(url, start, end, total, into, advance)

    monkeypatch.setattr(source.api, "read_range_into", counting)
    results: list[bytes] = []

    def get(i: int) -> None:
        s3 = s3_client(endpoint["url"])
        r = s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range=f"bytes={i * 1000}-{i * 1000 + 999}")
        results.append(r["Body"].read())

    threads = [threading.Thread(target=get, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == sorted(big[i * 1000:i * 1000 + 1000] for i in range(8))
    assert reads == [(0, CHUNK_SIZE)]


def test_a_chunk_asked_for_again_is_served_from_memory_checked_once(endpoint, monkeypatch):
    """A loader's range that straddles a chunk boundary asks for the chunk twice: the second time its bytes
    come from the idle buffer that holds them, checked when they were read, neither re-read nor re-hashed."""
    from registry.client import serve_s3

    s3, big = s3_client(endpoint["url"]), endpoint["files"][BIG]
    checked = []
    verify = serve_s3.verify_chunk
    monkeypatch.setattr(serve_s3, "verify_chunk", lambda f, i, data: (checked.append(i), verify(f, i, data)))
    for first, last in ((CHUNK_SIZE + 5, CHUNK_SIZE + 99), (CHUNK_SIZE + 100, 2 * CHUNK_SIZE - 1)):
        got = s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range=f"bytes={first}-{last}")
        assert got["Body"].read() == big[first:last + 1]
    assert checked == [1]


def test_chunk_buffers_are_bounded_reused_and_all_given_back(endpoint):
    """Whatever is read, at most max_chunks buffers exist; each is idle again once its reads are done."""
    s3, files, source = s3_client(endpoint["url"]), endpoint["files"], endpoint["source"]
    for _ in range(2):
        for path, data in files.items():
            assert s3.get_object(Bucket=T, Key=f"{M}@1/{path}")["Body"].read() == data
    results: list[bool] = []

    def get(i: int) -> None:
        first = (i % 3) * CHUNK_SIZE + i
        got = s3_client(endpoint["url"]).get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range=f"bytes={first}-{first + 99}")
        results.append(got["Body"].read() == files[BIG][first:first + 100])

    threads = [threading.Thread(target=get, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 12
    assert len(files) + 2 > source.max_chunks == 4  # more chunks were read than there are buffers
    assert source._buffers == source.max_chunks
    # A handler puts a fetched chunk into the node cache after its write, then gives its buffer back.
    wait_until(lambda: len(source._idle) >= source._buffers, "every buffer given back")
    assert len(source._idle) == source._buffers and all(b.users == 0 for b in source._idle)


def test_a_file_listed_with_another_chunk_size_never_gets_the_others_chunk(endpoint):
    """Chunks in memory are named by file, chunk size and index: chunk 1 of the file in 4 MiB chunks is
    not chunk 1 in 8 MiB chunks, though both are in memory at once."""
    import dataclasses

    from registry.client.chunks import load_chunk_list

    s3, big, source = s3_client(endpoint["url"]), endpoint["files"][BIG], endpoint["source"]
    assert s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range=f"bytes={CHUNK_SIZE}-{CHUNK_SIZE + 9}")["Body"].read()
    opened = source.release(T, f"{M}@1")
    half = CHUNK_SIZE // 2
    digests = b"".join(hashlib.sha256(big[i:i + half]).digest() for i in range(0, len(big), half))
    entry = dataclasses.replace(opened.file(BIG), chunk_size=half, chunk_root=hashlib.sha256(digests).hexdigest())
    with source.slots:
        buffer = source.chunk(opened, load_chunk_list(entry, digests), 1)
        try:
            assert bytes(buffer.view(0, buffer.size)) == big[half:CHUNK_SIZE]
        finally:
            source.done(buffer)


def test_a_fetched_chunk_goes_out_before_it_is_written_to_the_node_cache(endpoint, monkeypatch):
    """The node cache's write is on no request's path: the client has the chunk while the write still waits."""
    from registry.client import serve_s3

    s3, big = s3_client(endpoint["url"]), endpoint["files"][BIG]
    writing, go_on = threading.Event(), threading.Event()
    write = serve_s3.write_whole_file

    def slow_disk(path, data):
        writing.set()
        assert go_on.wait(30)
        return write(path, data)

    monkeypatch.setattr(serve_s3, "write_whole_file", slow_disk)
    try:
        got = s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-99")["Body"].read()
        assert got == big[:100] and writing.wait(10)
        assert hashlib.sha256(big[:CHUNK_SIZE]).hexdigest() not in _cached_chunks(endpoint["cache"])
    finally:
        go_on.set()
    _wait_cached(endpoint["cache"], {hashlib.sha256(big[:CHUNK_SIZE]).hexdigest()})


def test_a_chunk_served_while_its_version_was_revoked_is_not_left_in_the_node_cache(endpoint, monkeypatch):
    """The revocation removed the version's chunks while a chunk of it was being written to a client: that
    chunk is not put into the cache after it (it would stay there, a revoked version's bytes on the node)."""
    import socketserver

    from registry.client.revocations import RevocationFollower
    from registry.services import revocations

    source, big = endpoint["source"], endpoint["files"][BIG]
    monkeypatch.setattr(source, "slots", threading.BoundedSemaphore(1))
    writing, go_on = threading.Event(), threading.Event()
    write = socketserver._SocketWriter.write

    def slow_client(self, data):
        if len(data) >= 1000:
            writing.set()
            assert go_on.wait(30)
        return write(self, data)

    monkeypatch.setattr(socketserver._SocketWriter, "write", slow_client)
    got = {}
    reader = threading.Thread(target=lambda: got.update(body=s3_client(endpoint["url"]).get_object(
        Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-9999")["Body"].read()))
    reader.start()
    assert writing.wait(30)
    with endpoint["container"].session_factory() as session:
        revocations.revoke(session, endpoint["admin"], T, M, 1, "bad", clock=endpoint["container"].clock)
    RevocationFollower(source.api, endpoint["cache"], wait=None, on_problem=pytest.fail,
                       on_revoked=lambda r: source.revoke(r.tenant, r.model, r.version)).step()
    go_on.set()
    reader.join(30)
    assert got["body"] == big[:10000]  # verified before the revocation: it was already going out
    assert source.slots.acquire(timeout=10)  # the handler is done with the chunk, the cache write decided
    source.slots.release()
    assert hashlib.sha256(big[:CHUNK_SIZE]).hexdigest() not in _cached_chunks(endpoint["cache"])


def test_a_node_cache_that_cannot_be_read_or_written_still_serves_verified_chunks(endpoint, caplog):
    """A chunk's place in the node cache is taken by something that is no file (a broken disk reads as an
    OSError too): the chunk comes from the registry, checked, and the failure is logged, not served."""
    s3, big, cache = s3_client(endpoint["url"]), endpoint["files"][BIG], endpoint["cache"]
    digest = hashlib.sha256(big[:CHUNK_SIZE]).hexdigest()
    cache.blob_path(T, digest).mkdir(parents=True)
    with caplog.at_level(logging.ERROR, logger="modelreg.serve_s3"):
        for _ in range(2):
            got = s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-99")["Body"].read()
            assert got == big[:100]
        wait_until(lambda: "not kept in the node cache" in caplog.text, "the log of the chunk not kept")
    assert "cannot be read" in caplog.text and "not kept in the node cache" in caplog.text, caplog.text


def test_a_chunk_waiting_on_a_slow_client_keeps_its_slot(endpoint, monkeypatch):
    """max_chunks bounds the chunks held in memory whatever the clients do: a chunk being written to a client
    that does not read keeps its slot until the socket has taken it (it was given back before the write, so
    each connection could hold one chunk more than the bound)."""
    import socketserver

    source, big = endpoint["source"], endpoint["files"][BIG]
    monkeypatch.setattr(source, "slots", threading.BoundedSemaphore(1))
    writing, go_on = threading.Event(), threading.Event()
    write = socketserver._SocketWriter.write

    def slow_client(self, data):  # the body's piece waits; the status line and headers go out
        if len(data) >= CHUNK_SIZE // 2:
            writing.set()
            assert go_on.wait(30)
        return write(self, data)

    monkeypatch.setattr(socketserver._SocketWriter, "write", slow_client)
    got = {}

    def get() -> None:
        r = s3_client(endpoint["url"]).get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range=f"bytes=5-{CHUNK_SIZE - 1}")
        got["body"] = r["Body"].read()

    reader = threading.Thread(target=get)
    reader.start()
    assert writing.wait(30)
    free = source.slots.acquire(blocking=False)
    if free:
        source.slots.release()
    go_on.set()
    reader.join(30)
    assert not free, "the slot was given back while its chunk was still being written"
    assert got["body"] == big[5:CHUNK_SIZE]
    # The client can hold the whole body a moment before the handler's thread gives the slot back.
    assert source.slots.acquire(timeout=10), "the slot was not given back after the write"


def test_a_client_that_stops_reading_is_cut_and_its_slot_given_back(endpoint, monkeypatch):
    """A loader that takes the headers of a whole-file GET and then reads nothing holds a chunk's slot only
    until the handler's write times out (30 s in production, 1 s here): then the connection is cut and the
    slot is free for every other client."""
    from registry.client import serve_s3

    source = endpoint["source"]
    assert serve_s3._Handler.timeout is not None and 0 < serve_s3._Handler.timeout <= 60
    monkeypatch.setattr(source, "slots", threading.BoundedSemaphore(1))
    monkeypatch.setattr(serve_s3._Handler, "timeout", 1)
    body = s3_client(endpoint["url"]).get_object(Bucket=T, Key=f"{M}@1/{BIG}")["Body"]  # never read
    try:
        # The socket's buffers take part of a chunk; then the write waits on the client, and times out.
        assert source.slots.acquire(timeout=20), "a client that reads nothing kept its chunk's slot"
        source.slots.release()
        assert len(source._idle) == source._buffers, "the cut read kept its chunk's buffer"
        got = s3_client(endpoint["url"]).get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-9")
        assert got["Body"].read() == endpoint["files"][BIG][:10]
    finally:
        body.close()


def test_s3_xml_errors_for_unknown_keys_releases_and_ranges(endpoint):
    s3 = s3_client(endpoint["url"])
    with pytest.raises(ClientError) as missing:
        s3.get_object(Bucket=T, Key=f"{M}@1/nothing.bin")
    assert missing.value.response["Error"]["Code"] == "NoSuchKey"
    with pytest.raises(ClientError) as unknown:
        s3.get_object(Bucket=T, Key="nobody@1/model.safetensors")
    assert unknown.value.response["Error"]["Code"] == "NoSuchKey"
    with pytest.raises(ClientError) as bad_range:
        s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range=f"bytes={10 ** 12}-")
    assert bad_range.value.response["Error"]["Code"] == "InvalidRange"


def test_unsigned_wrongly_signed_and_unknown_key_requests_are_refused(endpoint):
    url = endpoint["url"]
    for client, code in ((s3_client(url, secret="not-the-secret"), "SignatureDoesNotMatch"),
                         (s3_client(url, key="someone-else"), "InvalidAccessKeyId")):
        with pytest.raises(ClientError) as refused:
            client.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-9")
        assert refused.value.response["Error"]["Code"] == code
    unsigned = httpx.get(f"{url}/{T}/{M}@1/{BIG}", headers={"Range": "bytes=0-9"})
    assert unsigned.status_code == 403 and b"<Code>AccessDenied</Code>" in unsigned.content
    # A signed request replayed with another range is not the request that was signed.
    s3 = s3_client(url)
    seen = {}
    s3.meta.events.register("before-send.s3.GetObject", lambda request, **kw: seen.update(request.headers))
    s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-9")
    headers = {k: v.decode() if isinstance(v, bytes) else v for k, v in seen.items()}
    assert httpx.get(f"{url}/{T}/{M}@1/{BIG}", headers=headers).status_code == 206
    # Range is signed by botocore; an altered path is refused.
    assert httpx.get(f"{url}/{T}/{M}@1/config.json", headers=headers).status_code == 403


def test_a_release_without_its_log_proof_is_refused(endpoint, monkeypatch, caplog):
    """The trust root names the verifiable log (as `modelreg serve` publishes it): an answer stripped of the
    release's proof is not served, as `modelreg fetch` would not take it."""
    import dataclasses

    api = endpoint["source"].api
    manifest = api.manifest
    monkeypatch.setattr(api, "manifest", lambda *a, **kw: dataclasses.replace(manifest(*a, **kw), log=None))
    with caplog.at_level(logging.ERROR, logger="modelreg.serve_s3"), pytest.raises(ClientError) as refused:
        s3_client(endpoint["url"]).get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-9")
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    assert "without a proof that it is in the log" in caplog.text, caplog.text


def test_the_listen_backlog_takes_a_streamers_burst_of_connections(endpoint):
    """The Run:ai streamer opens many connections at once; with socketserver's backlog of 5 the surplus was
    dropped and the load failed on its 1 s timeout (bench/stream.py at 2 GiB)."""
    import subprocess

    port = endpoint["url"].rsplit(":", 1)[1]
    listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True)
    backlog = int(listening.stdout.split()[2])  # Send-Q of a listening socket: its backlog
    assert backlog >= 128, listening.stdout


def test_only_loopback_is_accepted(endpoint):
    with pytest.raises(InvalidInputError):
        S3Server("0.0.0.0", 0, endpoint["source"], {KEY: SECRET})


def test_a_revocation_from_the_event_stream_stops_serving_the_version(endpoint, caplog):
    from registry.services import revocations

    s3 = s3_client(endpoint["url"])
    assert s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-9")["Body"].read()
    _wait_cached(endpoint["cache"], {hashlib.sha256(endpoint["files"][BIG][:CHUNK_SIZE]).hexdigest()})
    with endpoint["container"].session_factory() as session:
        revocations.revoke(session, endpoint["admin"], T, M, 1, "bad", clock=endpoint["container"].clock)
    from registry.client.revocations import RevocationFollower

    source = endpoint["source"]
    # serve-s3's follower of the event stream, as the CLI wires it.
    follower = RevocationFollower(source.api, endpoint["cache"], wait=None, on_problem=pytest.fail,
                                  on_revoked=lambda r: source.revoke(r.tenant, r.model, r.version))
    follower.step()
    with caplog.at_level(logging.ERROR), pytest.raises(ClientError) as refused:
        s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-9")
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    # The version's verified chunks left the node cache with it.
    assert not _chunk_digests(endpoint["files"][BIG]) & _cached_chunks(endpoint["cache"])


def test_a_revocation_cuts_a_range_already_in_flight(endpoint, monkeypatch):
    """A GET of the whole big file has sent its first chunk when the version is revoked: the rest is never
    sent (the connection is cut, the client sees a short body), and what did arrive is the release's bytes."""
    from botocore.exceptions import IncompleteReadError, ResponseStreamingError

    from registry.client.revocations import RevocationFollower
    from registry.services import revocations

    source, big = endpoint["source"], endpoint["files"][BIG]
    second_chunk_wanted, revocation_delivered = threading.Event(), threading.Event()
    chunk = source.chunk

    def hold_after_the_first(opened, chunked, index):  # a slow registry: chunk 1 waits for the revocation
        if index >= 1:
            second_chunk_wanted.set()
            assert revocation_delivered.wait(30)
        return chunk(opened, chunked, index)

    monkeypatch.setattr(source, "chunk", hold_after_the_first)
    body = s3_client(endpoint["url"]).get_object(Bucket=T, Key=f"{M}@1/{BIG}")["Body"]
    received = body.read(CHUNK_SIZE)
    assert received == big[:CHUNK_SIZE]
    assert second_chunk_wanted.wait(30)
    with endpoint["container"].session_factory() as session:
        revocations.revoke(session, endpoint["admin"], T, M, 1, "bad", clock=endpoint["container"].clock)
    follower = RevocationFollower(source.api, endpoint["cache"], wait=None, on_problem=pytest.fail,
                                  on_revoked=lambda r: source.revoke(r.tenant, r.model, r.version))
    follower.step()
    revocation_delivered.set()
    with pytest.raises((IncompleteReadError, ResponseStreamingError)):
        while piece := body.read(64 * 1024):
            received += piece
    assert len(received) == CHUNK_SIZE < len(big)  # nothing after the revocation, not even chunk 1 in hand


def test_a_flipped_byte_in_the_blob_store_is_never_served_and_is_logged(endpoint, caplog):
    s3, big = s3_client(endpoint["url"]), endpoint["files"][BIG]
    digest = hashlib.sha256(big).hexdigest()
    flip_stored_byte(endpoint["container"].blob_store, digest, CHUNK_SIZE + 123)  # in chunk 1
    bad = hashlib.sha256(big[CHUNK_SIZE:2 * CHUNK_SIZE]).hexdigest()
    with caplog.at_level(logging.ERROR, logger="modelreg.serve_s3"):
        with pytest.raises(ClientError) as failed:
            s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range=f"bytes={CHUNK_SIZE}-{CHUNK_SIZE + 999}")
        assert failed.value.response["Error"]["Code"] == "InternalError"
        # A range that starts in the good chunk 0 is cut where chunk 1 begins: none of its bytes arrive.
        body = b""
        with pytest.raises(Exception):
            got = s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range=f"bytes={CHUNK_SIZE - 10}-{CHUNK_SIZE + 9}")
            body = got["Body"].read()
        assert body == b""
    assert any(BIG in r.getMessage() and "chunk 1" in r.getMessage() for r in caplog.records), caplog.text
    # The good chunks are still served, and kept; the bad one is not.
    got = s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-999")["Body"].read()
    assert got == big[:1000]
    _wait_cached(endpoint["cache"], {hashlib.sha256(big[:CHUNK_SIZE]).hexdigest()})
    assert bad not in _cached_chunks(endpoint["cache"])


STREAM_SCRIPT = """
import hashlib, json, sys
from runai_model_streamer import SafetensorsStreamer
out = {}
with SafetensorsStreamer() as streamer:
    streamer.stream_file(sys.argv[1])
    for name, tensor in streamer.get_tensors():
        out[name] = hashlib.sha256(tensor.contiguous().numpy().tobytes()).hexdigest()
print(json.dumps(out))
"""


def stream_with_runai(url: str, uri: str):
    """Run:ai Model Streamer (its S3 backend) in its own process, as a loader would: name -> sha256 of bytes."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
           "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0"}
    run = subprocess.run([sys.executable, "-c", STREAM_SCRIPT, uri], capture_output=True, text=True, env=env,
                         timeout=300)
    return run.returncode, (json.loads(run.stdout) if run.returncode == 0 else run.stderr)


def test_the_runai_streamer_streams_every_tensor_of_the_release_equal_to_the_originals(endpoint, caplog):
    caplog.set_level(logging.DEBUG, logger="modelreg.serve_s3")
    from safetensors.numpy import load

    for path, data in endpoint["files"].items():
        if not path.endswith(".safetensors"):
            continue
        code, streamed = stream_with_runai(endpoint["url"], f"s3://{T}/{M}@1/{path}")
        assert code == 0, (streamed[-300:], caplog.text[-3000:])
        originals = {n: hashlib.sha256(a.tobytes()).hexdigest() for n, a in load(data).items()}
        assert streamed == originals, path


def test_a_flipped_byte_makes_the_runai_streamer_fail_on_that_chunk(endpoint, caplog):
    path, data = next((p, d) for p, d in endpoint["files"].items() if p.endswith(".safetensors") and p != BIG)
    flip_stored_byte(endpoint["container"].blob_store, hashlib.sha256(data).hexdigest(), len(data) - 1)
    with caplog.at_level(logging.ERROR, logger="modelreg.serve_s3"):
        code, streamed = stream_with_runai(endpoint["url"], f"s3://{T}/{M}@1/{path}")
    assert code != 0, streamed
    assert any(path in r.getMessage() and "chunk 0" in r.getMessage() for r in caplog.records), caplog.text
    assert hashlib.sha256(data[:CHUNK_SIZE]).hexdigest() not in _cached_chunks(endpoint["cache"])


def test_a_range_with_thousands_of_digits_is_answered_416_invalid_range(endpoint):
    """int() of over 4,300 digits raises: such a range dropped the connection without an answer. It is
    one serve-s3 does not support, as the API's parser (the same one) says: 416 InvalidRange."""
    url = endpoint["url"]
    for header in ("bytes=" + "9" * 5000 + "-", "bytes=0-" + "9" * 5000, "bytes=-" + "9" * 5000,
                   "bytes=" + "1" * 20 + "-"):
        refused = signed_get(url, f"/{T}/{M}%401/{BIG}", {"Range": header})
        assert refused.status_code == 416 and s3_error_code(refused) == "InvalidRange", header[:30]
    served = signed_get(url, f"/{T}/{M}%401/{BIG}", {"Range": "bytes=0-9"})
    assert served.content == endpoint["files"][BIG][:10]


def test_a_max_keys_that_is_no_count_is_answered_400_invalid_argument(endpoint):
    """ListObjectsV2 with max-keys 0 (its page had no last key), negative or no number dropped the
    connection; above 1000 it is 1000, as S3 caps it."""
    for max_keys in ("0", "-5", "abc", "9" * 5000, ""):
        refused = signed_get(endpoint["url"], f"/{T}?list-type=2&prefix={M}%401%2F&max-keys={max_keys}")
        assert refused.status_code == 400 and s3_error_code(refused) == "InvalidArgument", max_keys[:30]
    listed = signed_get(endpoint["url"], f"/{T}?list-type=2&prefix={M}%401%2F&max-keys=5000")
    assert listed.status_code == 200 and b"<MaxKeys>1000</MaxKeys>" in listed.content
    assert listed.content.count(b"<Key>") == len(endpoint["files"])


def test_a_request_signed_outside_15_minutes_of_now_is_refused(endpoint, monkeypatch):
    """A captured request replays only within S3's 15 minutes: one signed 30 days ago (or dated 30 days
    ahead) is RequestTimeTooSkewed, though its signature is good; one 5 minutes off either way is served."""
    import botocore.auth

    for minutes, accepted in ((30 * 24 * 60, False), (-30 * 24 * 60, False), (16, False), (-16, False),
                              (5, True), (-5, True)):
        signed_at = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None) - dt.timedelta(minutes=minutes)
        monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: signed_at)
        answer = signed_get(endpoint["url"], f"/{T}/{M}%401/{BIG}", {"Range": "bytes=0-9"})
        if accepted:
            assert answer.status_code == 206 and answer.content == endpoint["files"][BIG][:10], minutes
        else:
            assert answer.status_code == 403 and s3_error_code(answer) == "RequestTimeTooSkewed", minutes


def test_a_flipped_bit_in_a_node_cache_chunk_file_is_never_served(endpoint, caplog):
    """The node cache's disk is not trusted either: serve-s3 restarted over a cache whose chunk file has a
    bit flipped answers the release's bytes (the chunk fetched again and checked), removes the bad file and
    logs it; the chunk is kept again, good."""
    s3, big = s3_client(endpoint["url"]), endpoint["files"][BIG]
    cache, source = endpoint["cache"], endpoint["source"]
    digest = hashlib.sha256(big[:CHUNK_SIZE]).hexdigest()
    assert s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-99")["Body"].read() == big[:100]
    _wait_cached(cache, {digest})
    path = cache.blob_path(T, digest)
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[50] ^= 0x04
    path.write_bytes(bytes(data))
    restarted = ChunkSource(source.api, cache, max_chunks=4, trust_root_file=source.trust_root_file)
    with running(restarted) as url, caplog.at_level(logging.ERROR, logger="modelreg.serve_s3"):
        got = s3_client(url).get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-99")["Body"].read()
        assert got == big[:100]
        assert f"cached chunk 0 of {BIG} failed its check" in caplog.text, caplog.text
        _wait_cached(cache, {digest})
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_a_version_the_node_cache_holds_as_revoked_is_refused_though_the_registry_still_serves_it(
        endpoint, monkeypatch):
    """The node cache recorded llm@1 as revoked (another process on the node followed the revocation) while
    the registry's answer is stale and still verifies: serve-s3 asks its release again, chunk lists carried
    over from the read before, and refuses it; a serve-s3 started afresh over the cache refuses it too."""
    from registry.client import serve_s3

    s3, cache, source = s3_client(endpoint["url"]), endpoint["cache"], endpoint["source"]
    assert s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-9")["Body"].read()
    assert source.release(T, f"{M}@1").lists  # what a new answer would carry over
    cache.remove_revoked(T, M, 1)  # the node's own record; the registry was not asked
    monkeypatch.setattr(serve_s3, "RELEASE_TTL", 0.0)  # the next request asks the registry again
    for client in (s3, s3_client(endpoint["url"])):
        for read in (lambda c: c.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-9"),
                     lambda c: c.list_objects_v2(Bucket=T, Prefix=f"{M}@1/")):
            with pytest.raises(ClientError) as refused:
                read(client)
            assert refused.value.response["Error"]["Code"] == "AccessDenied"
    restarted = ChunkSource(source.api, cache, max_chunks=4, trust_root_file=source.trust_root_file)
    with running(restarted) as url, pytest.raises(ClientError) as refused:
        s3_client(url).get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-9")
    assert refused.value.response["Error"]["Code"] == "AccessDenied"


def test_each_model_at_ref_is_its_own_verified_release(endpoint, tmp_path):
    """Verified releases are kept per tenant, model and ref: right after a read of llm@1, llm@2 lists and
    serves version 2's files, and llm@1 still version 1's."""
    container, s3, files = endpoint["container"], s3_client(endpoint["url"]), endpoint["files"]
    only_in_2 = "extra/second.safetensors"
    files2 = {**tiny_model_files(2), only_in_2: save({"second": np.arange(64, dtype=np.float32)})}
    assert awaiting_version(container, endpoint["admin"], tmp_path / "m2", T, M, files=files2) == 2
    approve_standin(container, T, M, 2)

    def listing(ref: str) -> dict[str, str]:
        listed = s3.list_objects_v2(Bucket=T, Prefix=f"{M}@{ref}/")["Contents"]
        return {o["Key"]: o["ETag"].strip('"') for o in listed}

    small = next(p for p in files if p != BIG)
    assert s3.get_object(Bucket=T, Key=f"{M}@1/{small}")["Body"].read() == files[small]
    assert listing("2") == {f"{M}@2/{p}": hashlib.sha256(d).hexdigest() for p, d in files2.items()}
    assert s3.get_object(Bucket=T, Key=f"{M}@2/{only_in_2}")["Body"].read() == files2[only_in_2]
    assert s3.get_object(Bucket=T, Key=f"{M}@2/{small}")["Body"].read() == files2[small] != files[small]
    assert listing("1") == {f"{M}@1/{p}": hashlib.sha256(d).hexdigest() for p, d in files.items()}
    assert s3.get_object(Bucket=T, Key=f"{M}@1/{small}")["Body"].read() == files[small]


def test_a_failure_nobody_foresaw_is_an_s3_internal_error_not_a_dropped_connection(endpoint, monkeypatch,
                                                                                    caplog):
    """A bug in serve-s3 (here: opening a release raises what no handler expects) answers 500 InternalError
    with nothing of the failure in the answer; the trace goes to the log."""
    def broken(tenant, model_ref):
        raise RuntimeError("secret detail")

    monkeypatch.setattr(endpoint["source"], "release", broken)
    with caplog.at_level(logging.ERROR, logger="modelreg.serve_s3"):
        failed = signed_get(endpoint["url"], f"/{T}/{M}%401/{BIG}", {"Range": "bytes=0-9"})
    assert failed.status_code == 500 and s3_error_code(failed) == "InternalError"
    assert b"secret detail" not in failed.content and "secret detail" in caplog.text
