"""serve-s3's chunks: fetched once for parallel ranges, served from memory checked once, buffers bounded and
given back, sent before they are written to the node cache, served when that cache fails, and a slot held
for a slow client but taken back from one that stopped reading."""

from __future__ import annotations

import hashlib
import logging
import threading
import time

import pytest

from registry.domain.chunks import CHUNK_SIZE
from tests.support.s3_endpoint import (
    BIG,
    M,
    T,
    build_endpoint_world,
    cached_chunks,
    s3_client,
    wait_cached,
)

pytestmark = pytest.mark.seeded(builder=build_endpoint_world)


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
    from registry.node import serve_s3

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
    deadline = time.monotonic() + 20  # a handler puts a fetched chunk into the node cache after its write
    while len(source._idle) < source._buffers and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(source._idle) == source._buffers and all(b.users == 0 for b in source._idle)


def test_a_file_listed_with_another_chunk_size_never_gets_the_others_chunk(endpoint):
    """Chunks in memory are named by file, chunk size and index: chunk 1 of the file in 4 MiB chunks is
    not chunk 1 in 8 MiB chunks, though both are in memory at once."""
    import dataclasses

    from registry.node.chunks import load_chunk_list

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
    from registry.node import serve_s3

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
        assert hashlib.sha256(big[:CHUNK_SIZE]).hexdigest() not in cached_chunks(endpoint["cache"])
    finally:
        go_on.set()
    wait_cached(endpoint["cache"], {hashlib.sha256(big[:CHUNK_SIZE]).hexdigest()})


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
        deadline = time.monotonic() + 20
        while "not kept in the node cache" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.02)
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
    from registry.node import serve_s3

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
