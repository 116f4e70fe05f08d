"""S3Source against the SeaweedFS S3 server."""

from __future__ import annotations

import hashlib
import socket

import boto3
import pytest
from botocore.config import Config

from registry.domain.errors import (
    InvalidPathError,
    RepoNotFoundError,
    RevisionNotFoundError,
    SizeMismatchError,
    UpstreamChangedError,
    UpstreamError,
)
from registry.sources import open_source
from registry.sources.s3 import S3Source
from tests.support.tiny_model import tiny_model_files

pytestmark = pytest.mark.s3

PREFIX = "models/tiny"


@pytest.fixture
def model(s3_server, s3_bucket) -> dict[str, bytes]:
    client = s3_server.client()
    files = tiny_model_files(seed=7)
    for path, data in files.items():
        extra = {"ChecksumAlgorithm": "SHA256"} if path.endswith(".safetensors") else {}
        client.put_object(Bucket=s3_bucket, Key=f"{PREFIX}/{path}", Body=data, **extra)
    # Neighbours that share the prefix's characters but are not under it, and a folder marker.
    client.put_object(Bucket=s3_bucket, Key="models/tiny2/config.json", Body=b"{}")
    client.put_object(Bucket=s3_bucket, Key="models/tinyx", Body=b"x")
    client.put_object(Bucket=s3_bucket, Key=f"{PREFIX}/empty-dir/", Body=b"")
    return files


def test_resolve_lists_the_prefix_with_published_checksums(s3_server, s3_bucket, model):
    snapshot = S3Source(s3_bucket, PREFIX, s3_server.client()).resolve(None)

    assert snapshot.source_kind == "s3" and snapshot.repo == f"{s3_bucket}/{PREFIX}"
    assert snapshot.requested_revision is None and len(snapshot.revision) == 64
    files = {f.path: f for f in snapshot.files}
    assert set(files) == set(model)
    for path, data in model.items():
        assert files[path].size == len(data) and files[path].etag
        if path.endswith(".safetensors"):
            assert files[path].sha256 == hashlib.sha256(data).hexdigest()
        else:
            assert files[path].sha256 is None  # stored with only the default CRC32
        assert files[path].git_sha1 is None


def test_revision_is_stable_and_changes_with_the_prefix(s3_server, s3_bucket, model):
    client = s3_server.client()
    src = S3Source(s3_bucket, PREFIX + "/", client, exclude=["*.txt"])
    first = src.resolve(None)
    assert src.resolve(None).revision == first.revision
    assert src.resolve(first.revision).revision == first.revision

    client.put_object(Bucket=s3_bucket, Key=f"{PREFIX}/config.json", Body=b'{"changed": 1}')
    second = src.resolve(None)
    assert second.revision != first.revision
    with pytest.raises(RevisionNotFoundError):
        src.resolve(first.revision)

    # Even a file the filter leaves out is part of the prefix's state.
    client.put_object(Bucket=s3_bucket, Key=f"{PREFIX}/notes.txt", Body=b"n")
    third = src.resolve(None)
    assert third.revision != second.revision
    assert {f.path for f in third.files} == {f.path for f in second.files}


def test_open_streams_each_object(s3_server, s3_bucket, model):
    src = S3Source(s3_bucket, PREFIX, s3_server.client(), chunk_size=4096)
    snapshot = src.resolve(None)
    for f in snapshot.files:
        chunks = list(src.open(snapshot.revision, f))
        assert all(len(c) <= 4096 for c in chunks)
        assert b"".join(chunks) == model[f.path]


def test_object_replaced_or_deleted_after_resolve_is_refused(s3_server, s3_bucket, model):
    client = s3_server.client()
    src = S3Source(s3_bucket, PREFIX, client)
    snapshot = src.resolve(None)
    files = {f.path: f for f in snapshot.files}

    client.put_object(Bucket=s3_bucket, Key=f"{PREFIX}/config.json", Body=b'{"swapped": true}')
    with pytest.raises(UpstreamChangedError) as changed:
        b"".join(src.open(snapshot.revision, files["config.json"]))
    assert changed.value.details["path"] == "config.json"
    assert changed.value.details["expected"] == files["config.json"].etag

    client.delete_object(Bucket=s3_bucket, Key=f"{PREFIX}/tokenizer.json")
    with pytest.raises(UpstreamChangedError):
        b"".join(src.open(snapshot.revision, files["tokenizer.json"]))


def test_size_differing_from_the_listing_fails(s3_server, s3_bucket, model):
    import dataclasses

    src = S3Source(s3_bucket, PREFIX, s3_server.client())
    f = next(f for f in src.resolve(None).files if f.path == "config.json")
    with pytest.raises(SizeMismatchError):
        b"".join(src.open("rev", dataclasses.replace(f, size=f.size + 1)))
    with pytest.raises(SizeMismatchError):
        b"".join(src.open("rev", dataclasses.replace(f, size=f.size - 1)))


def test_missing_bucket_or_empty_prefix_is_repo_not_found(s3_server, s3_bucket, model):
    with pytest.raises(RepoNotFoundError):
        S3Source("no-such-bucket-here", "x", s3_server.client()).resolve(None)
    with pytest.raises(RepoNotFoundError) as empty:
        S3Source(s3_bucket, "models/nothing", s3_server.client()).resolve(None)
    assert empty.value.details["repo"] == f"{s3_bucket}/models/nothing"


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("CONFIG.json", "duplicate"),  # collides with config.json on a case-insensitive filesystem
        ("cafe\u0301.txt", "NFC"),  # decomposed Unicode: looks like café.txt, is another name
    ],  # SeaweedFS itself refuses keys with ".." segments or backslashes, which AWS S3 stores.
)
def test_unclean_key_fails_resolve(s3_server, s3_bucket, model, key, reason):
    s3_server.client().put_object(Bucket=s3_bucket, Key=f"{PREFIX}/{key}", Body=b"x")
    with pytest.raises(InvalidPathError) as error:
        S3Source(s3_bucket, PREFIX, s3_server.client(), include=["config.json"]).resolve(None)
    assert reason in error.value.details["reason"]


def test_unreachable_s3_is_an_upstream_error(s3_server):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id="x",
        aws_secret_access_key="y",
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1}, connect_timeout=2),
    )
    with pytest.raises(UpstreamError) as error:
        S3Source("bucket", "prefix", client).resolve(None)
    assert error.value.details["retryable"] is True


def test_open_source_builds_an_s3_source(s3_server, s3_bucket, model):
    src = open_source(f"s3://{s3_bucket}/{PREFIX}/", s3_client_factory=s3_server.client, include=["*.json"])
    assert isinstance(src, S3Source)
    snapshot = src.resolve(None)
    assert {f.path for f in snapshot.files} == {p for p in model if p.endswith(".json")}
