"""Blob uploads through the HTTP API: who may send bytes, and how many."""

from __future__ import annotations

import hashlib

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from registry.db.models import Blob
from tests.support.registry import role_token

LIMIT = 1000


@pytest.fixture
def api(container):
    container.settings.max_file_size = LIMIT
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {role_token(container, 'alice', 'acme', 'submitter')}"
        yield client


def _chunks(data: bytes, size: int = 100):
    for i in range(0, len(data), size):
        yield data[i:i + size]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_upload_over_the_file_size_limit_is_refused(api, container, chunked):
    data = b"w" * (LIMIT + 1)
    digest = hashlib.sha256(data).hexdigest()
    r = api.put(f"/v1/blobs/sha256/{digest}", params={"tenant": "acme"},
                content=_chunks(data) if chunked else data)
    assert r.status_code == 413, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["type"].endswith("/limit-exceeded")
    assert not container.blob_store.exists(digest)
    with container.session_factory() as session:
        assert session.get(Blob, digest) is None


def test_an_upload_at_the_limit_is_stored(api, container):
    data = b"w" * LIMIT
    digest = hashlib.sha256(data).hexdigest()
    r = api.put(f"/v1/blobs/sha256/{digest}", params={"tenant": "acme"}, content=_chunks(data))
    assert r.status_code == 201, r.text
    assert container.blob_store.exists(digest)


def test_an_upload_for_another_tenant_is_refused(api, container):
    role_token(container, "bob", "other", "submitter")
    data = b"z" * 10
    digest = hashlib.sha256(data).hexdigest()
    r = api.put(f"/v1/blobs/sha256/{digest}", params={"tenant": "other"}, content=data)
    assert r.status_code == 403 and r.json()["type"].endswith("/permission-denied")
    assert not container.blob_store.exists(digest)
