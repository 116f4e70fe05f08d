"""The BlobStore contract, reads: ranges, a seekable reader, missing blobs, stat, delete and listing, digest
validation, and presigned GET URLs and their expiry. On LocalBlobStore and S3BlobStore (SeaweedFS)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import time
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from registry.domain.errors import (
    BlobNotFoundError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    PresignedUrlError,
)
from registry.storage import LocalBlobStore
from tests.support.blob_store_harness import (
    BIG,
    BIG_SHA,
    EMPTY_SHA,
    MIB,
    PART,
    SMALL,
    SMALL_SHA,
    ExplodingReader,
    Harness,
    make_s3_store,
)


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
    ["../etc", "../../etc/passwd", "../" + "a" * 61, BIG_SHA.upper(), BIG_SHA[:-1], BIG_SHA + "0", "",
     "ab/" + "c" * 61],
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
