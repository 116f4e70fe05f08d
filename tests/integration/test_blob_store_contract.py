"""The BlobStore contract, run on every adapter: LocalBlobStore in a temp dir, S3BlobStore on SeaweedFS.

The S3 store uses 5 MiB parts, so the ~12 MiB blob goes through a three-part multipart upload.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import json
import os
import random
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from botocore.config import Config

from registry.domain.errors import (
    BlobNotFoundError,
    BlobStoreError,
    DigestMismatchError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    PresignedUrlError,
    SizeMismatchError,
)
from registry.settings import Settings
from registry.storage import BlobStore, LocalBlobStore, S3BlobStore, open_blob_store

MIB = 1024 * 1024
PART = 5 * MIB
REPO_ROOT = Path(__file__).resolve().parents[2]

BIG = random.Random(20240601).randbytes(12 * MIB + 123)
BIG_SHA = hashlib.sha256(BIG).hexdigest()
SMALL = b"tokenizer.json contents\n" * 100
SMALL_SHA = hashlib.sha256(SMALL).hexdigest()
EMPTY_SHA = hashlib.sha256(b"").hexdigest()


class Harness:
    """A store plus a raw view of what it left behind, so tests can prove nothing leaked."""

    def __init__(self, kind: str, store: BlobStore, tmp_path: Path, s3_server=None, bucket: str | None = None):
        self.kind = kind
        self.store = store
        self.tmp_path = tmp_path
        self.s3_server = s3_server
        self.bucket = bucket

    def leftovers(self) -> list[str]:
        """Everything a failed put could have left: temp files, objects, unfinished multipart uploads."""
        if self.kind == "local":
            root = self.store.root
            return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        client = self.s3_server.client()
        objects = [o["Key"] for o in client.list_objects_v2(Bucket=self.bucket).get("Contents", [])]
        uploads = [f"upload:{u['Key']}" for u in client.list_multipart_uploads(Bucket=self.bucket).get("Uploads", [])]
        return sorted(objects + uploads)

    def assert_nothing_committed(self) -> None:
        assert list(self.store.iter_blobs()) == []
        assert not self.store.exists(BIG_SHA)
        assert self.leftovers() == []


def make_s3_store(s3_server, bucket: str, prefix: str = "reg", **kwargs) -> S3BlobStore:
    return S3BlobStore(s3_server.client(), bucket, prefix, part_size=PART, **kwargs)


@pytest.fixture(params=["local", "s3"])
def harness(request, tmp_path) -> Harness:
    if request.param == "local":
        store = LocalBlobStore(tmp_path / "store", b"test-presign-secret-0123456789ab",
                               public_url="http://127.0.0.1:9")
        return Harness("local", store, tmp_path)
    s3_server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return Harness("s3", make_s3_store(s3_server, bucket), tmp_path, s3_server, bucket)


def chunks(data: bytes, size: int) -> Iterator[bytes]:
    for offset in range(0, len(data), size):
        yield data[offset : offset + size]


class ExplodingReader(io.RawIOBase):
    """A source that must never be read."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        raise AssertionError("the source was read")


def exploding_iterable() -> Iterator[bytes]:
    raise AssertionError("the source was read")
    yield b""  # pragma: no cover


class UpstreamDroppedError(ConnectionResetError):
    """An OSError, like a real dropped connection: it must reach the caller as it is, not as BlobStoreError."""


def dropping_source(data: bytes, fail_after: int) -> Iterator[bytes]:
    sent = 0
    for chunk in chunks(data, MIB):
        if sent >= fail_after:
            raise UpstreamDroppedError("connection reset by upstream")
        yield chunk
        sent += len(chunk)


# --- put ---------------------------------------------------------------------------------------


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


# --- reading -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "start,end",
    [
        (0, None),
        (0, 10),
        (7, 7),
        (PART - 3, PART + 3),
        (MIB + 1, 6 * MIB - 1),
        (len(BIG) - 5, None),
        (len(BIG) - 5, len(BIG) + 100),
        (len(BIG), None),
        (len(BIG) + 10, None),
        (10, 5),
    ],
)
def test_open_range(harness: Harness, start: int, end: int | None) -> None:
    harness.store.put(io.BytesIO(BIG), expected_sha256=BIG_SHA)
    got = b"".join(harness.store.open_range(BIG_SHA, start, end))
    assert got == BIG[start:end]


