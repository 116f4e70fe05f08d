"""Chunk lists (registry/domain/chunks.py) against a straightforward re-read of the bytes, at the edges."""

from __future__ import annotations

import hashlib
import os

import pytest

from registry.domain.chunks import CHUNK_SIZE, ChunkHasher, ChunkList, check_chunk_size, chunk_count
from registry.domain.errors import InvalidInputError

SIZE = 1024


def reread(data: bytes, chunk_size: int) -> bytes:
    """The chunk list the slow way: slice, hash, concatenate."""
    return b"".join(hashlib.sha256(data[i:i + chunk_size]).digest() for i in range(0, len(data), chunk_size))


@pytest.mark.parametrize("length", [0, 1, SIZE - 1, SIZE, SIZE + 1, 2 * SIZE, 7 * SIZE + 13],
                         ids=lambda n: f"{n}-bytes")
@pytest.mark.parametrize("piece", [1, 100, SIZE, 3 * SIZE + 7], ids=lambda n: f"fed-{n}")
def test_the_list_is_the_reread_however_the_bytes_are_fed(length: int, piece: int) -> None:
    data = os.urandom(length)
    hasher = ChunkHasher(SIZE)
    for i in range(0, len(data), piece):
        hasher.update(data[i:i + piece])
    chunks = hasher.finish()
    assert chunks.digests == reread(data, SIZE)
    assert (chunks.size, chunks.chunk_size, chunks.count) == (length, SIZE, chunk_count(length, SIZE))
    assert chunks.root == hashlib.sha256(reread(data, SIZE)).hexdigest()
    for index in range(chunks.count):
        start, end = chunks.span(index)
        assert chunks.digest(index) == hashlib.sha256(data[start:end]).digest()


def test_the_last_partial_chunk_is_its_own_chunk_and_no_empty_chunk_follows_a_full_one() -> None:
    one_more = ChunkHasher(SIZE)
    one_more.update(b"x" * (SIZE + 1))
    chunks = one_more.finish()
    assert chunks.count == 2 and chunks.span(1) == (SIZE, SIZE + 1)
    assert chunks.digest(1) == hashlib.sha256(b"x").digest()
    exact = ChunkHasher(SIZE)
    exact.update(b"x" * SIZE)
    assert exact.finish().count == 1
    assert ChunkHasher(SIZE).finish().count == 0  # an empty file has no chunks, and the root of nothing


def test_the_default_chunk_size_is_the_streamers_object_store_read_size() -> None:
    assert CHUNK_SIZE == 8 * 1024 * 1024 and ChunkHasher().chunk_size == CHUNK_SIZE


@pytest.mark.parametrize("bad", [0, 1000, 3 << 20, 1 << 31, 512, -4096, "8388608", 8388608.0, True])
def test_a_chunk_size_is_a_power_of_two_in_range(bad) -> None:
    with pytest.raises(InvalidInputError):
        check_chunk_size(bad)


def test_a_list_of_the_wrong_length_for_its_file_is_refused() -> None:
    with pytest.raises(InvalidInputError):
        ChunkList(SIZE, SIZE + 1, b"\0" * 32)
    with pytest.raises(InvalidInputError):
        ChunkList(SIZE, 0, b"\0" * 32)
    assert ChunkList(SIZE, SIZE + 1, b"\0" * 64).count == 2


@pytest.mark.parametrize("index", [-1, 2, "0", None])
def test_there_is_no_chunk_outside_the_file(index) -> None:
    chunks = ChunkList(SIZE, SIZE + 1, b"\0" * 64)
    with pytest.raises(InvalidInputError):
        chunks.span(index)
    with pytest.raises(InvalidInputError):
        chunks.digest(index)
