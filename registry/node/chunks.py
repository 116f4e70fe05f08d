"""Checking chunks of a released file with nothing but the signed release: no I/O here but one fetch.

A verified release (:func:`registry.signing.release.verify_release`) signs, per file, a chunk size and
the root of its chunk list (:mod:`registry.domain.chunks`). A node streaming ranges first loads the
list (fetched beside the release, unsigned) and checks it against the root (:func:`load_chunk_list`),
then checks every chunk it fetched before handing out a byte of it (:func:`verify_chunk`).

Example:
    >>> import hashlib
    >>> from registry.signing.release import ReleaseFile
    >>> data = b"weights!!"
    >>> digests = b"".join(hashlib.sha256(data[i:i + 1024]).digest() for i in range(0, len(data), 1024))
    >>> entry = ReleaseFile("model.safetensors", len(data), hashlib.sha256(data).hexdigest(),
    ...                     chunk_size=1024, chunk_root=hashlib.sha256(digests).hexdigest())
    >>> chunked = load_chunk_list(entry, digests)
    >>> verify_chunk(chunked, 0, data)
    >>> verify_chunk(chunked, 0, b"weights!?")
    Traceback (most recent call last):
    ...
    registry.domain.errors.ChunkMismatchError: model.safetensors: chunk 0: expected ..., got ...
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from registry.domain.chunks import DIGEST_SIZE, ChunkList, chunk_count, chunk_root
from registry.domain.errors import ChunkMismatchError, ChunksNotRecordedError, SizeMismatchError
from registry.signing.release import ReleaseFile

if TYPE_CHECKING:
    from registry.client.api import RegistryApi


@dataclass(frozen=True, slots=True)
class ChunkedFile:
    """A released file with its chunk list, checked against the root the release signs."""

    entry: ReleaseFile
    chunks: ChunkList

    @property
    def count(self) -> int:
        return self.chunks.count

    def span(self, index: int) -> tuple[int, int]:
        """The byte range ``[start, end)`` of chunk ``index`` (InvalidInputError when there is none)."""
        return self.chunks.span(index)


def load_chunk_list(entry: ReleaseFile, raw: bytes) -> ChunkedFile:
    """Check a fetched chunk list against the chunk root the release signs for ``entry``.

    Raises:
        ChunksNotRecordedError: the release signs no chunk digests for this file (fetch it whole).
        ChunkMismatchError: the list is not the one the release signs (its length or its root).
    """
    if entry.chunk_size is None or entry.chunk_root is None:
        raise ChunksNotRecordedError(entry.path, entry.sha256)
    expected = DIGEST_SIZE * chunk_count(entry.size, entry.chunk_size)
    if len(raw) != expected:
        raise ChunkMismatchError(entry.path, chunk=None, expected=f"{expected} bytes", actual=f"{len(raw)} bytes")
    actual = chunk_root(raw)
    if actual != entry.chunk_root:
        raise ChunkMismatchError(entry.path, chunk=None, expected=entry.chunk_root, actual=actual)
    return ChunkedFile(entry, ChunkList(entry.chunk_size, entry.size, bytes(raw)))


def verify_chunk(file: ChunkedFile, chunk_index: int, data: bytes | bytearray | memoryview) -> None:
    """Return nothing when ``data`` is chunk ``chunk_index`` of the file, whole; raise otherwise.

    Raises:
        InvalidInputError: the file has no chunk ``chunk_index``.
        SizeMismatchError: ``data`` is not the chunk's length (every chunk is ``chunk_size`` but the last).
        ChunkMismatchError: its digest is not the one the list (so the release) holds.
    """
    start, end = file.span(chunk_index)
    if len(data) != end - start:
        raise SizeMismatchError(f"{file.entry.path} chunk {chunk_index}", expected=end - start, actual=len(data))
    actual = hashlib.sha256(data).digest()
    expected = file.chunks.digest(chunk_index)
    if actual != expected:
        raise ChunkMismatchError(file.entry.path, chunk=chunk_index, expected=expected.hex(), actual=actual.hex())


def fetch_chunk_list(api: "RegistryApi", tenant: str, name: str, version: int, entry: ReleaseFile) -> ChunkedFile:
    """Fetch the chunk list of a released file from the registry and check it (:func:`load_chunk_list`).

    Reads no more bytes than the release says the list has.

    Raises:
        ChunksNotRecordedError: the release signs no chunk digests for the file, or the registry has none.
        ChunkMismatchError: the list is not the one the release signs.
        NetworkError: the registry is unreachable or misbehaves.
    """
    if entry.chunk_size is None or entry.chunk_root is None:
        raise ChunksNotRecordedError(entry.path, entry.sha256)
    limit = DIGEST_SIZE * chunk_count(entry.size, entry.chunk_size)
    return load_chunk_list(entry, api.chunk_list(tenant, name, version, entry.sha256, limit=limit))