def test_open_seekable_seek_read_tell(harness: Harness) -> None:
    harness.store.put(io.BytesIO(BIG))
    with harness.store.open_seekable(BIG_SHA) as f:
        assert f.read(8) == BIG[:8]
        assert f.tell() == 8
        assert f.seek(PART - 2) == PART - 2
        assert f.read(4) == BIG[PART - 2 : PART + 2]
        f.seek(-10, io.SEEK_END)
        assert f.tell() == len(BIG) - 10
        assert f.read() == BIG[-10:]
        assert f.read(5) == b""
        f.seek(3)
        f.seek(4, io.SEEK_CUR)
        assert f.read(1000) == BIG[7:1007]
        f.seek(100)
        assert f.read() == BIG[100:]


def test_s3_seekable_reads_only_what_is_asked(s3_server, s3_bucket) -> None:
    store = make_s3_store(s3_server, s3_bucket)
    store.put(io.BytesIO(BIG), expected_sha256=BIG_SHA)
    transferred: list[int] = []
    store.client.meta.events.register(
        "after-call.s3.GetObject", lambda parsed, **_: transferred.append(parsed["ContentLength"])
    )
    # What a safetensors scanner does: read an 8-byte length, then the header after it.
    with store.open_seekable(BIG_SHA) as f:
        assert transferred == []  # opening downloads nothing
        header_len = int.from_bytes(f.read(8), "little") % 50_000
        assert f.read(header_len) == BIG[8 : 8 + header_len]
        f.seek(len(BIG) - 4)
        assert f.read(4) == BIG[-4:]
    assert 0 < sum(transferred) < MIB
    assert len(transferred) <= 3


def test_missing_blob(harness: Harness) -> None:
    with pytest.raises(BlobNotFoundError) as caught:
        harness.store.stat(BIG_SHA)
    assert caught.value.details["digest"] == BIG_SHA
    with pytest.raises(BlobNotFoundError):
        harness.store.open_range(BIG_SHA)
    with pytest.raises(BlobNotFoundError):
        harness.store.open_range(BIG_SHA, 5, 5)
    with pytest.raises(BlobNotFoundError):
        harness.store.open_seekable(BIG_SHA)
    assert harness.store.exists(BIG_SHA) is False
    harness.store.delete(BIG_SHA)  # deleting what is not there is not an error


def test_exists_stat_delete_iter_blobs(harness: Harness) -> None:
    blobs = {hashlib.sha256(d).hexdigest(): d for d in (SMALL, b"x", b"config.json {}", BIG)}
    for data in blobs.values():
        harness.store.put(io.BytesIO(data))
    listed = sorted((b.digest, b.size) for b in harness.store.iter_blobs())
    assert listed == sorted((d, len(data)) for d, data in blobs.items())
    assert all(harness.store.exists(d) for d in blobs)

    harness.store.delete(SMALL_SHA)
    assert not harness.store.exists(SMALL_SHA)
    with pytest.raises(BlobNotFoundError):
        harness.store.stat(SMALL_SHA)
    assert SMALL_SHA not in {b.digest for b in harness.store.iter_blobs()}
    assert harness.store.stat(BIG_SHA).size == len(BIG)
    # A deleted blob can be put again.
    assert harness.store.put(io.BytesIO(SMALL), expected_sha256=SMALL_SHA).created is True


@pytest.mark.parametrize(
    "bad",
    ["../etc", "../../etc/passwd", "../" + "a" * 61, BIG_SHA.upper(), BIG_SHA[:-1], BIG_SHA + "0", "", "ab/" + "c" * 61],
)
def test_digest_validation_rejects_traversal(harness: Harness, bad: str) -> None:
    store = harness.store
    calls = [
        lambda: store.exists(bad),
        lambda: store.stat(bad),
        lambda: store.open_range(bad),
        lambda: store.open_seekable(bad),
        lambda: store.presign_get(bad, timedelta(minutes=1)),
        lambda: store.delete(bad),
        lambda: store.put(ExplodingReader(), expected_sha256=bad),
        lambda: store.verify_presigned(bad, int(time.time()) + 60, "00"),
    ]
    for call in calls:
        with pytest.raises(InvalidInputError):
            call()
    assert list(store.iter_blobs()) == []


# --- presigned URLs ------------------------------------------------------------------------------


