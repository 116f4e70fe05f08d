"""The BlobStore contract, puts: large and small blobs hashed and committed under the documented keys, a digest
or size mismatch commits nothing, a re-put proves possession, concurrent and overtaken puts create once, a
source failing midway leaves nothing. Each test runs on LocalBlobStore and S3BlobStore (SeaweedFS)."""

from __future__ import annotations

import hashlib
import io
import threading
from collections.abc import Iterator

import pytest

from registry.domain.errors import (
    DigestMismatchError,
    SizeMismatchError,
)
from tests.support.blob_store_harness import (
    BIG,
    BIG_SHA,
    MIB,
    SMALL,
    SMALL_SHA,
    ExplodingReader,
    Harness,
    UpstreamDroppedError,
    chunks,
    dropping_source,
    exploding_iterable,
    make_s3_store,
)


@pytest.mark.parametrize("expected", [False, True], ids=["unknown-digest", "known-digest"])
@pytest.mark.parametrize("shape", ["file", "iterable"])
def test_put_large_blob_hashes_and_commits(harness: Harness, shape: str, expected: bool) -> None:
    # Irregular 1.3 MiB chunks make parts that do not align with the chunking.
    source = io.BytesIO(BIG) if shape == "file" else chunks(BIG, 1_300_000)
    result = harness.store.put(
        source, expected_sha256=BIG_SHA if expected else None, expected_size=len(BIG) if expected else None
    )

    assert (result.digest, result.size, result.created) == (BIG_SHA, len(BIG), True)
    assert harness.store.stat(BIG_SHA).size == len(BIG)
    assert b"".join(harness.store.open_range(BIG_SHA)) == BIG
    assert [b.digest for b in harness.store.iter_blobs()] == [BIG_SHA]
    # Only the committed blob remains: no temporary key, no unfinished upload.
    assert [p for p in harness.leftovers() if BIG_SHA not in p and not p.endswith("presign.key")] == []


@pytest.mark.parametrize("data", [SMALL, b""], ids=["small", "empty"])
def test_put_small_and_empty_blobs(harness: Harness, data: bytes) -> None:
    digest = hashlib.sha256(data).hexdigest()
    result = harness.store.put(io.BytesIO(data))
    assert (result.digest, result.size, result.created) == (digest, len(data), True)
    assert b"".join(harness.store.open_range(digest)) == data
    assert harness.store.put(iter([data]), expected_sha256=digest).created is False


def test_blob_keys_follow_the_documented_layout(harness: Harness) -> None:
    harness.store.put(io.BytesIO(SMALL))
    relative = f"blobs/sha256/{SMALL_SHA[:2]}/{SMALL_SHA}"
    if harness.kind == "local":
        assert (harness.store.root / relative).read_bytes() == SMALL
        return
    assert harness.leftovers() == [f"reg/{relative}"]
    # With no prefix, keys start at the bucket's root, without a leading slash.
    bare = make_s3_store(harness.s3_server, harness.bucket, prefix="")
    bare.put(io.BytesIO(BIG), expected_sha256=BIG_SHA)
    keys = [o["Key"] for o in harness.s3_server.client().list_objects_v2(Bucket=harness.bucket)["Contents"]]
    assert f"blobs/sha256/{BIG_SHA[:2]}/{BIG_SHA}" in keys
    assert sorted(b.digest for b in bare.iter_blobs()) == [BIG_SHA]


@pytest.mark.parametrize("data", [BIG, SMALL], ids=["multipart", "single"])
def test_digest_mismatch_commits_nothing(harness: Harness, data: bytes) -> None:
    wrong = hashlib.sha256(b"what upstream published").hexdigest()
    with pytest.raises(DigestMismatchError) as caught:
        harness.store.put(chunks(data, MIB), expected_sha256=wrong)
    assert caught.value.details["expected"] == wrong
    assert caught.value.details["actual"] == hashlib.sha256(data).hexdigest()
    assert caught.value.details["path"] == wrong
    assert not harness.store.exists(wrong)
    harness.assert_nothing_committed()


@pytest.mark.parametrize("delta", [-1, +1], ids=["source-too-long", "source-too-short"])
@pytest.mark.parametrize("known_digest", [False, True])
def test_size_mismatch_commits_nothing(harness: Harness, delta: int, known_digest: bool) -> None:
    with pytest.raises(SizeMismatchError) as caught:
        harness.store.put(
            io.BytesIO(BIG), expected_sha256=BIG_SHA if known_digest else None, expected_size=len(BIG) + delta
        )
    assert caught.value.details["expected"] == len(BIG) + delta
    assert caught.value.details["path"] == (BIG_SHA if known_digest else "<stream>")
    harness.assert_nothing_committed()


