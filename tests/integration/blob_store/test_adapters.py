"""What one adapter alone does: S3's server-side copy and its error translation, the local store's check, and
``open_blob_store`` choosing the adapter from a URL."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from botocore.config import Config

from registry.domain.errors import (
    BlobStoreError,
    InvalidInputError,
    PresignedUrlError,
)
from registry.settings import Settings
from registry.storage import LocalBlobStore, S3BlobStore, open_blob_store
from tests.support.blob_store_harness import (
    BIG,
    BIG_SHA,
    MIB,
    PART,
    SMALL,
    SMALL_SHA,
    Harness,
    chunks,
    make_s3_store,
)


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
