"""What a ``/v2`` lookup by digest costs: a digest no referrer has builds no document and runs as many SQL
statements with one released version as with four; one a referrer has builds only its version's documents.

The world of ``test_oci_endpoint.py`` (``tests/support/oci_world.py``), called in process through the
services the ``/v2`` routes call, with the documents built (``oci_referrers.build``) and the statements run
counted. Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import event, select

from registry.auth import load_principal
from registry.db.models import OciReferrerDigest, Principal, Version
from registry.domain.errors import OciBlobUnknownError, OciManifestUnknownError
from registry.services import loaders, oci_referrers, oci_serving
from registry.services.oci_tokens import OciCaller
from tests.support.oci_world import NAME, TENANT, build_world
from tests.support.registry import drain
from tests.support.releases import approve_standin, awaiting_version
from tests.support.tiny_model import tiny_model_files

MISSING = "sha256:" + hashlib.sha256(b"no referrer has this").hexdigest()


class Counted:
    """The referrer documents built and the SQL statements run while it is active."""

    def __init__(self, container, monkeypatch):
        self.built = 0
        self.statements = 0
        original = oci_referrers.build

        def build(*args, **kwargs):
            self.built += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(oci_referrers, "build", build)
        event.listen(container.engine, "before_cursor_execute", self._statement)
        self._engine = container.engine

    def _statement(self, *_args) -> None:
        self.statements += 1

    def reset(self) -> None:
        self.built = self.statements = 0

    def close(self) -> None:
        event.remove(self._engine, "before_cursor_execute", self._statement)


@pytest.fixture
def world(container, tmp_path, monkeypatch):
    admin, *_ = build_world(container, tmp_path)
    counted = Counted(container, monkeypatch)
    yield container, admin, counted
    counted.close()


def _caller(container) -> OciCaller:
    with container.session_factory() as session:
        return OciCaller(load_principal(session.scalar(select(Principal).where(Principal.name == "node-1"))))


def _miss(container, caller) -> None:
    with container.session_factory() as session:
        with pytest.raises(OciManifestUnknownError):
            oci_referrers.manifest_or_referrer(session, caller, TENANT, NAME, MISSING, blob_store=container.blob_store,
                                               clock=container.clock, **_signing(container))
        with pytest.raises(OciBlobUnknownError):
            oci_referrers.blob_or_referrer(session, caller, TENANT, NAME, MISSING, blob_store=container.blob_store,
                                           clock=container.clock, **_signing(container))


def _signing(container) -> dict:
    """The registry's key and the host a ``/v2`` caller asked (the ``.sig`` payload names it)."""
    return {"signer": oci_referrers.signer_of(container.keyring.primary), "host": "registry.test"}


def _released(container) -> set[int]:
    """The ids of acme/llm's released versions."""
    with container.session_factory() as session:
        model = loaders.load_model_unchecked(session, TENANT, NAME)
        return {pulled.version_id for pulled in oci_serving.released_raw(session, model)}


def test_a_miss_builds_nothing_and_costs_the_same_with_one_or_four_released_versions(world, tmp_path):
    container, admin, counted = world
    caller = _caller(container)
    # The most documents one version has: of its raw manifest six (model-signing bundle, the registry's
    # Sigstore bundle, BOM, provenance, scans, evals), of its image-shaped manifest two (bundle, BOM).
    kinds = 8
    # The first lookup records what was approved with no worker running (as before revision 0029), a bounded
    # few versions at a time.
    counted.reset()
    _miss(container, caller)
    assert counted.built <= 2 * oci_referrers.BACKFILL_PER_LOOKUP * kinds
    counted.reset()
    _miss(container, caller)
    assert counted.built == 0
    with_one = counted.statements
    assert len(_released(container)) == 1

    for seed in (4, 5, 6):
        number = awaiting_version(container, admin, tmp_path / f"more{seed}", TENANT, NAME,
                                  files={**tiny_model_files(seed), "README.md": b"v%d\n" % seed})
        approve_standin(container, TENANT, NAME, number)
    released = _released(container)
    assert len(released) == 4
    # The build_oci_artifacts job of each records its referrers' digests (a worker runs it here).
    drain(container)
    with container.session_factory() as session:
        recorded_versions = set(session.scalars(select(OciReferrerDigest.version_id)))
        newest = session.scalar(select(Version.id).order_by(Version.id.desc()).limit(1))
    assert released <= recorded_versions and newest in released
    counted.reset()
    _miss(container, caller)
    assert counted.built == 0
    assert counted.statements == with_one

    # A referrer's digest builds the documents of its own version only.
    with container.session_factory() as session:
        recorded = session.execute(select(OciReferrerDigest.manifest_digest, OciReferrerDigest.layer_digest)
                                   .where(OciReferrerDigest.version_id == newest).limit(1)).one()
        assert session.scalar(select(OciReferrerDigest.id).where(OciReferrerDigest.version_id != newest).limit(1))
    counted.reset()
    with container.session_factory() as session:
        pulled = oci_referrers.manifest_or_referrer(session, caller, TENANT, NAME, recorded[0],
                                                    blob_store=container.blob_store, clock=container.clock,
                                                    **_signing(container))
        assert pulled.referrer and pulled.artifact.manifest_digest == recorded[0]
        found = oci_referrers.blob_or_referrer(session, caller, TENANT, NAME, recorded[1],
                                               blob_store=container.blob_store, clock=container.clock,
                                               **_signing(container))
        assert found.digest == recorded[1]
    assert 0 < counted.built <= 2 * kinds
