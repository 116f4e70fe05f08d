"""Chunk digests: the SHA-256 of each fixed-size, aligned chunk of a file, for checking ranged reads.

A file of ``size`` bytes has ``ceil(size / chunk_size)`` chunks; chunk ``i`` is the bytes
``[i * chunk_size, min(size, (i + 1) * chunk_size))`` (only the last may be shorter; an empty file has
none). Its *chunk list* is the concatenation of the 32-byte digests, in order, and its *chunk root*
the hex SHA-256 of that list: what a release signs per file, so a node that holds the signed release
checks a fetched list against the root, then each chunk against the list (docs/adr/0013-chunk-digests.md).

:class:`ChunkHasher` is fed the bytes as they stream past (in chunks of any size, the same pass that
computes the file's own digest) and gives the list at the end.

Example:
    >>> hasher = ChunkHasher(chunk_size=1024)
    >>> hasher.update(b"w" * 1000); hasher.update(b"x" * 1049)
    >>> chunks = hasher.finish()
    >>> chunks.count, chunks.span(2), chunks.digest(2) == hashlib.sha256(b"x").digest()
    (3, (2048, 2049), True)
    >>> chunks.root == hashlib.sha256(chunks.digests).hexdigest()
    True
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from registry.domain.errors import InvalidInputError

CHUNK_SIZE = 8 << 20
"""8 MiB: Run:ai Model Streamer's default read size from object storage (``RUNAI_STREAMER_CHUNK_BYTESIZE``,
minimum 5 MiB), so one of its ranged reads covers at most two chunks."""
DIGEST_SIZE = 32
MIN_CHUNK_SIZE = 1 << 10
MAX_CHUNK_SIZE = 1 << 30


def check_chunk_size(chunk_size: int) -> int:
    """Return ``chunk_size`` if it is a power of two between 1 KiB and 1 GiB.

    Raises:
        InvalidInputError: it is not.
    """
    if type(chunk_size) is not int or not MIN_CHUNK_SIZE <= chunk_size <= MAX_CHUNK_SIZE \
            or chunk_size & (chunk_size - 1):
        raise InvalidInputError(f"a chunk size is a power of two from {MIN_CHUNK_SIZE} to {MAX_CHUNK_SIZE} bytes, "
                                f"not {chunk_size!r}", chunk_size=repr(chunk_size)[:40])
    return chunk_size


def chunk_count(size: int, chunk_size: int) -> int:
    """How many chunks a file of ``size`` bytes has (none when it is empty)."""
    return -(-size // chunk_size)


def chunk_root(digests: bytes) -> str:
    """The hex SHA-256 of a chunk list (the concatenated 32-byte digests)."""
    return hashlib.sha256(digests).hexdigest()


@dataclass(frozen=True, slots=True)
class ChunkList:
    """The chunk digests of one file of ``size`` bytes; ``digests`` holds ``count`` of them, 32 bytes each."""

    chunk_size: int
    size: int
    digests: bytes

    def __post_init__(self) -> None:
        check_chunk_size(self.chunk_size)
        if len(self.digests) != DIGEST_SIZE * chunk_count(self.size, self.chunk_size):
            raise InvalidInputError(
                f"a file of {self.size} bytes has {chunk_count(self.size, self.chunk_size)} chunks of "
                f"{self.chunk_size}, not {len(self.digests) / DIGEST_SIZE:g}", size=self.size,
                chunk_size=self.chunk_size, digest_bytes=len(self.digests))

    @property
    def count(self) -> int:
        return len(self.digests) // DIGEST_SIZE

    @property
    def root(self) -> str:
        return chunk_root(self.digests)

    def span(self, index: int) -> tuple[int, int]:
        """The byte range ``[start, end)`` of chunk ``index``.

        Raises:
            InvalidInputError: the file has no chunk ``index``.
        """
        if type(index) is not int or not 0 <= index < self.count:
            raise InvalidInputError(f"no chunk {index!r} in a file of {self.count} chunks", chunk=repr(index)[:40],
                                    chunks=self.count)
        start = index * self.chunk_size
        return start, min(self.size, start + self.chunk_size)

    def digest(self, index: int) -> bytes:
        """The 32-byte digest of chunk ``index`` (InvalidInputError when there is none)."""
        self.span(index)
        return self.digests[index * DIGEST_SIZE:(index + 1) * DIGEST_SIZE]


class ChunkHasher:
    """Hashes a stream chunk by chunk while it passes: ``update`` with pieces of any size, then ``finish``."""

    def __init__(self, chunk_size: int = CHUNK_SIZE) -> None:
        self.chunk_size = check_chunk_size(chunk_size)
        self.size = 0
        self._digests = bytearray()
        self._current = hashlib.sha256()
        self._filled = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        while view:
            take = min(len(view), self.chunk_size - self._filled)
            self._current.update(view[:take])
            self._filled += take
            self.size += take
            view = view[take:]
            if self._filled == self.chunk_size:
                self._digests += self._current.digest()
                self._current, self._filled = hashlib.sha256(), 0

    def finish(self) -> ChunkList:
        """The chunk list of everything fed so far (the last, partial chunk included)."""
        digests = bytes(self._digests)
        if self._filled:
            digests += self._current.digest()
        return ChunkList(self.chunk_size, self.size, digests)
