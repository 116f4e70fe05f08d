"""The blob download (into the cache's partial file and DEST's copy) against a real HTTP server, on both reading paths
(``http.client`` into the buffer, and httpx where a transport is injected), with aligned and unaligned parts, direct and
buffered writes."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from registry.client.api import RegistryApi
from registry.client.errors import NetworkError, TransportError
from registry.domain.errors import DigestMismatchError, SizeMismatchError
from registry.node import blobfile
from registry.node.download import Buffers, download_blob

BLOBS = {f"b{n}": bytes((i * 31 + n) % 256 for i in range(n)) for n in (1, 4095, 4096, 3 * 4096 + 7, (64 << 10) + 123)}


class _Server:
    """Serves ``BLOBS`` by name with Range support; ``mode`` makes it misbehave."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.ranges: list[str | None] = []
        self.before: Callable[[str | None], None] | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                data = BLOBS[self.path.lstrip("/").split("?")[0]]
                wanted = self.headers.get("Range")
                server.ranges.append(wanted)
                if server.before is not None:
                    server.before(wanted)
                if server.mode == "ignore-range" or wanted is None:
                    self._send(200, data, {})
                    return
                first, last = (int(x) for x in wanted.removeprefix("bytes=").split("-"))
                if server.mode == "fail-after-first" and first > 0:
                    self._send(404, b"gone", {})
                    return
                total = len(data) + (1 if server.mode == "other-size" else 0)
                self._send(206, data[first:last + 1], {"Content-Range": f"bytes {first}-{last}/{total}"})

            def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for name, value in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.close()


@pytest.fixture(params=["direct-read", "httpx"])
def api(request, server):
    # An injected transport sends every byte through httpx; without one, http.client reads into the buffer.
    transport = httpx.HTTPTransport() if request.param == "httpx" else None
    with RegistryApi(server.url, None, transport=transport) as client:
        assert (client._ranges is None) == (request.param == "httpx")
        yield client


def _fetch(api: RegistryApi, server: _Server, name: str, target: Path, *, part_size: int,
           buffers: Buffers | None = None, digest: str | None = None, copy_to: Path | None = None,
           streams: int = 4) -> int:
    data = BLOBS[name]
    with ThreadPoolExecutor(streams) as pool:
        return download_blob(api, f"{server.url}/{name}", target, digest=digest or hashlib.sha256(data).hexdigest(),
                             size=len(data), pool=pool, part_size=part_size, buffers=buffers, copy_to=copy_to)


@pytest.mark.parametrize("part_size", [4096, 5000, 256 << 10])
@pytest.mark.parametrize("name", sorted(BLOBS))
def test_every_size_and_part_size_arrives_whole(api, server, tmp_path, name, part_size):
    target = tmp_path / "blob"
    assert _fetch(api, server, name, target, part_size=part_size) == 0
    assert target.read_bytes() == BLOBS[name]
    assert not target.with_name("blob.parts.json").exists()


def test_two_buffers_carry_a_blob_of_many_parts_and_the_parts_ask_exactly_their_ranges(api, server, tmp_path):
    name = "b65659"
    target = tmp_path / "blob"
    _fetch(api, server, name, target, part_size=4096, buffers=Buffers(2, 4096))
    assert target.read_bytes() == BLOBS[name]
    asked = sorted(int(r.removeprefix("bytes=").split("-")[0]) for r in server.ranges)
    assert asked == list(range(0, len(BLOBS[name]), 4096))


def test_buffered_writes_give_the_same_file_when_the_filesystem_refuses_o_direct(api, server, tmp_path, monkeypatch):
    monkeypatch.delattr(blobfile.os, "O_DIRECT", raising=False)
    target = tmp_path / "blob"
    _fetch(api, server, "b12295", target, part_size=4096)
    assert target.read_bytes() == BLOBS["b12295"]


def test_a_wrong_digest_deletes_the_partial(api, server, tmp_path):
    target = tmp_path / "blob"
    with pytest.raises(DigestMismatchError):
        _fetch(api, server, "b4096", target, part_size=1024, digest="0" * 64)
    assert not target.exists() and not target.with_name("blob.parts.json").exists()


def test_a_server_holding_another_size_is_refused_and_the_partial_deleted(api, server, tmp_path):
    server.mode = "other-size"
    target = tmp_path / "blob"
    with pytest.raises(SizeMismatchError):
        _fetch(api, server, "b4096", target, part_size=1024)
    assert not target.exists()


def test_a_server_ignoring_ranges_serves_a_one_part_blob_but_not_a_split_one(api, server, tmp_path):
    server.mode = "ignore-range"
    whole = tmp_path / "whole"
    _fetch(api, server, "b4095", whole, part_size=8192)
    assert whole.read_bytes() == BLOBS["b4095"]
    with pytest.raises(TransportError):
        _fetch(api, server, "b4095", tmp_path / "split", part_size=1024)


