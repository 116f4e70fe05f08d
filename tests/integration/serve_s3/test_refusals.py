"""What serve-s3 refuses: unsigned, wrongly signed, unknown-key and stale-dated requests (SigV4), a release
without its log proof, a version revoked by the event stream or in the node cache (a range in flight
included), and bytes that fail their digest in the blob store or the node cache."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import threading

import httpx
import pytest
from botocore.exceptions import ClientError

from registry.domain.chunks import CHUNK_SIZE
from registry.node.serve_s3 import ChunkSource
from tests.support.s3_endpoint import (
    BIG,
    M,
    T,
    build_endpoint_world,
    cached_chunks,
    chunk_digests,
    flip_stored_byte,
    running,
    s3_client,
    s3_error_code,
    signed_get,
    wait_cached,
)

pytestmark = pytest.mark.seeded(builder=build_endpoint_world)


def test_a_chunk_served_while_its_version_was_revoked_is_not_left_in_the_node_cache(endpoint, monkeypatch):
    """The revocation removed the version's chunks while a chunk of it was being written to a client: that
    chunk is not put into the cache after it (it would stay there, a revoked version's bytes on the node)."""
    import socketserver

    from registry.node.revocations import RevocationFollower
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
    assert hashlib.sha256(big[:CHUNK_SIZE]).hexdigest() not in cached_chunks(endpoint["cache"])


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


def test_a_revocation_from_the_event_stream_stops_serving_the_version(endpoint, caplog):
    from registry.services import revocations

    s3 = s3_client(endpoint["url"])
    assert s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-9")["Body"].read()
    wait_cached(endpoint["cache"], {hashlib.sha256(endpoint["files"][BIG][:CHUNK_SIZE]).hexdigest()})
    with endpoint["container"].session_factory() as session:
        revocations.revoke(session, endpoint["admin"], T, M, 1, "bad", clock=endpoint["container"].clock)
    from registry.node.revocations import RevocationFollower

    source = endpoint["source"]
    # serve-s3's follower of the event stream, as the CLI wires it.
    follower = RevocationFollower(source.api, endpoint["cache"], wait=None, on_problem=pytest.fail,
                                  on_revoked=lambda r: source.revoke(r.tenant, r.model, r.version))
    follower.step()
    with caplog.at_level(logging.ERROR), pytest.raises(ClientError) as refused:
        s3.get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-9")
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    # The version's verified chunks left the node cache with it.
    assert not chunk_digests(endpoint["files"][BIG]) & cached_chunks(endpoint["cache"])


def test_a_revocation_cuts_a_range_already_in_flight(endpoint, monkeypatch):
    """A GET of the whole big file has sent its first chunk when the version is revoked: the rest is never
    sent (the connection is cut, the client sees a short body), and what did arrive is the release's bytes."""
    from botocore.exceptions import IncompleteReadError, ResponseStreamingError

    from registry.node.revocations import RevocationFollower
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
    wait_cached(endpoint["cache"], {hashlib.sha256(big[:CHUNK_SIZE]).hexdigest()})
    assert bad not in cached_chunks(endpoint["cache"])


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
    wait_cached(cache, {digest})
    path = cache.blob_path(T, digest)
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[50] ^= 0x04
    path.write_bytes(bytes(data))
    restarted = ChunkSource(source.api, cache, policy=source.policy, max_chunks=4)
    with running(restarted) as url, caplog.at_level(logging.ERROR, logger="modelreg.serve_s3"):
        got = s3_client(url).get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-99")["Body"].read()
        assert got == big[:100]
        assert f"cached chunk 0 of {BIG} failed its check" in caplog.text, caplog.text
        wait_cached(cache, {digest})
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_a_version_the_node_cache_holds_as_revoked_is_refused_though_the_registry_still_serves_it(
        endpoint, monkeypatch):
    """The node cache recorded llm@1 as revoked (another process on the node followed the revocation) while
    the registry's answer is stale and still verifies: serve-s3 asks its release again, chunk lists carried
    over from the read before, and refuses it; a serve-s3 started afresh over the cache refuses it too."""
    from registry.node import serve_s3

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
    restarted = ChunkSource(source.api, cache, policy=source.policy, max_chunks=4)
    with running(restarted) as url, pytest.raises(ClientError) as refused:
        s3_client(url).get_object(Bucket=T, Key=f"{M}@1/{BIG}", Range="bytes=0-9")
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
