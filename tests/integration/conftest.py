"""Fixtures shared by the integration modules (each module's own ``world`` stays in its module): the OCI
world, the release world's client, the worker processes' deployment and an empty database for the migration
tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from registry.settings import Settings
from tests.support import db as dbsupport
from tests.support.worker_process import Deployment

DEPLOYMENT_PART_SIZE = 5 * 1024 * 1024


@pytest.fixture
def oci_world(container, seeded):
    """A copy of ``tests/support/oci_world.py``'s world, served by uvicorn (the OCI endpoint and store tests;
    the module marks itself ``pytest.mark.seeded(builder=build_world)``)."""
    from tests.support.oci_world import served_copy

    with served_copy(container, seeded) as w:
        yield w


@pytest.fixture
def oci_store_world(store_container, tmp_path):
    """The same world on each blob store (a local directory, a SeaweedFS bucket)."""
    from tests.support.oci_world import served_world

    with served_world(store_container, tmp_path) as w:
        yield w


@pytest.fixture
def people(seeded):
    """acme's administrator and one approver in each capacity, of the module's seeded release-unit world
    (``pytestmark = pytest.mark.seeded(builder=build_in_prod)``, ``tests/support/release_unit.py``)."""
    return seeded["people"]


@pytest.fixture
def in_prod(seeded) -> dict[str, bytes]:
    """Version 1 of acme/llm (the tiny Llama) evaluated, approved and in ``prod`` in that world; its files."""
    return seeded["files"]


@pytest.fixture
def release_world(container, seeded):
    """A copy of ``tests/support/release_world.py``'s world behind the API: ``(client, tokens, admin)``.

    The module asks for it with ``pytestmark = pytest.mark.seeded(builder=build_release_world)``.
    """
    from api.app import create_app

    container.settings.event_poll_seconds = 0.05
    tokens, admin = seeded
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        yield client, tokens, admin


@pytest.fixture(params=["local", pytest.param("s3", marks=[pytest.mark.postgres, pytest.mark.s3])])
def deployment(request, tmp_path, signing_key_pem) -> Deployment:
    """A registry for worker processes: SQLite with a local directory, then PostgreSQL with a SeaweedFS bucket;
    its settings, the environment a `modelreg worker` needs, and the bucket's client."""
    env = {
        "MODELREG_DATA_DIR": str(tmp_path / "data"),
        "MODELREG_SIGNING_KEY_PEM": signing_key_pem,
        "MODELREG_PRESIGN_SECRET": "test-presign-secret-0123456789ab",
        "MODELREG_MULTIPART_PART_SIZE": str(DEPLOYMENT_PART_SIZE),
        # A killed worker's job is claimed again once its lease runs out: make that quick.
        "MODELREG_JOB_LEASE_SECONDS": "2",
        "MODELREG_JOB_BACKOFF_BASE_SECONDS": "0.1",
        "MODELREG_JOB_BACKOFF_MAX_SECONDS": "0.5",
    }
    bucket = client = None
    if request.param == "local":
        env["MODELREG_DATABASE_URL"] = dbsupport.sqlite_copy(request.getfixturevalue("sqlite_template"), tmp_path)
        env["MODELREG_BLOB_STORE_URL"] = (tmp_path / "blobs").as_uri()
    else:
        url = request.getfixturevalue("pg_url")
        dbsupport.truncate_all(url)
        server = request.getfixturevalue("s3_server")
        bucket = request.getfixturevalue("s3_bucket")
        client = server.client()
        env.update({
            "MODELREG_DATABASE_URL": url,
            "MODELREG_BLOB_STORE_URL": f"s3://{bucket}/registry",
            "MODELREG_S3_ENDPOINT_URL": server.endpoint_url,
            "MODELREG_S3_REGION": server.region,
            "MODELREG_S3_ACCESS_KEY_ID": server.access_key,
            "MODELREG_S3_SECRET_ACCESS_KEY": server.secret_key,
        })
    settings = Settings(
        data_dir=Path(env["MODELREG_DATA_DIR"]),
        database_url=env["MODELREG_DATABASE_URL"],
        blob_store_url=env["MODELREG_BLOB_STORE_URL"],
        s3_endpoint_url=env.get("MODELREG_S3_ENDPOINT_URL"),
        s3_access_key_id=env.get("MODELREG_S3_ACCESS_KEY_ID"),
        s3_secret_access_key=SecretStr(env.get("MODELREG_S3_SECRET_ACCESS_KEY", "unused")),
        signing_key_pem=SecretStr(signing_key_pem),
        presign_secret=SecretStr("test-presign-secret-0123456789ab"),
        multipart_part_size=DEPLOYMENT_PART_SIZE,
        job_lease_seconds=2,
    )
    return Deployment(request.param, settings, env, bucket, client)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_database_url(request, tmp_path):
    """A database with no schema at all, on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'm.db'}"
        return
    import uuid

    import psycopg
    from sqlalchemy.engine import make_url

    name = f"modelreg_migrate_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dbsupport._psycopg_dsn(dbsupport.PG_ADMIN_URL), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        dbsupport.no_flush_wait(conn, name)
    url = make_url(dbsupport.PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    yield url
    dbsupport.drop_pg_database(url)
