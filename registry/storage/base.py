"""The blob store port.

A blob store keeps immutable, content-addressed blobs under ``blobs/sha256/<first 2 hex>/<64 hex>``.
Bytes are hashed while they stream in and committed under their digest only once the digest is known
(and equal to the expected one, when given), so a reader never sees a half-written blob. Every entry
point that takes a digest validates it first (lower-case 64-hex), so a digest never becomes a path or
key traversal such as ``../etc``.
"""

from __future__ import annotations

import abc
import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import BinaryIO, Iterable, Iterator, Union

from registry.domain.errors import (
    DigestMismatchError,
    InvalidInputError,
    NotFoundError,
    SizeMismatchError,
)
from registry.domain.files import require_sha256

ByteSource = Union[BinaryIO, Iterable[bytes]]
"""What ``put`` accepts: a readable binary file object, or an iterable of byte chunks.

An exception raised by the source while it is being read aborts the put: nothing is committed.
"""

STREAM_PATH = "<stream>"
"""The ``path`` of a mismatch error raised for a put without an expected digest."""


def blob_key(digest: str) -> str:
    """The key of a blob, relative to the store's root or prefix.

    Raises:
        InvalidInputError: ``digest`` is not a lower-case hex sha256.
    """
    require_sha256(digest)
    return f"blobs/sha256/{digest[:2]}/{digest}"


def iter_source(source: ByteSource, chunk_size: int) -> Iterator[bytes]:
    """Yield the non-empty byte chunks of ``source``; a file object is read ``chunk_size`` at a time.

    Args:
        source: A readable binary file object or an iterable of ``bytes``.
        chunk_size: Size of each ``read`` on a file object; iterables keep their own chunking.
    """
    read = getattr(source, "read", None)
    if read is not None:
        while chunk := read(chunk_size):
            yield chunk
        return
    for chunk in source:  # type: ignore[union-attr]
        if chunk:
            yield bytes(chunk) if not isinstance(chunk, bytes) else chunk


@dataclass(frozen=True, slots=True)
class BlobInfo:
    digest: str
    size: int
    modified: datetime | None = None
    """When the bytes were committed (aware UTC), where ``iter_blobs`` knows it; garbage collection
    leaves bytes without a row alone until they are older than its grace period."""


@dataclass(frozen=True, slots=True)
class PutResult:
    digest: str
    size: int
    created: bool
    """False when a blob with this digest already existed and was left untouched."""