def test_presigned_get(harness: Harness) -> None:
    harness.store.put(io.BytesIO(SMALL))
    url = harness.store.presign_get(SMALL_SHA, timedelta(minutes=5))
    if harness.kind == "s3":
        response = httpx.get(url)
        assert response.status_code == 200
        assert response.content == SMALL
        ranged = httpx.get(url, headers={"Range": "bytes=5-9"})
        assert ranged.status_code == 206 and ranged.content == SMALL[5:10]
        tampered = url.replace(SMALL_SHA, EMPTY_SHA)
        assert httpx.get(tampered).status_code == 403
        # Its URLs point at the bucket: the API serves none of its blobs, signed or not.
        with pytest.raises(NotFoundError):
            harness.store.verify_presigned(SMALL_SHA, str(int(time.time()) + 60), "0" * 64)
        return

    store: LocalBlobStore = harness.store  # type: ignore[assignment]
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}" == "http://127.0.0.1:9"
    assert parts.path == f"/v1/blobs/sha256/{SMALL_SHA}"
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert int(query["expires"]) > time.time() + 250
    store.verify_presigned(SMALL_SHA, query["expires"], query["signature"])

    with pytest.raises(PresignedUrlError) as caught:
        store.verify_presigned(EMPTY_SHA, query["expires"], query["signature"])
    assert isinstance(caught.value, PermissionDeniedError)
    with pytest.raises(PresignedUrlError):
        store.verify_presigned(SMALL_SHA, int(query["expires"]) + 3600, query["signature"])
    with pytest.raises(PresignedUrlError):
        # A different last digit (a fixed "0" would leave one signature in 16 unchanged).
        other = "1" if query["signature"][-1] == "0" else "0"
        store.verify_presigned(SMALL_SHA, query["expires"], query["signature"][:-1] + other)
    with pytest.raises(PresignedUrlError):
        store.verify_presigned(SMALL_SHA, "soon", query["signature"])
    for expires, signature in ((None, query["signature"]), (query["expires"], None)):
        with pytest.raises(PermissionDeniedError):
            store.verify_presigned(SMALL_SHA, expires, signature)
    # Another secret does not accept this store's URLs.
    other = LocalBlobStore(store.root, b"another-secret")
    with pytest.raises(PresignedUrlError):
        other.verify_presigned(SMALL_SHA, query["expires"], query["signature"])


def test_presigned_get_expires(harness: Harness) -> None:
    harness.store.put(io.BytesIO(SMALL))
    if harness.kind == "local":
        store: LocalBlobStore = harness.store  # type: ignore[assignment]
        query = parse_qs(urlsplit(store.presign_get(SMALL_SHA, timedelta(seconds=-5))).query)
        with pytest.raises(PresignedUrlError) as caught:
            store.verify_presigned(SMALL_SHA, query["expires"][0], query["signature"][0])
        assert caught.value.details["reason"] == "expired"
        return
    # S3 compares the URL's Expires with its own clock, which no test can move: the URL presign_get made
    # is signed again with an Expires already past. The same signer must first reproduce presign_get's
    # own URL exactly, and be accepted with a future Expires, so the refusal can only be the expiry.
    url = harness.store.presign_get(SMALL_SHA, timedelta(minutes=5))
    assert httpx.get(url).status_code == 200
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    assert time.time() + 250 < int(query["Expires"]) <= time.time() + 300
    assert _sigv2_presigned(harness.s3_server, url, int(query["Expires"])) == query
    bare = url.split("?")[0]
    expired = _sigv2_presigned(harness.s3_server, url, int(time.time()) - 3600)
    assert httpx.get(bare, params=expired).status_code == 403
    assert httpx.get(bare, params=_sigv2_presigned(harness.s3_server, url, int(time.time()) + 3600)).status_code == 200


def _sigv2_presigned(s3_server, url: str, expires: int) -> dict[str, str]:
    """The query of an S3 query-string-authenticated GET of ``url``'s object (signature V2, what botocore's
    presigned URLs use by default) that expires at ``expires`` (unix seconds)."""
    to_sign = f"GET\n\n\n{expires}\n{urlsplit(url).path}"
    digest = hmac.new(s3_server.secret_key.encode(), to_sign.encode(), hashlib.sha1).digest()
    return {"AWSAccessKeyId": s3_server.access_key, "Signature": base64.b64encode(digest).decode(),
            "Expires": str(expires)}


# --- crashes and sweeping --------------------------------------------------------------------------


def _writer_config(harness: Harness, expected: str | None) -> dict:
    base = {"stall_after": 12 * MIB, "chunk_size": MIB, "expected_sha256": expected}
    if harness.kind == "local":
        return {**base, "kind": "local", "root": str(harness.store.root)}
    server = harness.s3_server
    return {
        **base,
        "kind": "s3",
        "endpoint_url": server.endpoint_url,
        "access_key": server.access_key,
        "secret_key": server.secret_key,
        "region": server.region,
        "bucket": harness.bucket,
        "prefix": "reg",
        "part_size": PART,
    }


