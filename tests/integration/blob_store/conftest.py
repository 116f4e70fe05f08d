"""The BlobStore contract, run on every adapter: LocalBlobStore in a temp dir, S3BlobStore on SeaweedFS
(``harness``, one per test; ``tests/support/blob_store_harness.py``)."""

from __future__ import annotations

import pytest

from registry.storage import LocalBlobStore
from tests.support.blob_store_harness import Harness, make_s3_store


@pytest.fixture(params=["local", "s3"])
def harness(request, tmp_path) -> Harness:
    if request.param == "local":
        store = LocalBlobStore(tmp_path / "store", b"test-presign-secret-0123456789ab",
                               public_url="http://127.0.0.1:9")
        return Harness("local", store, tmp_path)
    s3_server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return Harness("s3", make_s3_store(s3_server, bucket), tmp_path, s3_server, bucket)