class BlobStore(abc.ABC):
    """Port for content-addressed blob storage; see ``LocalBlobStore`` and ``S3BlobStore``.

    Every method taking a ``digest`` raises ``InvalidInputError`` when it is not a lower-case hex sha256.
    Failures of the backing store itself raise ``BlobStoreError`` with the cause chained.
    """

    def put(
        self,
        source: ByteSource,
        *,
        expected_sha256: str | None = None,
        expected_size: int | None = None,
    ) -> PutResult:
        """Stream ``source`` into the store, hashing it in the same pass.

        When ``expected_sha256`` is given and that blob already exists, ``source`` is not read at all
        and the result has ``created=False``. The checks are the port's, the same for every store; the
        writing is each store's ``_put_new``.

        Args:
            source: The bytes; an exception it raises while being read aborts the put and propagates.
            expected_sha256: The digest the bytes must have (published upstream, or in a manifest).
            expected_size: The byte count the bytes must have.

        Raises:
            DigestMismatchError: the bytes do not hash to ``expected_sha256``; nothing is committed.
            SizeMismatchError: the byte count differs from ``expected_size``; nothing is committed.
            InvalidInputError: ``expected_sha256`` is not a sha256 or ``expected_size`` is negative.
            BlobStoreError: the backing store failed.
        """
        if expected_sha256 is not None:
            require_sha256(expected_sha256)
            existing = self._stat_or_none(expected_sha256)
            if existing is not None:
                check_size(expected_sha256, expected_size, existing.size)
                return PutResult(expected_sha256, existing.size, created=False)
        if expected_size is not None and expected_size < 0:
            raise InvalidInputError(f"negative expected size {expected_size}", expected_size=expected_size)
        return self._put_new(source, expected_sha256=expected_sha256, expected_size=expected_size)

    @abc.abstractmethod
    def _put_new(self, source: ByteSource, *, expected_sha256: str | None,
                 expected_size: int | None) -> PutResult:
        """Write a blob ``put`` found no stored copy of (arguments already checked), verifying it as ``put`` says.

        The bytes are committed under their digest only once it and the size are known to be the expected
        ones; a blob committed meanwhile by another writer is left as it is (``created=False``).
        """

    @abc.abstractmethod
    def _stat_or_none(self, digest: str) -> BlobInfo | None:
        """The committed blob's info, or None when there is none (``digest`` already validated)."""

    def put_proving_possession(self, source: ByteSource, *, expected_sha256: str | None = None,
                               expected_size: int | None = None) -> PutResult:
        """``put``, except that the whole of ``source`` is read and hashed even when the blob is stored.

        What a caller who is not yet known to hold these bytes must go through: a digest alone
        proves nothing, the bytes do. A source the put did not read (or read only in part) is read
        to its end here, and nothing more is stored.

        Raises:
            DigestMismatchError: the bytes do not hash to ``expected_sha256``.
            SizeMismatchError: the byte count differs from ``expected_size``.
        """
        label = expected_sha256 or STREAM_PATH
        hashed = _HashingSource(source, label, expected_size)
        refused: SizeMismatchError | DigestMismatchError | None = None
        result: PutResult | None = None
        try:
            result = self.put(hashed, expected_sha256=expected_sha256, expected_size=expected_size)
        except (DigestMismatchError, SizeMismatchError) as exc:
            # A stored blob's put compares sizes before reading a byte and names the stored size: whether
            # bytes are stored, and how large, is told to no one. The bytes sent decide the answer.
            refused = exc
        digest, size = hashed.drain()
        if expected_size is not None and size != expected_size:
            raise SizeMismatchError(label, expected=expected_size, actual=size)
        expected = expected_sha256 or (result.digest if result is not None else digest)
        if digest != expected:
            raise DigestMismatchError(label, expected=expected, actual=digest)
        if result is None:
            # The right bytes, refused all the same: the stored blob is damaged, and that is the answer.
            assert refused is not None
            raise refused
        return result

    @abc.abstractmethod
    def exists(self, digest: str) -> bool: ...

    @abc.abstractmethod
    def stat(self, digest: str) -> BlobInfo:
        """Raises BlobNotFoundError."""

    @abc.abstractmethod
    def open_range(self, digest: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Yield the bytes ``[start, end)`` of a blob (``end`` None means to the end).

        ``end`` beyond the blob is clamped to its size; ``end <= start`` or ``start >= size`` yields
        nothing. The blob's existence is checked when this is called, not at the first ``next``.

        Raises:
            BlobNotFoundError: no blob has this digest.
            InvalidInputError: ``start`` or ``end`` is negative.
        """

    @abc.abstractmethod
    def open_seekable(self, digest: str) -> BinaryIO:
        """A read-only, seekable file object over the blob (ranged reads on S3). Raises BlobNotFoundError."""

    @abc.abstractmethod
    def presign_get(self, digest: str, expires_in: timedelta) -> str:
        """A URL that lets its holder GET the blob until it expires."""

    def verify_presigned(self, digest: str, expires: int | str | None, signature: str | None) -> None:
        """Check the query of a URL ``presign_get`` made that the API itself serves; return nothing when good.

        ``GET /v1/blobs/sha256/{digest}`` calls this before it serves a byte. Only a store whose URLs point
        at the API (the local store) serves through it; the default is a store whose URLs point at the
        store itself (S3), for which the API serves no blob at all.

        Args:
            digest: The digest in the URL's path.
            expires: The ``expires`` query parameter (unix seconds), None when absent.
            signature: The ``signature`` query parameter, None when absent.

        Raises:
            NotFoundError: this store's blobs are not served by the API.
            PermissionDeniedError: a parameter is missing (``PresignedUrlError``: the signature does
                not match, or the URL has expired).
            InvalidInputError: ``digest`` is not a sha256.
        """
        require_sha256(digest)
        raise NotFoundError("this registry's blobs are served by its object store, not by the API")

    @abc.abstractmethod
    def delete(self, digest: str) -> None:
        """Remove a blob; deleting a missing blob is not an error (garbage collection may race)."""

    @abc.abstractmethod
    def iter_blobs(self) -> Iterator[BlobInfo]:
        """Every committed blob, with its ``modified`` time; temporary and unfinished uploads are never listed."""

    def unfinished_uploads(self, digest: str) -> list[str]:
        """Ids of unfinished writes at the final key of ``digest``, abandoned or in progress.

        Only stores that write straight to the final key (S3 multipart uploads) have any; the default
        is none (a local store's temporary files carry no digest and are left to ``sweep_incomplete``).
        """
        require_sha256(digest)
        return []

    def abort_uploads(self, digest: str, upload_ids: Iterable[str]) -> int:
        """Abort these unfinished writes of ``digest`` (ids from ``unfinished_uploads``); return how many.

        An id that finished or was aborted meanwhile is skipped. Aborting never commits anything: at
        worst a writer still using the upload fails its put.
        """
        require_sha256(digest)
        return 0

    @abc.abstractmethod
    def sweep_incomplete(self, older_than: timedelta) -> int:
        """Remove temporary keys and unfinished multipart uploads older than ``older_than``; return the count."""

    @abc.abstractmethod
    def check(self) -> None:
        """Raise if the store cannot be reached (used by /readyz)."""


def check_size(label: str, expected: int | None, actual: int) -> None:
    """Raise ``SizeMismatchError`` (naming ``label``) when a size was expected and ``actual`` is not it."""
    if expected is not None and expected != actual:
        raise SizeMismatchError(label, expected=expected, actual=actual)


def check_range(start: int, end: int | None) -> None:
    """Raise ``InvalidInputError`` for a negative ``start`` or ``end`` of ``open_range``."""
    if start < 0 or (end is not None and end < 0):
        raise InvalidInputError(f"bad byte range [{start}, {end})", start=start, end=end)


class _HashingSource:
    """Hashes every chunk read through it, however far its reader goes; ``drain`` reads the rest."""

    CHUNK_SIZE = 1024 * 1024

    def __init__(self, source: ByteSource, label: str, limit: int | None) -> None:
        self._chunks = iter_source(source, self.CHUNK_SIZE)
        self._hasher = hashlib.sha256()
        self._label = label
        self._limit = limit
        self._overflow: SizeMismatchError | None = None
        self.size = 0

    def __iter__(self) -> Iterator[bytes]:
        if self._overflow is not None:
            raise self._overflow
        for chunk in self._chunks:
            self._hasher.update(chunk)
            self.size += len(chunk)
            if self._limit is not None and self.size > self._limit:
                # Never read an endless source to its end; drain after this reads no further.
                self._overflow = SizeMismatchError(self._label, expected=self._limit, actual=self.size)
                raise self._overflow
            yield chunk

    def drain(self) -> tuple[str, int]:
        """Read what the reader left; return the sha256 and size of the whole source."""
        for _ in self:
            pass
        return self._hasher.hexdigest(), self.size