def _written_so_far(harness: Harness) -> int:
    """Bytes the child has durably handed to the store: temp file size, or uploaded part sizes."""
    if harness.kind == "local":
        tmp = harness.store.root / "tmp"
        return sum(p.stat().st_size for p in tmp.iterdir())
    client = harness.s3_server.client()
    total = 0
    for upload in client.list_multipart_uploads(Bucket=harness.bucket).get("Uploads", []):
        listed = client.list_parts(Bucket=harness.bucket, Key=upload["Key"], UploadId=upload["UploadId"])
        total += sum(p["Size"] for p in listed.get("Parts", []))
    return total


@pytest.mark.parametrize("known_digest", [False, True])
def test_write_killed_halfway_leaves_nothing_visible(harness: Harness, known_digest: bool) -> None:
    # The digest the bytes would have had, had the put finished; the child never gets there.
    config = _writer_config(harness, hashlib.sha256(b"never finished").hexdigest() if known_digest else None)
    child = subprocess.Popen(
        [sys.executable, "-c", "from tests.support.blob_writer import main; main()", json.dumps(config)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.strip() == "stalled":
                break
        else:
            pytest.fail(f"writer exited early with {child.wait()}")
        # Wait until some parts (or temp bytes) really reached the store, then kill -9 mid-put.
        deadline = time.monotonic() + 30
        while _written_so_far(harness) < 2 * PART:
            assert time.monotonic() < deadline, "the writer never wrote its first parts"
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait(timeout=10)
    assert child.returncode == -9

    assert list(harness.store.iter_blobs()) == []
    assert harness.leftovers() != []  # the crash did leave something for the sweep
    assert harness.store.sweep_incomplete(timedelta(hours=1)) == 0  # too recent to sweep
    assert harness.store.sweep_incomplete(timedelta(0)) >= 1
    assert harness.leftovers() == []
    assert list(harness.store.iter_blobs()) == []


def test_sweep_leaves_fresh_work_and_foreign_keys_alone(harness: Harness) -> None:
    harness.store.put(io.BytesIO(SMALL))
    if harness.kind == "local":
        stale = harness.store.root / "tmp" / "put-stale"
        stale.write_bytes(b"half")
        os.utime(stale, (time.time() - 7200, time.time() - 7200))
        fresh = harness.store.root / "tmp" / "put-fresh"
        fresh.write_bytes(b"half")
        assert harness.store.sweep_incomplete(timedelta(hours=1)) == 1
        assert not stale.exists() and fresh.exists()
        assert harness.store.sweep_incomplete(timedelta(0)) == 1
    else:
        client = harness.s3_server.client()
        client.create_multipart_upload(Bucket=harness.bucket, Key="reg/tmp/abandoned")
        client.put_object(Bucket=harness.bucket, Key="reg/tmp/completed-but-not-copied", Body=b"x")
        foreign = client.create_multipart_upload(Bucket=harness.bucket, Key="someone-else/upload")
        client.put_object(Bucket=harness.bucket, Key="someone-else/tmp/file", Body=b"x")
        assert harness.store.sweep_incomplete(timedelta(hours=1)) == 0
        assert harness.store.sweep_incomplete(timedelta(0)) == 2
        uploads = client.list_multipart_uploads(Bucket=harness.bucket).get("Uploads", [])
        assert [u["UploadId"] for u in uploads] == [foreign["UploadId"]]
        keys = [o["Key"] for o in client.list_objects_v2(Bucket=harness.bucket)["Contents"]]
        assert "someone-else/tmp/file" in keys and "reg/tmp/completed-but-not-copied" not in keys
    assert [b.digest for b in harness.store.iter_blobs()] == [SMALL_SHA]


# --- S3 specifics ------------------------------------------------------------------------------------


def test_s3_unknown_digest_copy_uses_upload_part_copy(s3_server, s3_bucket) -> None:
    # A copy part size at the minimum forces the multipart (UploadPartCopy) copy used beyond 5 GB.
    store = make_s3_store(s3_server, s3_bucket, copy_part_size=PART)
    copies: list[str] = []
    store.client.meta.events.register("before-call.s3.UploadPartCopy", lambda **kw: copies.append("part"))
    assert store.put(chunks(BIG, MIB)).digest == BIG_SHA
    assert len(copies) == 3
    assert b"".join(store.open_range(BIG_SHA)) == BIG
    assert [k for k in Harness("s3", store, Path(), s3_server, s3_bucket).leftovers()] == [
        f"reg/blobs/sha256/{BIG_SHA[:2]}/{BIG_SHA}"
    ]


def test_s3_errors_are_translated(s3_server, s3_bucket) -> None:
    missing_bucket = make_s3_store(s3_server, s3_bucket + "-missing")
    with pytest.raises(BlobStoreError) as caught:
        missing_bucket.check()
    assert caught.value.__cause__ is not None
    with pytest.raises(BlobStoreError) as caught:
        list(missing_bucket.iter_blobs())
    assert "NoSuchBucket" in caught.value.details["reason"]
    make_s3_store(s3_server, s3_bucket).check()

    import boto3

    unreachable = boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="x",
        aws_secret_access_key="y",
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1),
    )
    store = S3BlobStore(unreachable, "bucket")
    with pytest.raises(BlobStoreError) as caught:
        store.check()
    assert caught.value.details["operation"] == "check"
    with pytest.raises(BlobStoreError):
        store.exists(SMALL_SHA)