@pytest.mark.parametrize("part_size", [4096, 5000])
@pytest.mark.parametrize("name", ["b1", "b4096", "b65659"])
def test_dest_s_copy_holds_the_blob_and_only_the_partial_is_left_to_the_cache(api, server, tmp_path, name,
                                                                               part_size):
    target, copy = tmp_path / "partial", tmp_path / "dest-file"
    _fetch(api, server, name, target, part_size=part_size, copy_to=copy)
    assert copy.read_bytes() == target.read_bytes() == BLOBS[name]
    assert copy.stat().st_ino != target.stat().st_ino and copy.stat().st_nlink == 1


def test_an_empty_blob_gets_an_empty_copy(api, server, tmp_path):
    BLOBS["b0"] = b""
    try:
        _fetch(api, server, "b0", tmp_path / "partial", part_size=4096, copy_to=tmp_path / "dest-file")
    finally:
        del BLOBS["b0"]
    assert (tmp_path / "dest-file").read_bytes() == b""


def test_the_copy_holds_the_hashed_bytes_not_the_partial_as_changed_after_they_were_written(api, server, tmp_path):
    """A process that rewrites the partial between two parts changes the cache's file, never DEST's copy."""
    target, copy = tmp_path / "partial", tmp_path / "dest-file"

    def tamper(wanted: str | None) -> None:
        if wanted == "bytes=4096-8191":  # one stream: part 0 is written before part 1 is asked for
            with open(target, "r+b") as f:
                f.write(b"X")

    server.before = tamper
    _fetch(api, server, "b65659", target, part_size=4096, copy_to=copy, streams=1)
    assert copy.read_bytes() == BLOBS["b65659"]
    assert target.read_bytes()[:1] == b"X"  # the cache re-hashes what it copies out: test_cache.py


def test_a_resumed_part_reaches_the_copy_from_the_buffer_it_was_read_back_into_and_is_hashed_there(
        api, server, tmp_path):
    name = "b65659"
    for tampered in (False, True):
        target, copy = tmp_path / f"partial-{tampered}", tmp_path / f"dest-file-{tampered}"
        server.mode = "fail-after-first"
        with pytest.raises(NetworkError):
            _fetch(api, server, name, target, part_size=4096, copy_to=copy, streams=1)
        assert not copy.exists() and target.exists()
        server.mode = "ok"
        if not tampered:
            assert _fetch(api, server, name, target, part_size=4096, copy_to=copy) == 4096
            assert copy.read_bytes() == BLOBS[name]
            continue
        # Changed in the partial, a resumed part is refused by the hash (its size is right).
        with open(target, "r+b") as f:
            f.write(b"X")
        with pytest.raises(DigestMismatchError):
            _fetch(api, server, name, target, part_size=4096, copy_to=copy)
        assert not copy.exists() and not target.exists()


def test_a_wrong_digest_or_a_failed_part_leaves_no_copy_and_an_existing_one_is_never_overwritten(api, server,
                                                                                                 tmp_path):
    copy = tmp_path / "dest-file"
    with pytest.raises(DigestMismatchError):
        _fetch(api, server, "b12295", tmp_path / "p1", part_size=4096, digest="0" * 64, copy_to=copy)
    assert not copy.exists()
    server.mode = "other-size"
    with pytest.raises(SizeMismatchError):
        _fetch(api, server, "b12295", tmp_path / "p2", part_size=4096, copy_to=copy)
    assert not copy.exists()
    server.mode = "ok"
    copy.write_bytes(b"someone else's")
    with pytest.raises(FileExistsError):
        _fetch(api, server, "b12295", tmp_path / "p3", part_size=4096, copy_to=copy)
    assert copy.read_bytes() == b"someone else's"


@pytest.mark.parametrize("o_direct", [True, False])
@pytest.mark.parametrize("size", [1, 4095, 4096, 4097, 3 * 4096 + 5, 1 << 20])
def test_a_whole_file_written_and_read_past_the_page_cache_holds_its_bytes(tmp_path, monkeypatch, size, o_direct):
    """serve-s3's chunk files: written and read through page-aligned buffers that held other bytes before,
    with O_DIRECT where the filesystem takes it, buffered for the unaligned tail and where it does not."""
    import mmap
    import os

    if not o_direct:
        monkeypatch.delattr(blobfile.os, "O_DIRECT", raising=False)
    data = os.urandom(size)
    out = mmap.mmap(-1, size)
    out[:] = data
    path = tmp_path / "chunk"
    path.write_bytes(b"older and longer" * size)
    blobfile.write_whole_file(path, memoryview(out))
    assert path.read_bytes() == data
    into = mmap.mmap(-1, size)
    into[:] = b"\xff" * size  # a reused buffer: every byte must come from the file
    assert blobfile.read_whole_file(path, memoryview(into)) is True
    assert into[:] == data
    assert blobfile.read_whole_file(tmp_path / "missing", memoryview(into)) is False
    for other in (size + 1, size - 1):  # a file longer or shorter than the chunk is not the chunk
        with pytest.raises(SizeMismatchError):
            blobfile.read_whole_file(path, memoryview(mmap.mmap(-1, other) if other else bytearray()))
