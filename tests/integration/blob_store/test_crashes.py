"""The BlobStore contract, crashes: a writer killed with SIGKILL halfway leaves nothing visible, and the sweep
removes what it left once old enough while fresh work and foreign keys stay. On LocalBlobStore and
S3BlobStore (SeaweedFS)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest

from tests.support.blob_store_harness import (
    MIB,
    PART,
    REPO_ROOT,
    SMALL,
    SMALL_SHA,
    Harness,
)


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