def test_reput_with_known_digest_does_not_read_the_source(harness: Harness) -> None:
    assert harness.store.put(io.BytesIO(BIG)).created is True
    assert harness.store.put(io.BytesIO(SMALL), expected_sha256=SMALL_SHA).created is True

    for digest, size in ((BIG_SHA, len(BIG)), (SMALL_SHA, len(SMALL))):
        for source in (ExplodingReader(), exploding_iterable()):
            result = harness.store.put(source, expected_sha256=digest)
            assert (result.digest, result.size, result.created) == (digest, size, False)
    # An existing blob with another size than expected is an error, not a silent success.
    with pytest.raises(SizeMismatchError):
        harness.store.put(ExplodingReader(), expected_sha256=SMALL_SHA, expected_size=len(SMALL) + 1)


class CountingSource:
    """An iterable source that counts the bytes taken from it."""

    def __init__(self, data: bytes, size: int = MIB) -> None:
        self._chunks = chunks(data, size)
        self.taken = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.taken += len(chunk)
            yield chunk


@pytest.mark.parametrize("data,digest", [(BIG, BIG_SHA), (SMALL, SMALL_SHA)], ids=["multipart", "small"])
def test_put_proving_possession_reads_a_stored_blobs_source_to_the_end(harness: Harness, data, digest):
    """Holding a digest proves nothing: whoever is not yet known to hold the bytes must send them all."""
    new = CountingSource(data)
    assert harness.store.put_proving_possession(new, expected_sha256=digest, expected_size=len(data)).created
    assert new.taken == len(data)

    again = CountingSource(data)
    result = harness.store.put_proving_possession(again, expected_sha256=digest)
    assert (result.digest, result.size, result.created, again.taken) == (digest, len(data), False, len(data))

    # The last byte differs: found only by reading to the end, and the stored blob is untouched.
    with pytest.raises(DigestMismatchError):
        harness.store.put_proving_possession(chunks(data[:-1] + b"\0", MIB), expected_sha256=digest)
    with pytest.raises(SizeMismatchError):
        harness.store.put_proving_possession(chunks(data + b"more", MIB), expected_sha256=digest,
                                             expected_size=len(data))
    with pytest.raises(DigestMismatchError):
        harness.store.put_proving_possession(chunks(data + b"more", MIB), expected_sha256=digest)
    assert b"".join(harness.store.open_range(digest)) == data
    assert [b.digest for b in harness.store.iter_blobs()] == [digest]


def test_reput_without_digest_leaves_the_blob_alone(harness: Harness) -> None:
    harness.store.put(io.BytesIO(BIG))
    before = harness.leftovers()
    result = harness.store.put(chunks(BIG, 3 * MIB))
    assert (result.digest, result.created) == (BIG_SHA, False)
    assert harness.leftovers() == before
    assert b"".join(harness.store.open_range(BIG_SHA)) == BIG


def test_concurrent_puts_of_the_same_bytes_create_once(harness: Harness) -> None:
    results = []

    def put() -> None:
        results.append(harness.store.put(chunks(BIG, MIB), expected_sha256=BIG_SHA))

    threads = [threading.Thread(target=put) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if harness.kind == "local":
        assert sorted(r.created for r in results) == [False, True]
    else:
        # S3 and SeaweedFS refuse a completion with If-None-Match once the key exists, but SeaweedFS does
        # not serialize two completions racing each other (AWS does), so both may report created.
        assert True in {r.created for r in results}
    assert {(r.digest, r.size) for r in results} == {(BIG_SHA, len(BIG))}
    assert b"".join(harness.store.open_range(BIG_SHA)) == BIG
    assert [b.digest for b in harness.store.iter_blobs()] == [BIG_SHA]


@pytest.mark.parametrize("data", [BIG, SMALL], ids=["multipart", "single"])
@pytest.mark.parametrize("known_digest", [False, True])
def test_put_overtaken_by_a_commit_of_the_same_bytes(harness: Harness, data: bytes, known_digest: bool) -> None:
    digest = hashlib.sha256(data).hexdigest()

    def overtaken() -> Iterator[bytes]:
        # Another worker commits the same blob while this put is still streaming (after its existence check).
        for number, chunk in enumerate(chunks(data, MIB)):
            if number == len(data) // MIB // 2:
                assert harness.store.put(io.BytesIO(data)).created is True
            yield chunk

    result = harness.store.put(overtaken(), expected_sha256=digest if known_digest else None)
    assert (result.digest, result.size, result.created) == (digest, len(data), False)
    assert [b.digest for b in harness.store.iter_blobs()] == [digest]
    assert [p for p in harness.leftovers() if digest not in p] == []  # the loser's upload was aborted


@pytest.mark.parametrize("known_digest", [False, True])
@pytest.mark.parametrize("fail_after", [0, 3 * MIB, 11 * MIB])
def test_source_raising_midway_leaves_nothing(harness: Harness, known_digest: bool, fail_after: int) -> None:
    with pytest.raises(UpstreamDroppedError):
        harness.store.put(dropping_source(BIG, fail_after), expected_sha256=BIG_SHA if known_digest else None)
    harness.assert_nothing_committed()
