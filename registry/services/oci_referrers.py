"""The documents of a released version, gathered as OCI referrers of its model manifest.

Five documents, each one referrer (``registry/domain/oci_referrers.py`` builds the manifests):

- the OpenSSF model-signing bundle, byte for byte the ``model.sig`` that ``modelreg fetch`` writes;
- the CycloneDX 1.6 ML-BOM (``exports.cyclonedx_bom``), timestamped with the sealing time and with a serial
  number derived from the subject, so the same rows always give the same bytes;
- the SLSA provenance statement (``exports.slsa_statement``, unsigned: a DSSE signature is randomized, and a
  referrer must keep its digest between the listing and the pull; the signed envelope stays the auditors'
  export);
- the scan report (every file's verdicts, ``scans.file_scans``) and, once an eval ran, the eval report
  (``evals.result_doc`` of each suite).

No document is stored: each is built from the rows as they are now. A document that changes (a rescan, an
eval run again) gives its referrer a new digest; the subject, the stored model manifest, never changes for it.
Their digests are recorded (``oci_referrer_digests``, :func:`record`) wherever they are built: by the
``build_oci_artifacts`` job once a version's model manifest is stored, and by the listing, so a pull by a
digest it listed finds it. A lookup by digest is one indexed query for the version it names, whose documents
alone are then built to serve it; a digest no row names builds nothing (versions approved before the table
are recorded a few per lookup, :data:`BACKFILL_PER_LOOKUP`, until none is left).
Authorization is ``registry/services/oci_serving.py``'s: every entry point here (:func:`referrers`,
:func:`manifest_or_referrer`, :func:`blob_or_referrer`) checks the pull through it before reading anything.

Usage (a sketch, not run as a doctest)::

    for ref in referrers_of(session, version, Subject(digest, size), blob_store=container.blob_store):
        ref.artifact_type, ref.manifest_digest
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, sessionmaker

from registry.clock import Clock
from registry.db.models import Model, OciArtifact, OciReferrerDigest, Version
from registry.db.session import begin_write, is_postgres
from registry.domain import modelpack, oci_referrers
from registry.domain.errors import InvalidInputError, OciBlobUnknownError, OciManifestUnknownError
from registry.domain.modelpack import canonical_json
from registry.domain.oci_referrers import (
    CYCLONEDX,
    EVAL_REPORT,
    IN_TOTO,
    SCAN_REPORT,
    SIGNATURE,
    Document,
    Referrer,
    Subject,
    build,
)
from registry.services import evals, exports, loaders, oci_serving, scans
from registry.services.loaders import version_ref
from registry.services.oci_serving import BlobRef, Pulled, StoredArtifact
from registry.services.oci_tokens import OciCaller
from registry.signing.bundle import PREDICATE_TYPE, SIGNATURE_FILE_NAME
from registry.storage.base import BlobStore

ANNOTATION_VERSION = "dev.modelreg.version"
"""``tenant/model@number`` on every referrer, so ``oras discover`` says which version a document is of."""


class _At:
    """A clock that always reads one moment (the BOM's timestamp is the version's sealing)."""

    def __init__(self, moment: dt.datetime) -> None:
        self._moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.timezone.utc)

    def now(self) -> dt.datetime:
        return self._moment


def referrers_of(session: Session, version: Version, subject: Subject, *, blob_store: BlobStore) -> Iterator[Referrer]:
    """The referrers of ``version`` (whose model manifest is ``subject``), one per document, built lazily in
    the order of :data:`registry.domain.oci_referrers.KINDS` (the caller checked the pull).

    Raises:
        BlobNotFoundError: the README the BOM reads is missing from the store.
        BomSchemaError: the BOM fails the CycloneDX schema (a bug).
    """
    for document in _documents(session, version, subject, blob_store):
        yield build(subject, document)


def _documents(session: Session, version: Version, subject: Subject, blob_store: BlobStore) -> Iterator[Document]:
    ref = version_ref(version)
    tag = {ANNOTATION_VERSION: ref}
    if version.manifest_bundle is not None:
        yield Document(SIGNATURE, SIGNATURE_FILE_NAME, json.dumps(version.manifest_bundle, indent=2).encode(),
                       {**tag, "dev.sigstore.bundle.content": "dsse-envelope",
                        "dev.sigstore.bundle.predicateType": PREDICATE_TYPE})
    sealed = version.sealed_at or version.created_at
    bom = exports.cyclonedx_bom(session, version, blob_store=blob_store, clock=_At(sealed),
                                serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"urn:modelreg:bom:{subject.digest}"))
    yield Document(CYCLONEDX, f"{_stem(version)}.cdx.json", bom, tag)
    yield Document(IN_TOTO, f"{_stem(version)}.intoto.json", canonical_json(exports.slsa_statement(session, version)),
                   {**tag, "in-toto.io/predicate-type": exports.SLSA_PREDICATE_TYPE})
    yield Document(SCAN_REPORT, "scan-report.json",
                   canonical_json({"version": ref, "files": scans.file_scans(session, version.files)}), tag)
    results = evals.results_of(session, version)
    if results:
        yield Document(EVAL_REPORT, "eval-report.json",
                       canonical_json({"version": ref, "evals": [evals.result_doc(r) for r in results]}), tag)


def _stem(version: Version) -> str:
    return f"{version.model.tenant.name}-{version.model.name}-{version.number}"


# --- the /v2 answers that referrers add ------------------------------------------------------------


def referrers(session: Session, caller: OciCaller, tenant: str, name: str, digest: str, *,
              blob_store: BlobStore, clock: Clock) -> list[Referrer]:
    """The referrers of the model manifest ``digest`` in ``tenant/name`` (its documents as artifacts); none
    when no released version of the repository has that manifest (the spec answers an empty list, not 404).

    Raises:
        PullScopeDeniedError, PermissionDeniedError: see :func:`registry.services.oci_serving.require_pull`.
        TenantNotFoundError, ModelNotFoundError: no such repository.
        InvalidInputError: not a ``sha256:`` digest.
    """
    oci_serving.require_pull(caller, tenant, name)
    model = loaders.load_model_unchecked(session, tenant, name)
    if not oci_serving.DIGEST_RE.match(digest):
        raise InvalidInputError(f"{digest[:80]!r} is not a sha256:<64 hex> digest", field="digest")
    for pulled in oci_serving.released_raw(session, model, manifest_digest=digest):
        found = list(referrers_of(session, session.get(Version, pulled.version_id), _subject(pulled),
                                  blob_store=blob_store))
        # What a client learns here it may pull by digest next: the lookup finds it recorded.
        record(session, model, pulled, found, clock=clock)
        return found
    return []


def manifest_or_referrer(session: Session, caller: OciCaller, tenant: str, name: str, reference: str, *,
                         blob_store: BlobStore, clock: Clock) -> Pulled:
    """:func:`registry.services.oci_serving.manifest`, or, for a digest that is no stored manifest of the repository,
    the manifest of one of its released versions' referrers (raises as ``oci_serving.manifest`` when neither).

    A digest is looked up among the recorded ones (:func:`record`): one indexed query, and only the version
    it names has its documents built, to serve them."""
    try:
        return oci_serving.manifest(session, caller, tenant, name, reference, clock=clock)
    except OciManifestUnknownError:
        if not oci_serving.DIGEST_RE.match(reference):
            raise
        # oci_serving.manifest checked the pull and found the repository before it found no such manifest.
        model = loaders.load_model_unchecked(session, tenant, name)
        for pulled, referrer in _recorded(session, model, OciReferrerDigest.manifest_digest, reference, blob_store,
                                          clock):
            if referrer.manifest_digest == reference:
                artifact = StoredArtifact(oci_serving.REFERRER_SHAPE, modelpack.OCI_MANIFEST, referrer.manifest_bytes,
                                          referrer.manifest_digest, oci_referrers.EMPTY_DIGEST)
                return Pulled(pulled.repository, pulled.version_id, pulled.number, artifact, referrer=True)
        raise


def blob_or_referrer(session: Session, caller: OciCaller, tenant: str, name: str, digest: str, *,
                     blob_store: BlobStore, clock: Clock) -> BlobRef:
    """:func:`registry.services.oci_serving.blob`, or a document (or the empty config) of one of the repository's
    released versions' referrers (raises as ``oci_serving.blob`` when neither); looked up as
    :func:`manifest_or_referrer` looks up a manifest."""
    try:
        return oci_serving.blob(session, caller, tenant, name, digest)
    except OciBlobUnknownError:
        # oci_serving.blob checked the pull, the repository and the digest's form before it found no such blob.
        model = loaders.load_model_unchecked(session, tenant, name)
        if digest == oci_referrers.EMPTY_DIGEST:
            # Every referrer's config is the empty descriptor: any released version makes it this repository's.
            if next(oci_serving.released_raw(session, model), None) is not None:
                data = oci_referrers.EMPTY_BYTES
                return BlobRef(digest, len(data), digest.removeprefix("sha256:"), data)
            raise
        for _pulled, referrer in _recorded(session, model, OciReferrerDigest.layer_digest, digest, blob_store, clock):
            if referrer.layer_digest == digest:
                data = referrer.layer_bytes
                return BlobRef(digest, len(data), digest.removeprefix("sha256:"), data)
        raise


def record(session: Session, model: Model, pulled: Pulled, referrers_now: list[Referrer], *, clock: Clock) -> None:
    """Record the digests of a released version's referrers as just built (kept: rows already there), and
    commit. Called wherever they are built: the listing, the build job (:func:`record_version`), and the
    first lookups after an upgrade (:data:`BACKFILL_PER_LOOKUP`)."""
    # Most listings find every digest recorded already: then one read, and no write.
    known = set(session.scalars(select(OciReferrerDigest.manifest_digest).where(
        OciReferrerDigest.version_id == pulled.version_id)))
    rows = [{"version_id": pulled.version_id, "model_id": model.id, "artifact_type": r.artifact_type,
             "manifest_digest": r.manifest_digest, "layer_digest": r.layer_digest, "created_at": clock.now()}
            for r in referrers_now if r.manifest_digest not in known]
    if not rows:
        return
    insert = postgresql_insert if is_postgres(session) else sqlite_insert
    begin_write(session)
    session.execute(insert(OciReferrerDigest).values(rows).on_conflict_do_nothing(
        index_elements=[OciReferrerDigest.version_id, OciReferrerDigest.manifest_digest]))
    session.commit()


def record_version(session_factory: sessionmaker[Session], version_id: int, *, blob_store: BlobStore,
                   clock: Clock) -> None:
    """Record the referrers' digests of version ``version_id`` if it is released and its model manifest is
    stored (the ``build_oci_artifacts`` job, once it stored the shapes); nothing otherwise."""
    with session_factory() as session:
        version = session.get(Version, version_id)
        if version is None:
            return
        model = version.model
        for pulled in oci_serving.released_raw(session, model, version_ids=[version_id]):
            record(session, model, pulled, list(referrers_of(session, version, _subject(pulled),
                                                             blob_store=blob_store)), clock=clock)


BACKFILL_PER_LOOKUP = 2
"""How many released versions without recorded digests (approved before revision 0029) one lookup that
finds no digest records, oldest first: each such lookup builds at most this many versions' documents, and
once all are recorded a lookup builds none."""


def _recorded(session: Session, model: Model, column: Any, digest: str, blob_store: BlobStore,
              clock: Clock) -> Iterator[tuple[Pulled, Referrer]]:
    """The referrers, as they are now, of the released version whose recorded ``column`` is ``digest``
    (none when no row names it: nothing is built to search)."""
    found = _version_named(session, model, column, digest)
    if found is None and _backfill(session, model, blob_store, clock):
        found = _version_named(session, model, column, digest)
    if found is None:
        return
    for referrer in referrers_of(session, session.get(Version, found.version_id), _subject(found),
                                 blob_store=blob_store):
        yield found, referrer


def _version_named(session: Session, model: Model, column: Any, digest: str) -> Pulled | None:
    """The released version of ``model`` a recorded ``column`` equal to ``digest`` names (one indexed query)."""
    named = select(OciReferrerDigest.version_id).where(OciReferrerDigest.model_id == model.id, column == digest)
    return next(oci_serving.released_raw(session, model, version_ids=named), None)


def _backfill(session: Session, model: Model, blob_store: BlobStore, clock: Clock) -> bool:
    """Record up to :data:`BACKFILL_PER_LOOKUP` released versions of ``model`` that have no recorded digests;
    whether any was."""
    unrecorded = ~exists().where(OciReferrerDigest.version_id == OciArtifact.version_id)
    pending = list(oci_serving.released_raw(session, model, version_ids=select(OciArtifact.version_id).where(
        OciArtifact.model_id == model.id, OciArtifact.shape == modelpack.RAW, unrecorded)))
    pending = pending[-BACKFILL_PER_LOOKUP:]
    for pulled in pending:
        record(session, model, pulled, list(referrers_of(session, session.get(Version, pulled.version_id),
                                                         _subject(pulled), blob_store=blob_store)), clock=clock)
    return bool(pending)


def _subject(pulled: Pulled) -> Subject:
    return Subject(pulled.artifact.manifest_digest, len(pulled.artifact.manifest_bytes))
