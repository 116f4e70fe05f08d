"""A blob store in a local directory: the embedded default.

Layout under ``root``::

    blobs/sha256/<first 2 hex>/<64 hex>   committed blobs, read-only files
    tmp/put-*                              puts in progress (or left by a crash; see sweep_incomplete)

A put writes a temporary file in ``tmp/`` (same filesystem as ``blobs/``), hashing and counting in the
same pass, fsyncs it and links it under its digest only when digest and size are as expected, so a
crash at any point leaves at most a temporary file and never a half-written blob.

Presigned URLs are ``{public_url}/v1/blobs/sha256/{digest}?expires=<unix>&signature=<hex>``, an
HMAC-SHA256 the API checks with :meth:`LocalBlobStore.verify_presigned`.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import queue
import re
import tempfile
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import BinaryIO, Iterator

from registry.domain.errors import (
    BlobNotFoundError,
    BlobStoreError,
    DigestMismatchError,
    InvalidInputError,
    PermissionDeniedError,
    PresignedUrlError,
    SizeMismatchError,
)
from registry.domain.files import is_sha256, require_sha256
from registry.statefile import fsync_dir
from registry.storage.base import (
    STREAM_PATH,
    BlobInfo,
    BlobStore,
    ByteSource,
    PutResult,
    blob_key,
    check_range,
    check_size,
    iter_source,
)

CHUNK_SIZE = 1024 * 1024
QUEUE_DEPTH = 8  # chunks in flight to the writer thread: bounds memory to ~8 MiB per put
TEMP_PREFIX = "put-"
_EXPIRES_RE = re.compile(r"\A[0-9]{1,20}\Z")
_SIGNATURE_RE = re.compile(r"\A[0-9a-f]{64}\Z")


class LocalBlobStore(BlobStore):
    """Content-addressed blobs in a directory.

    Args:
        root: The store's directory; ``blobs/`` and ``tmp/`` are created inside it.
        presign_secret: HMAC key for presigned URLs; every process serving the same root needs the same one.
        public_url: Base URL of the API that serves ``/v1/blobs``; None gives URLs relative to it.
    """

    def __init__(self, root: Path, presign_secret: bytes, public_url: str | None = None) -> None:
        if not presign_secret:
            raise InvalidInputError("presign_secret must not be empty")
        self.root = Path(root)
        self._blobs = self.root / "blobs" / "sha256"
        self._tmp = self.root / "tmp"
        self._secret = presign_secret
        self._public_url = (public_url or "").rstrip("/")
        self._blobs.mkdir(parents=True, exist_ok=True)
        self._tmp.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalBlobStore({str(self.root)!r})"

    def _path(self, digest: str) -> Path:
        # blob_key validates the digest, so the joined path stays inside root.
        return self.root / blob_key(digest)

    # --- writing ---------------------------------------------------------------------------

    def _put_new(self, source: ByteSource, *, expected_sha256: str | None,
                 expected_size: int | None) -> PutResult:
        """Stream ``source`` into a temporary file, then commit it under its digest.

        Raises:
            BlobStoreError: the filesystem failed (full disk, permissions); the rest as ``BlobStore.put``.
        """
        label = expected_sha256 or STREAM_PATH

        try:
            fd, tmp_name = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=self._tmp)
        except OSError as exc:
            raise BlobStoreError("put", str(exc), key=str(self._tmp)) from exc
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb", buffering=0) as out:
                digest, size = self._write_temp(source, out, tmp, label, expected_size)
            check_size(label, expected_size, size)
            if expected_sha256 is not None and digest != expected_sha256:
                raise DigestMismatchError(expected_sha256, expected=expected_sha256, actual=digest)
            try:
                created = self._commit(tmp, digest)
            except OSError as exc:
                raise BlobStoreError("put", str(exc), key=digest) from exc
            return PutResult(digest, size, created)
        finally:
            tmp.unlink(missing_ok=True)

    @staticmethod
    def _write_temp(
        source: ByteSource, out, tmp: Path, label: str, expected_size: int | None
    ) -> tuple[str, int]:
        hasher = hashlib.sha256()
        size = 0
        # Hashing here while a second thread writes overlaps the two (both release the GIL), so a put
        # costs about as much as a plain copy instead of a copy plus a hash.
        writer = _Writer(out)
        try:
            # Errors of the source (even OSErrors such as a dropped connection) propagate as they are;
            # only our own writes are translated.
            for chunk in iter_source(source, CHUNK_SIZE):
                hasher.update(chunk)
                size += len(chunk)
                if expected_size is not None and size > expected_size:
                    # Stop reading a source that is already too long.
                    raise SizeMismatchError(label, expected=expected_size, actual=size)
                with _filesystem_errors("put", tmp):
                    writer.write(chunk)
            with _filesystem_errors("put", tmp):
                writer.close()
                os.fsync(out.fileno())
        finally:
            writer.stop()
        return hasher.hexdigest(), size

    def _commit(self, tmp: Path, digest: str) -> bool:
        final = self._path(digest)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(tmp, 0o444)
        try:
            # A hard link, unlike rename, refuses to replace an existing blob: blobs are never overwritten,
            # and a concurrent put of the same bytes is reported as created=False.
            os.link(tmp, final)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            # Filesystems without hard links: check then rename (the race only swaps identical bytes).
            if final.exists():
                return False
            os.replace(tmp, final)
        fsync_dir(final.parent)
        return True

    # --- reading ---------------------------------------------------------------------------

    def _stat_or_none(self, digest: str) -> BlobInfo | None:
        try:
            return BlobInfo(digest, self._path(digest).stat().st_size)
        except FileNotFoundError:
            return None

    def exists(self, digest: str) -> bool:
        """Whether a blob with this digest is committed. Raises InvalidInputError on a bad digest."""
        return self._stat_or_none(digest) is not None

    def stat(self, digest: str) -> BlobInfo:
        """Size of a committed blob. Raises BlobNotFoundError, InvalidInputError."""
        info = self._stat_or_none(digest)
        if info is None:
            raise BlobNotFoundError(digest)
        return info

    def open_seekable(self, digest: str) -> BinaryIO:
        """The blob's file, opened for reading. Raises BlobNotFoundError, InvalidInputError."""
        try:
            return open(self._path(digest), "rb")
        except FileNotFoundError:
            raise BlobNotFoundError(digest) from None

    def open_range(self, digest: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Yield the bytes ``[start, end)`` of a blob, a megabyte at a time.

        Raises:
            BlobNotFoundError: no blob has this digest.
            InvalidInputError: a bad digest, or a negative ``start``/``end``.
        """
        check_range(start, end)
        handle = self.open_seekable(digest)
        return _iter_file_range(handle, start, end)

    # --- presigned URLs --------------------------------------------------------------------

    def _signature(self, digest: str, expires: int) -> str:
        return hmac.new(self._secret, f"GET\n{digest}\n{expires}".encode(), hashlib.sha256).hexdigest()

    def presign_get(self, digest: str, expires_in: timedelta) -> str:
        """``{public_url}/v1/blobs/sha256/{digest}?expires=<unix>&signature=<hex>``, valid ``expires_in``."""
        require_sha256(digest)
        expires = int(time.time() + expires_in.total_seconds())
        return (
            f"{self._public_url}/v1/blobs/sha256/{digest}"
            f"?expires={expires}&signature={self._signature(digest, expires)}"
        )

    def verify_presigned(self, digest: str, expires: int | str | None, signature: str | None) -> None:
        """Check the query of a URL ``presign_get`` made (``BlobStore.verify_presigned``).

        Raises:
            PermissionDeniedError: ``expires`` or ``signature`` is missing.
            PresignedUrlError: the signature does not match, or the URL has expired.
            InvalidInputError: ``digest`` is not a sha256.
        """
        require_sha256(digest)
        if expires is None or signature is None:
            raise PermissionDeniedError("a blob URL needs its expires and signature parameters", digest=digest)
        # Only the forms presign_get writes: int() would also take "+1", "1_0", other scripts' digits and
        # thousands of digits, and compare_digest raises on a non-ASCII str.
        if not isinstance(expires, int) and not (isinstance(expires, str) and _EXPIRES_RE.match(expires)):
            raise PresignedUrlError(digest, "malformed expiry")
        if not isinstance(signature, str) or not _SIGNATURE_RE.match(signature):
            raise PresignedUrlError(digest, "signature mismatch")
        expires_at = int(expires)
        if not hmac.compare_digest(self._signature(digest, expires_at), signature):
            raise PresignedUrlError(digest, "signature mismatch")
        # Checked after the signature so an attacker learns nothing about expiry of forged URLs.
        if expires_at < time.time():
            raise PresignedUrlError(digest, "expired")

    # --- maintenance -----------------------------------------------------------------------

    def delete(self, digest: str) -> None:
        """Remove a blob if present. Raises InvalidInputError on a bad digest."""
        try:
            self._path(digest).unlink(missing_ok=True)
        except OSError as exc:
            raise BlobStoreError("delete", str(exc), key=digest) from exc

    def iter_blobs(self) -> Iterator[BlobInfo]:
        """Every committed blob, in digest order; stray names in ``blobs/`` are ignored."""
        for shard in sorted(self._blobs.iterdir()):
            if not shard.is_dir():
                continue
            for entry in sorted(os.scandir(shard), key=lambda e: e.name):
                name = entry.name
                if is_sha256(name) and name[:2] == shard.name and entry.is_file(follow_symlinks=False):
                    try:
                        stat = entry.stat()
                        yield BlobInfo(name, stat.st_size,
                                       datetime.fromtimestamp(stat.st_mtime, timezone.utc))
                    except FileNotFoundError:  # deleted while listing
                        continue

    def sweep_incomplete(self, older_than: timedelta) -> int:
        """Delete temporary files last written more than ``older_than`` ago; return how many."""
        cutoff = time.time() - older_than.total_seconds()
        removed = 0
        for entry in os.scandir(self._tmp):
            if not entry.name.startswith(TEMP_PREFIX):
                continue
            try:
                if entry.stat(follow_symlinks=False).st_mtime <= cutoff:
                    os.unlink(entry.path)
                    removed += 1
            except FileNotFoundError:  # the put finished meanwhile
                continue
        return removed

    def check(self) -> None:
        """Raise BlobStoreError unless a file can really be written in the temp directory.

        A real write, not ``os.access``: root passes every permission check, but not a read-only
        or full filesystem, nor a directory replaced by a file.
        """
        if not self._blobs.is_dir():
            raise BlobStoreError("check", f"{self._blobs} is not a directory", key=str(self._blobs))
        with _filesystem_errors("check", self._tmp):
            fd, probe = tempfile.mkstemp(prefix="check-", dir=self._tmp)
            try:
                os.write(fd, b"ok")
            finally:
                os.close(fd)
                os.unlink(probe)


@contextmanager
def _filesystem_errors(operation: str, path: Path) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise BlobStoreError(operation, str(exc), key=str(path)) from exc


class _Writer:
    """Writes chunks to ``out`` on a background thread, at most ``QUEUE_DEPTH`` chunks behind."""

    def __init__(self, out) -> None:
        self._out = out
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=QUEUE_DEPTH)
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._run, name="blob-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            if self._error is None:
                try:
                    _write_all(self._out, chunk)
                except OSError as exc:
                    self._error = exc  # keep draining so the producer never blocks forever

    def write(self, chunk: bytes) -> None:
        """Queue a chunk. Raises OSError from an earlier write."""
        if self._error is not None:
            raise self._error
        self._queue.put(chunk)

    def close(self) -> None:
        """Wait until every queued chunk is written. Raises OSError from any write."""
        self.stop()
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()


def _write_all(out, chunk: bytes) -> None:
    # An unbuffered write may be short; loop on a view to avoid copying the rest.
    view = memoryview(chunk)
    while view:
        written = out.write(view)
        view = view[written:]


def _iter_file_range(handle: BinaryIO, start: int, end: int | None) -> Iterator[bytes]:
    with handle:
        handle.seek(start)
        remaining = None if end is None else max(0, end - start)
        while remaining is None or remaining > 0:
            chunk = handle.read(CHUNK_SIZE if remaining is None else min(CHUNK_SIZE, remaining))
            if not chunk:
                return
            if remaining is not None:
                remaining -= len(chunk)
            yield chunk


