"""``modelreg serve-s3``: the read subset of the S3 API over verified releases, for streaming loaders.

Path-style only: bucket = tenant, key = ``<model>@<ref>/<path>``, so ``s3://<tenant>/<model>@<ref>/<path>``
addresses a file of a release (docs/adr/0014-serve-s3.md). ``ListObjectsV2``, ``HeadObject`` and
``GetObject`` (with ``Range``) are answered; anything else, or a request not signed with SigV4 by the key
pair the endpoint is configured with, gets an S3 XML error.

Each release is opened as ``modelreg fetch`` opens it, by the node's one door with the node's own policy
(:class:`registry.node.opener.ReleaseOpener`: trust pin, its witnesses);
its files' chunk lists are checked against the roots it signs. A range is answered chunk by chunk: each
aligned chunk covering it comes from the node cache or from the registry's transport URL, and its digest
is checked before any byte of it is written to the socket. A chunk that fails is never served: the request
fails and the file and chunk are logged. Memory is bounded: chunks are read into a pool of at most
``max_chunks`` reused buffers, whatever the file size or the number of requests; concurrent requests for
one chunk share one fetch (single flight), and a chunk asked for again while its buffer is idle is served
from memory, checked bytes that never left the process.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import ipaddress
import logging
import mmap
import os
import re
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from xml.sax.saxutils import escape

from registry.client.api import RegistryApi
from registry.domain.errors import (
    ChunkMismatchError,
    InvalidInputError,
    NotFoundError,
    RangeNotSatisfiableError,
    RegistryError,
    RevokedError,
    SizeMismatchError,
)
from registry.domain.ranges import byte_range
from registry.domain.refs import parse_ref
from registry.node.blobfile import read_whole_file, write_whole_file
from registry.node.cache import NodeCache, RevocationReport
from registry.node.chunks import ChunkedFile, fetch_chunk_list, verify_chunk
from registry.node.opener import NodePolicy, ReleaseOpener
from registry.node.revocations import RevocationFollower
from registry.signing.release import Release, ReleaseFile

log = logging.getLogger("modelreg.serve_s3")

MAX_SKEW = dt.timedelta(minutes=15)
RELEASE_TTL = 30.0  # seconds a verified release is answered from before it is asked for again
DEFAULT_MAX_CHUNKS = 16
_AUTH_RE = re.compile(r"AWS4-HMAC-SHA256 Credential=([^/,\s]+)/(\d{8})/([^/,\s]+)/s3/aws4_request,\s*"
                      r"SignedHeaders=([a-z0-9;\-]+),\s*Signature=([0-9a-f]{64})$")


class S3Error(Exception):
    """An S3 error answer: HTTP status, S3 code, message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def check_loopback(host: str) -> None:
    """serve-s3 listens on loopback only (a pod-shared socket is a unix path, not a host).

    Raises:
        InvalidInputError: ``host`` is not a loopback address.
    """
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise InvalidInputError(f"serve-s3 listens on loopback only, not {host!r}", host=host)


# --- SigV4 (https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html) -----------

def _uri_encode(text: str, *, slash: bool) -> str:
    return urllib.parse.quote(text, safe="/~" if not slash else "~")


def canonical_query(query: str) -> str:
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    return "&".join(f"{_uri_encode(k, slash=True)}={_uri_encode(v, slash=True)}" for k, v in sorted(pairs))