def test_local_check(tmp_path) -> None:
    store = LocalBlobStore(tmp_path / "store", b"secret")
    store.check()
    assert list((tmp_path / "store" / "tmp").iterdir()) == []  # the probe is gone
    # A temp directory replaced by a file fails the check, for root too (permissions would not).
    (tmp_path / "store" / "tmp").rmdir()
    (tmp_path / "store" / "tmp").write_bytes(b"not a directory")
    with pytest.raises(BlobStoreError):
        store.check()


# --- open_blob_store -----------------------------------------------------------------------------------


def test_open_blob_store_file_url(tmp_path) -> None:
    settings = Settings(public_url="http://registry.test", presign_secret="s3cret-s3cret-s3cret-s3cret-s3cret")
    store = open_blob_store((tmp_path / "blobs").as_uri(), settings)
    assert isinstance(store, LocalBlobStore)
    store.put(io.BytesIO(SMALL))
    url = store.presign_get(SMALL_SHA, timedelta(minutes=1))
    assert url.startswith("http://registry.test/v1/blobs/sha256/")
    query = parse_qs(urlsplit(url).query)
    LocalBlobStore(tmp_path / "blobs", b"s3cret-s3cret-s3cret-s3cret-s3cret").verify_presigned(
        SMALL_SHA, query["expires"][0], query["signature"][0]
    )

    # Without a configured secret, processes sharing the directory share a generated one.
    first = open_blob_store((tmp_path / "shared").as_uri(), Settings())
    second = open_blob_store((tmp_path / "shared").as_uri(), Settings())
    query = parse_qs(urlsplit(first.presign_get(SMALL_SHA, timedelta(minutes=1))).query)
    second.verify_presigned(SMALL_SHA, query["expires"][0], query["signature"][0])
    isolated = open_blob_store((tmp_path / "elsewhere").as_uri(), Settings())
    with pytest.raises(PresignedUrlError):
        isolated.verify_presigned(SMALL_SHA, query["expires"][0], query["signature"][0])


def test_open_blob_store_s3_url(s3_server, s3_bucket) -> None:
    settings = Settings(
        s3_endpoint_url=s3_server.endpoint_url,
        s3_region=s3_server.region,
        s3_access_key_id=s3_server.access_key,
        s3_secret_access_key=s3_server.secret_key,
        multipart_part_size=PART,
    )
    store = open_blob_store(f"s3://{s3_bucket}/models/prod/", settings)
    assert isinstance(store, S3BlobStore)
    assert (store.bucket, store.prefix, store.part_size) == (s3_bucket, "models/prod", PART)
    store.check()
    assert store.put(chunks(BIG, MIB), expected_sha256=BIG_SHA).created is True
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert keys == [f"models/prod/blobs/sha256/{BIG_SHA[:2]}/{BIG_SHA}"]
    assert httpx.get(store.presign_get(BIG_SHA, timedelta(minutes=1))).content == BIG


@pytest.mark.parametrize("url", ["ftp://host/x", "blobs", "file://relative/x", "s3:///no-bucket", "gs://b/p"])
def test_open_blob_store_rejects_bad_urls(url: str) -> None:
    with pytest.raises(InvalidInputError):
        open_blob_store(url, Settings())
