"""The registry never mirrors its own state: its blob store, data directory or key file are no source.

Each is tried where nothing else would refuse it: under a configured source root, or in a bucket an
operator listed as a source bucket. Submitted through the HTTP API, so the check that runs is the
one the server runs.
"""

from __future__ import annotations

from fastapi.testclient import TestClient

from api.app import create_app
from registry.auth import issue_token
from registry.db.models import Principal


def _admin_client(container) -> TestClient:
    with container.session_factory() as session:
        admin = Principal(name="root", is_admin=True)
        session.add(admin)
        session.flush()
        token = issue_token(session, admin).token
        from registry.db.models import Tenant

        session.add(Tenant(name="acme"))
        session.commit()
    client = TestClient(create_app(container), raise_server_exceptions=False)
    client.headers["Authorization"] = f"Bearer {token}"
    return client


def _submit(client: TestClient, source: str):
    return client.post("/v1/models/acme/m/versions", json={"source": source})


def test_the_local_blob_store_and_data_dir_are_refused_under_a_source_root(container, tmp_path):
    # The fixture's settings: sources may come from anywhere under tmp_path, where the blob store
    # (tmp_path/blobs, outside the data dir) and the data dir (tmp_path/data) also live.
    container.blob_store.put(b"stored bytes")
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "models" / "ok").mkdir(parents=True)
    (tmp_path / "models" / "ok" / "config.json").write_text("{}")
    (tmp_path / "models" / "link-to-blobs").symlink_to(tmp_path / "blobs")
    with _admin_client(container) as client:
        for source in (tmp_path / "blobs", tmp_path / "blobs" / "blobs", tmp_path / "models" / "link-to-blobs",
                       tmp_path / "data"):
            r = _submit(client, str(source))
            assert r.status_code == 403 and r.json()["type"].endswith("/source-not-allowed"), (source, r.text)
        # The same request for an ordinary directory under the root is accepted: only the state is refused.
        assert _submit(client, str(tmp_path / "models" / "ok")).status_code == 202


def test_the_s3_blob_bucket_is_refused_even_when_listed_as_a_source_bucket(container, s3_server, s3_bucket):
    container.settings.blob_store_url = f"s3://{s3_bucket}/registry"
    container.settings.s3_endpoint_url = s3_server.endpoint_url
    container.settings.s3_access_key_id = s3_server.access_key
    from pydantic import SecretStr

    container.settings.s3_secret_access_key = SecretStr(s3_server.secret_key)
    container.settings.s3_source_buckets = [s3_bucket, "models-in"]
    with _admin_client(container) as client:
        for source in (f"s3://{s3_bucket}/registry", f"s3://{s3_bucket}/registry/blobs", f"s3://{s3_bucket}/other"):
            r = _submit(client, source)
            assert r.status_code == 403 and r.json()["type"].endswith("/source-not-allowed"), (source, r.text)