def signing_key(secret: str, date: str, region: str) -> bytes:
    key = hmac.new(f"AWS4{secret}".encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def verify_sigv4(method: str, raw_path: str, headers: dict[str, str], keys: dict[str, str],
                 now: dt.datetime) -> str:
    """Check a request's ``Authorization: AWS4-HMAC-SHA256`` header; return the access key it names.

    ``headers`` has lower-case names. S3 signs the path as sent, URI-encoded once (not twice).

    Raises:
        S3Error: unsigned, an unknown key, a bad signature, or a date outside 15 minutes of ``now``.
    """
    auth = headers.get("authorization")
    if not auth:
        raise S3Error(403, "AccessDenied", "requests must be signed with SigV4")
    match = _AUTH_RE.match(auth.strip())
    if match is None:
        raise S3Error(400, "AuthorizationHeaderMalformed", "not an AWS4-HMAC-SHA256 authorization header")
    access_key, date, region, signed_names, signature = match.groups()
    secret = keys.get(access_key)
    if secret is None:
        raise S3Error(403, "InvalidAccessKeyId", "the access key is not one this endpoint accepts")
    names = signed_names.split(";")
    if "host" not in names or "x-amz-date" not in names or names != sorted(names):
        raise S3Error(403, "AccessDenied", "the signature must cover host and x-amz-date")
    amz_date = headers.get("x-amz-date", "")
    try:
        when = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        raise S3Error(403, "AccessDenied", "x-amz-date is missing or malformed") from None
    if not amz_date.startswith(date) or abs(now - when) > MAX_SKEW:
        raise S3Error(403, "RequestTimeTooSkewed", "the request time is too far from the endpoint's")
    payload = headers.get("x-amz-content-sha256")
    if payload is None:
        raise S3Error(400, "InvalidRequest", "x-amz-content-sha256 is required")
    path, _, query = raw_path.partition("?")
    canonical_headers = "".join(f"{n}:{' '.join(headers.get(n, '').split())}\n" for n in names)
    canonical = "\n".join([method, _uri_encode(urllib.parse.unquote(path), slash=False), canonical_query(query),
                           canonical_headers, signed_names, payload])
    scope = f"{date}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    expected = hmac.new(signing_key(secret, date, region), to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        raise S3Error(403, "SignatureDoesNotMatch", "the request signature does not match")
    return access_key


# --- releases and chunks ---------------------------------------------------------------------------

@dataclass
class OpenRelease:
    """A verified release, its transport URLs and the chunk lists checked so far."""

    tenant: str
    name: str
    release: Release
    transport: dict[str, str]
    verified_at: float
    lists: dict[str, ChunkedFile] = field(default_factory=dict)
    revoked: bool = False

    def file(self, path: str) -> ReleaseFile:
        for f in self.release.files:
            if f.path == path:
                return f
        raise S3Error(404, "NoSuchKey", f"{path} is not a file of the release")


class _Buffer:
    """One chunk-sized buffer of the pool, and the verified chunk it holds (``key``; None: nothing usable).

    ``users`` are the requests reading it now, each holding one of the source's slots; a buffer with none
    keeps its chunk until the pool needs the buffer again, so a chunk read again soon (a loader's range
    that straddles a chunk boundary asks for the chunk twice) is served from memory.
    """

    __slots__ = ("data", "key", "size", "users", "ready", "error", "unsaved")

    def __init__(self, size: int) -> None:
        self.data = mmap.mmap(-1, size)  # page-aligned, for reads and writes past the page cache
        self.key: tuple[str, int, int] | None = None
        self.size = 0
        self.users = 0
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.unsaved: tuple[OpenRelease, str] | None = None  # fetched, its digest not yet in the node cache

    def view(self, lo: int, hi: int) -> memoryview:
        return memoryview(self.data)[lo:hi]


class ChunkSource:
    """Verified chunks of released files: from memory, the node cache, else fetched once however many ask.

    Chunks are read into a pool of at most ``max_chunks`` page-aligned buffers, reused: a request takes a
    slot, then a buffer, so one is always free or idle. A buffer goes back to the pool once its last
    reader's write has returned, never while a socket may still be sending from it. Chunk files in the node
    cache are written and read past the page cache (:mod:`registry.node.blobfile`): filling it with a
    model's chunks was half of serve-s3's CPU in a profile (a full page cache reclaims for every new page),
    and it evicted the pages the node's other readers need.
    """

    def __init__(self, api: RegistryApi, cache: NodeCache | None, *, policy: NodePolicy,
                 max_chunks: int = DEFAULT_MAX_CHUNKS,
                 on_opened: Callable[[str, str, int], None] | None = None) -> None:
        self.api, self.cache, self.policy = api, cache, policy
        self.on_opened = on_opened  # told of each release verified and served (its receipts)
        self.opener = ReleaseOpener(api, policy, state_dir=cache.root if cache is not None else None)
        self.max_chunks = max_chunks
        self.slots = threading.BoundedSemaphore(max_chunks)
        self._lock = threading.Lock()
        self._chunks: dict[tuple[str, int, int], _Buffer] = {}  # loading, being read, or idle and usable
        self._idle: OrderedDict[_Buffer, None] = OrderedDict()  # no reader, least recently used first
        self._buffers = 0
        self._releases: dict[tuple[str, str, str], OpenRelease] = {}
        self._trust_lock = threading.Lock()

    def release(self, tenant: str, model_ref: str) -> OpenRelease:
        """The verified release ``tenant/model@ref`` (asked for again after RELEASE_TTL seconds)."""
        try:
            ref = parse_ref(f"{tenant}/{model_ref}")
        except RegistryError:
            raise S3Error(404, "NoSuchKey", f"{model_ref!r} is not <model>@<ref>") from None
        key = (ref.tenant, ref.name, model_ref.partition("@")[2])
        with self._lock:
            held = self._releases.get(key)
        if held is not None and not held.revoked and time.monotonic() - held.verified_at < RELEASE_TTL:
            return held
        # One open at a time: the node's trust state (roots walked, serials, checkpoint) is read and kept whole.
        with self._trust_lock:
            try:
                accepting = self.opener.open(ref)
                assert accepting is not None  # no ETag was sent, so no 304
            except RevokedError as exc:
                raise S3Error(403, "AccessDenied", str(exc)) from None
            except NotFoundError as exc:
                raise S3Error(404, "NoSuchBucket" if not model_ref else "NoSuchKey", str(exc)) from None
            except RegistryError as exc:
                log.error("release %s/%s refused: %s", tenant, model_ref, exc)
                raise S3Error(403, "AccessDenied", f"the release does not verify: {exc}") from None
            release = accepting.release
            # Recorded in the cache's index, as a fetch records what it holds: the event follower then tells
            # :meth:`revoke` of this version (and a version the cache knows as revoked is refused here).
            held_blobs = {f.sha256: f.size for f in release.files}
            if self.cache is not None and not self.cache.hold(ref.tenant, ref.name, release.version, held_blobs):
                raise S3Error(403, "AccessDenied", f"{release.model}@{release.version} was revoked")
            accepting.accept()
        opened = OpenRelease(ref.tenant, ref.name, release, dict(accepting.transport), time.monotonic())
        if held is not None:
            opened.lists = {p: c for p, c in held.lists.items()
                            if any(f.path == p and f.sha256 == c.entry.sha256 for f in release.files)}
        with self._lock:
            self._releases[key] = opened
        if self.on_opened is not None:
            self.on_opened(ref.tenant, ref.name, release.version)
        return opened

    def revoke(self, tenant: str, name: str, version: int) -> None:
        """Stop serving every open release of ``tenant/name@version``, ranges in flight included."""
        with self._lock:
            for key, held in list(self._releases.items()):
                if (held.tenant, held.name, held.release.version) == (tenant, name, version):
                    held.revoked = True
                    del self._releases[key]

    def chunk_list(self, opened: OpenRelease, entry: ReleaseFile) -> ChunkedFile:
        chunked = opened.lists.get(entry.path)
        if chunked is None:
            try:
                chunked = fetch_chunk_list(self.api, opened.tenant, opened.name, opened.release.version, entry)
            except RevokedError as exc:
                raise S3Error(403, "AccessDenied", str(exc)) from None
            except RegistryError as exc:
                log.error("chunk list of %s refused: %s", entry.path, exc)
                raise S3Error(500, "InternalError", f"{entry.path}: no verified chunk list: {exc}") from None
            if self.cache is not None:
                # Its chunks, as the cache will name them, go with the version: a revocation removes them.
                spans = (chunked.span(i) for i in range(chunked.count))
                chunk_blobs = {chunked.chunks.digest(i).hex(): end - start for i, (start, end) in enumerate(spans)}
                if not self.cache.hold(opened.tenant, opened.name, opened.release.version, chunk_blobs):
                    raise S3Error(403, "AccessDenied", f"{opened.release.model}@{opened.release.version} was revoked")
            opened.lists[entry.path] = chunked
        return chunked

    def chunk(self, opened: OpenRelease, chunked: ChunkedFile, index: int) -> _Buffer:
        """Chunk ``index`` of the file in a buffer, its digest checked; call holding one of :attr:`slots`, and
        :meth:`done` with the buffer once its bytes are written."""
        # The chunk size is in the key: the same file listed with another chunk size has other chunks.
        key = (chunked.entry.sha256, chunked.chunks.chunk_size, index)
        with self._lock:
            buffer = self._chunks.get(key)
            leader = buffer is None
            if leader:
                buffer = self._take(chunked.chunks.chunk_size)
                buffer.key, buffer.error = key, None
                buffer.ready.clear()
                self._chunks[key] = buffer
            else:
                self._idle.pop(buffer, None)
            buffer.users += 1
        if not leader:
            buffer.ready.wait()
            if buffer.error is not None:
                error = buffer.error
                self.done(buffer)
                raise error
            return buffer
        try:
            buffer.size, fetched = self._load(opened, chunked, index, memoryview(buffer.data))
        except BaseException as exc:
            with self._lock:
                buffer.error = exc
                if self._chunks.get(key) is buffer:
                    del self._chunks[key]
            buffer.ready.set()
            self.done(buffer)
            raise
        if fetched is not None:
            buffer.unsaved = (opened, fetched)
        buffer.ready.set()
        return buffer

    def done(self, buffer: _Buffer) -> None:
        """A reader of ``buffer`` has written what it needed of it (or failed).

        A chunk just fetched goes into the node cache here, by its first reader to be done: after its bytes
        went out, not on any request's path, and while that reader still counts as a user, so the buffer is
        not reused meanwhile.
        """
        with self._lock:
            unsaved, buffer.unsaved = buffer.unsaved, None
        if unsaved is not None and self.cache is not None:
            opened, digest = unsaved
            try:
                # Not for a version revoked meanwhile: its chunks have just left the cache.
                if not opened.revoked and not self.cache.is_revoked(opened.tenant, opened.name,
                                                                    opened.release.version):
                    partial = self.cache.partial_path(opened.tenant, digest)
                    # Past the page cache: filling it with a model's chunks evicts what the node's readers need.
                    write_whole_file(partial, buffer.view(0, buffer.size))
                    self.cache.commit(opened.tenant, digest, buffer.size, partial)
            except OSError as exc:  # the chunk was served; the next read fetches it again
                log.error("chunk %s not kept in the node cache: %s", digest, exc)
        with self._lock:
            buffer.users -= 1
            if buffer.users == 0:
                self._idle[buffer] = None

    def _take(self, size: int) -> _Buffer:
        """A buffer for a new chunk: a new one while fewer than max_chunks exist, else the least recently
        used idle one (its chunk forgotten). Call under the lock, holding a slot."""
        if self._buffers < self.max_chunks:
            self._buffers += 1
            return _Buffer(size)
        if not self._idle:
            # Every reader holds a slot and reads one buffer, so a slot holder always finds one idle.
            raise RuntimeError("serve-s3: no idle chunk buffer although a slot is held")
        buffer, _ = self._idle.popitem(last=False)
        if buffer.key is not None and self._chunks.get(buffer.key) is buffer:
            del self._chunks[buffer.key]
        buffer.key, buffer.size, buffer.unsaved = None, 0, None
        if len(buffer.data) != size:
            buffer.data = mmap.mmap(-1, size)
        return buffer

    def _load(self, opened: OpenRelease, chunked: ChunkedFile, index: int,
              into: memoryview) -> tuple[int, str | None]:
        """Fill ``into`` with chunk ``index``, verified, from the node cache or the transport; its length, and
        its digest when it was fetched (the node cache does not hold it yet)."""
        entry = chunked.entry
        start, end = chunked.span(index)
        data = into[:end - start]
        digest = chunked.chunks.digest(index).hex()
        if self.cache is not None:
            path = self.cache.blob_path(opened.tenant, digest)
            try:
                if read_whole_file(path, data):
                    verify_chunk(chunked, index, data)
                    return len(data), None
            except (ChunkMismatchError, SizeMismatchError):
                log.error("cached chunk %d of %s failed its check: removed", index, entry.path)
                path.unlink(missing_ok=True)
            except OSError as exc:  # a node cache that cannot be read: the chunk comes from the registry
                log.error("cached chunk %d of %s cannot be read: %s", index, entry.path, exc)
        url = opened.transport.get(entry.path)
        if url is None:
            raise S3Error(500, "InternalError", f"{entry.path} has no transport URL")
        try:
            self.api.read_range_into(url, start, end, entry.size, data, lambda n: None)
        except RegistryError as exc:
            raise S3Error(503, "SlowDown", f"cannot read {entry.path}: {exc}") from None
        try:
            verify_chunk(chunked, index, data)
        except (ChunkMismatchError, SizeMismatchError) as exc:
            log.error("chunk %d of %s (%s@%d) failed its digest, not served: %s", index, entry.path,
                      opened.release.model, opened.release.version, exc)
            raise S3Error(500, "InternalError", f"{entry.path}: chunk {index} failed its digest") from None
        return len(data), digest


# --- the HTTP endpoint ------------------------------------------------------------------------------

def _parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``[start, end)`` of a ``Range: bytes=a-b`` header (the API's parser); None for the whole object."""
    try:
        return byte_range(header, size)
    except RangeNotSatisfiableError as exc:
        raise S3Error(416, "InvalidRange", str(exc)) from None


def _max_keys(value: str | None) -> int:
    """ListObjectsV2's ``max-keys``: 1000 when absent, at most 1000 (as S3 caps it).

    Raises:
        S3Error: 400 ``InvalidArgument``, not a whole number from 1 up (ASCII digits, at most 19 of them).
    """
    if value is None:
        return 1000
    if not re.fullmatch(r"[0-9]{1,19}", value) or int(value) < 1:
        raise S3Error(400, "InvalidArgument", f"max-keys must be a whole number from 1, not {value[:40]!r}")
    return min(1000, int(value))


def _http_date(when: dt.datetime) -> str:
    return when.strftime("%a, %d %b %Y %H:%M:%S GMT")


class _Handler(BaseHTTPRequestHandler):
    server: "S3Server"
    protocol_version = "HTTP/1.1"
    # A chunk keeps its slot while it is written: a client that stops reading (or sends nothing on an idle
    # connection) for this long is cut, so it can hold a slot for a bounded time only.
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug(format, *args)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._serve(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve(body=False)

    def _refuse(self) -> None:
        self._error(S3Error(405, "MethodNotAllowed", "serve-s3 answers GET and HEAD only"), body=True)

    do_PUT = do_POST = do_DELETE = _refuse  # noqa: N815

    def _error(self, error: S3Error, *, body: bool) -> None:
        log.info("%s %s: %d %s: %s", self.command, self.path, error.status, error.code, error.message)
        xml = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{escape(error.code)}</Code>'
               f"<Message>{escape(error.message)}</Message><Resource>{escape(self.path)}</Resource></Error>").encode()
        self.send_response(error.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(xml)))
        self.end_headers()
        if body:
            self.wfile.write(xml)

    def _serve(self, *, body: bool) -> None:
        started = False
        pieces = None
        try:
            headers = {k.lower(): v for k, v in self.headers.items()}
            target = self.path
            if not target.startswith("/"):
                # The AWS C++ SDK (the Run:ai streamer's) sends the absolute form: http://host:port/path.
                split = urllib.parse.urlsplit(target)
                target = split.path + (f"?{split.query}" if split.query else "")
            verify_sigv4(self.command, target, headers, self.server.keys, dt.datetime.now(dt.timezone.utc))
            path, _, query = target.partition("?")
            bucket, _, key = urllib.parse.unquote(path).lstrip("/").partition("/")
            params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
            if not bucket:
                raise S3Error(400, "InvalidRequest", "path-style addressing only: /<tenant>/<model>@<ref>/<path>")
            if not key:
                if params.get("list-type") != "2":
                    raise S3Error(400, "InvalidRequest", "only ListObjectsV2 (list-type=2) is answered")
                self._list(bucket, params, body=body)
                return
            model_ref, _, file_path = key.partition("/")
            source = self.server.source
            opened = source.release(bucket, model_ref)
            entry = opened.file(file_path)
            span = _parse_range(headers.get("range"), entry.size)
            start, end = span or (0, entry.size)
            piece = None
            if body and start < end:
                chunked = source.chunk_list(opened, entry)
                # The first chunk is checked before the status line goes out: a client sees an S3 error,
                # not a cut-off body, when it fails; each later one is written once it is checked.
                pieces = self._chunks(opened, chunked, start // chunked.chunks.chunk_size, start, end)
                piece = next(pieces)
            self.send_response(206 if span else 200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(end - start))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", f'"{entry.sha256}"')
            self.send_header("Last-Modified", _http_date(opened.release.issued_at))
            if span:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{entry.size}")
            self.end_headers()
            started = True
            while piece is not None:
                self.wfile.write(piece)
                piece.release()  # nothing here holds the chunk once its slot is given back
                piece = next(pieces, None)  # type: ignore[call-overload]
        except S3Error as error:
            if started:
                self.close_connection = True  # mid-body: the connection is cut, the client sees a short read
                return
            self._error(error, body=body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # a bug, not the client's: an S3 error that leaks nothing, not a dropped connection
            log.exception("%s %s failed", self.command, self.path)
            self.close_connection = True
            if not started:
                self._error(S3Error(500, "InternalError", "the endpoint failed; see its log"), body=body)
        finally:
            if pieces is not None:
                pieces.close()  # a body cut short gives its chunk's slot back now, not when collected

    def _chunks(self, opened: OpenRelease, chunked: ChunkedFile, first: int, start: int, end: int):
        size = chunked.chunks.chunk_size
        index = first
        while index * size < end:
            if opened.revoked:
                raise S3Error(403, "AccessDenied", f"{opened.release.model}@{opened.release.version} was revoked")
            source = self.server.source
            with source.slots:
                buffer = source.chunk(opened, chunked, index)
                try:
                    lo, hi = max(start, index * size) - index * size, min(end, (index + 1) * size) - index * size
                    if opened.revoked:
                        raise S3Error(403, "AccessDenied",
                                      f"{opened.release.model}@{opened.release.version} was revoked")
                    # Yielded holding the slot and the buffer: the chunk stays counted until the socket has
                    # taken it, so max_chunks bounds what is held however slowly clients read; the buffer is
                    # reused only after the write has returned (a view: no copy of it).
                    yield buffer.view(lo, hi)
                finally:
                    source.done(buffer)
            index += 1

    def _list(self, bucket: str, params: dict[str, str], *, body: bool) -> None:
        prefix = params.get("prefix", "")
        model_ref, slash, file_prefix = prefix.partition("/")
        if not slash or "@" not in model_ref:
            raise S3Error(400, "InvalidRequest", "list with prefix=<model>@<ref>/ (one release at a time)")
        opened = self.server.source.release(bucket, model_ref)
        after = params.get("start-after", "") or params.get("continuation-token", "")
        limit = _max_keys(params.get("max-keys"))
        matches = sorted((f for f in opened.release.files if f.path.startswith(file_prefix)
                          and f"{model_ref}/{f.path}" > after), key=lambda f: f.path)
        page, truncated = matches[:limit], len(matches) > limit
        modified = opened.release.issued_at.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        contents = "".join(f"<Contents><Key>{escape(model_ref + '/' + f.path)}</Key>"
                           f"<LastModified>{modified}</LastModified><ETag>&quot;{f.sha256}&quot;</ETag>"
                           f"<Size>{f.size}</Size><StorageClass>STANDARD</StorageClass></Contents>" for f in page)
        token = (f"<NextContinuationToken>{escape(model_ref + '/' + page[-1].path)}</NextContinuationToken>"
                 if truncated else "")
        xml = (f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/'
               f'2006-03-01/"><Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>'
               f"<KeyCount>{len(page)}</KeyCount><MaxKeys>{limit}</MaxKeys>"
               f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>{contents}{token}"
               "</ListBucketResult>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(xml)))
        self.end_headers()
        if body:
            self.wfile.write(xml)


class S3Server(ThreadingHTTPServer):
    """The endpoint: loopback only, SigV4 by one of ``keys`` (access key -> secret key)."""

    daemon_threads = True
    # socketserver's default backlog is 5; the Run:ai streamer opens up to 16 workers x 8 connections at once
    # and gives up on a connection not accepted within its 1 s timeout ("File access error").
    request_queue_size = 1024

    def __init__(self, host: str, port: int, source: ChunkSource, keys: dict[str, str]) -> None:
        check_loopback(host)
        if not keys:
            raise InvalidInputError("serve-s3 needs a key pair (--access-key and its secret)")
        self.source, self.keys = source, dict(keys)
        super().__init__((host, port), _Handler)


def keys_from_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The key pair from MODELREG_S3_ACCESS_KEY_ID / MODELREG_S3_SECRET_ACCESS_KEY (empty when unset)."""
    environ = dict(os.environ if environ is None else environ)
    access, secret = environ.get("MODELREG_S3_ACCESS_KEY_ID"), environ.get("MODELREG_S3_SECRET_ACCESS_KEY")
    return {access: secret} if access and secret else {}


def serve(server: S3Server, api: RegistryApi, *, say: Callable[[str], None],
          on_revoked: Callable[[str, str, int], None] | None = None) -> None:
    """Answer requests until Ctrl-C while following the registry's revocations: a revoked version the
    endpoint serves stops being served (ranges in flight included) as its event arrives (and ``on_revoked``
    is told)."""
    source = server.source
    if source.cache is None:
        raise ValueError("serve-s3 keeps the revocations it follows in its node cache: give it one")

    def revoked(report: RevocationReport) -> None:
        source.revoke(report.tenant, report.model, report.version)
        say(f"revoked {report.tenant}/{report.model}@{report.version}: no longer served")
        if on_revoked is not None:
            on_revoked(report.tenant, report.model, report.version)

    follower = RevocationFollower(api, source.cache, on_revoked=revoked,
                                  on_problem=lambda line: say(f"error: revocations: {line}"))
    stop = threading.Event()
    threading.Thread(target=follower.run, args=(stop,), daemon=True, name="revocations").start()
    try:
        server.serve_forever()
    finally:
        stop.set()
        server.server_close()
