"""Jobs whose inputs reach the database's limits: a path as long as a path may be, and an upstream value
longer than a column (issue 7). Both databases where they differ (SQLite does not enforce VARCHAR lengths)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from registry.bootstrap import bootstrap
from registry.db.models import Job, ScanResult, Version
from registry.domain.files import MAX_PATH_LENGTH
from registry.jobs import JobKind, job_key
from registry.services import versions
from registry.services.versions import SubmitRequest
from registry.settings import Settings
from tests.support import db as dbsupport
from tests.support.hf_upstream import HfUpstream
from tests.support.registry import drain, make_admin
from tests.support.tiny_model import tiny_model_files

SCAN_BLOB = JobKind.SCAN_BLOB.value


def _version(container, version_id) -> Version:
    with container.session_factory() as session:
        return session.get(Version, version_id)


def test_a_file_path_of_the_longest_length_accepted_seals_and_is_scanned(container, tmp_path):
    """The scan job's key holds digest and scan key, for a config its whole path; past the column's 256
    characters it is hashed."""
    model_dir = tmp_path / "model"
    long_path = "/".join(["d" * 200] * 4 + ["f" * (MAX_PATH_LENGTH - 816), "config.json"])
    assert len(long_path) == MAX_PATH_LENGTH
    (model_dir / long_path).parent.mkdir(parents=True)
    (model_dir / long_path).write_bytes(b'{"vocab_size": 8}\n')
    (model_dir / "config.json").write_bytes(b'{"hidden_size": 8}\n')
    admin = make_admin(container)
    with container.session_factory() as session:
        version, _ = versions.submit(session, admin, "acme", "long", SubmitRequest(source=str(model_dir)),
                                     open_source=container.open_source, limits=container.limits(),
                                     ports=container.ports)
        version_id = version.id
    drain(container)

    v = _version(container, version_id)
    assert (v.state, v.failure_reason) == ("awaiting_approval", None), v.failure_detail
    with container.session_factory() as session:
        scanned = set(session.scalars(select(ScanResult.path)))
        keys = set(session.scalars(select(Job.idempotency_key).where(Job.kind == SCAN_BLOB)))
    assert long_path in scanned
    assert all(len(key) <= 256 for key in keys)
    assert sum(key.startswith(f"{SCAN_BLOB}@sha256:") for key in keys) == 1


def test_job_keys_are_kept_as_they_are_while_they_fit():
    assert job_key("seal_version", 12) == "seal_version:12"
    fits = job_key("scan_blob", "v", "ab" * 32, "p" * (256 - len("scan_blob:v:") - 65))
    assert len(fits) == 256 and fits.startswith("scan_blob:v:")
    longer = job_key("scan_blob", "v", "ab" * 32, "p" * (257 - len("scan_blob:v:") - 65))
    assert longer.startswith("scan_blob@sha256:") and len(longer) == len("scan_blob@sha256:") + 64
    assert longer != job_key("scan_blob", "v", "ab" * 32, "q" * (257 - len("scan_blob:v:") - 65))


@pytest.mark.postgres
def test_an_upstream_license_longer_than_its_column_no_longer_fails_the_version(pg_url, tmp_path):
    """Issue 7: an upstream's license longer than ``versions.license`` (128) failed the version on
    PostgreSQL when the worker resolved it (unstorable_data). The column now holds only the normalized id;
    the raw value is kept bounded in ``upstream_card`` and the version goes on."""
    dbsupport.truncate_all(pg_url)
    with HfUpstream() as hub:
        container = bootstrap(Settings(database_url=pg_url, data_dir=tmp_path / "data",
                                       blob_store_url=(tmp_path / "blobs").as_uri(),
                                       hf_allowed_endpoints=[hub.url]))
        try:
            verbose = "a license of many words " * 10
            hub.add_repo("org/verbose", card_data={"license": verbose})
            hub.commit("org/verbose", tiny_model_files(1))
            hub.unreachable()
            admin = make_admin(container)
            with container.session_factory() as session:
                version, _ = versions.submit(
                    session, admin, "acme", "verbose",
                    SubmitRequest(source="hf://org/verbose", hf_endpoint=hub.url),
                    open_source=container.open_source, limits=container.limits(), ports=container.ports)
                version_id = version.id
            assert _version(container, version_id).state == "submitted"
            hub.heal()
            drain(container)

            v = _version(container, version_id)
            assert v.failure_reason != "unstorable_data", v.failure_detail
            assert v.resolved_revision is not None and v.license is None
            assert v.upstream_card["license"] == verbose
            with container.session_factory() as session:
                job = session.scalars(select(Job).where(Job.kind == "resolve_version")).one()
            assert job.state == "succeeded"
        finally:
            container.dispose()
            dbsupport.truncate_all(pg_url)
