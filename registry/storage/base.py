"""The blob store port.

A blob store keeps immutable, content-addressed blobs under ``blobs/sha256/<first 2 hex>/<64 hex>``.
Bytes are hashed while they stream in and committed under their digest only once the digest is known
(and equal to the expected one, when given), so a reader never sees a half-written blob.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from datetime import timedelta
from typing import BinaryIO, Iterable, Iterator, Union

ByteSource = Union[BinaryIO, Iterable[bytes]]
"""What ``put`` accepts: a readable binary file object, or an iterable of byte chunks.

An exception raised by the source while it is being read aborts the put: nothing is committed.
"""


def blob_key(digest: str) -> str:
    """The key of a blob, relative to the store's root or prefix."""
    return f"blobs/sha256/{digest[:2]}/{digest}"


@dataclass(frozen=True, slots=True)
class BlobInfo:
    digest: str
    size: int


@dataclass(frozen=True, slots=True)
class PutResult:
    digest: str
    size: int
    created: bool
    """False when a blob with this digest already existed and was left untouched."""


class BlobStore(abc.ABC):
    """Port for content-addressed blob storage; see ``LocalBlobStore`` and ``S3BlobStore``."""

    @abc.abstractmethod
    def put(
        self,
        source: ByteSource,
        *,
        expected_sha256: str | None = None,
        expected_size: int | None = None,
    ) -> PutResult:
        """Stream ``source`` into the store, hashing it in the same pass.

        Raises:
            DigestMismatchError: the bytes do not hash to ``expected_sha256``; nothing is committed.
            SizeMismatchError: the byte count differs from ``expected_size``; nothing is committed.
        """

    @abc.abstractmethod
    def exists(self, digest: str) -> bool: ...

    @abc.abstractmethod
    def stat(self, digest: str) -> BlobInfo:
        """Raises BlobNotFoundError."""

    @abc.abstractmethod
    def open_range(self, digest: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Yield the bytes ``[start, end)`` of a blob (``end`` None means to the end). Raises BlobNotFoundError."""

    @abc.abstractmethod
    def open_seekable(self, digest: str) -> BinaryIO:
        """A read-only, seekable file object over the blob (ranged reads on S3). Raises BlobNotFoundError."""

    @abc.abstractmethod
    def presign_get(self, digest: str, expires_in: timedelta) -> str:
        """A URL that lets its holder GET the blob until it expires."""

    @abc.abstractmethod
    def delete(self, digest: str) -> None: ...

    @abc.abstractmethod
    def iter_blobs(self) -> Iterator[BlobInfo]: ...

    @abc.abstractmethod
    def sweep_incomplete(self, older_than: timedelta) -> int:
        """Remove temporary keys and unfinished multipart uploads older than ``older_than``; return the count."""

    @abc.abstractmethod
    def check(self) -> None:
        """Raise if the store cannot be reached (used by /readyz)."""
