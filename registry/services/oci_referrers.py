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

Nothing is cached: each call reads the rows as they are now. A document that changes (a rescan, an eval run
again) gives its referrer a new digest; the subject, the stored model manifest, never changes for it.
Authorization is ``registry/services/oci.py``'s: every entry point here (:func:`referrers`,
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

from sqlalchemy.orm import Session

from registry.db.models import Model, Version
from registry.domain.modelpack import canonical_json
from registry.domain import modelpack, oci_referrers
from registry.domain.errors import InvalidInputError, OciBlobUnknownError, OciManifestUnknownError
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
from registry.services import evals, exports, loaders, oci, scans
from registry.services.oci import BlobRef, OciCaller, Pulled, StoredArtifact
from registry.services.loaders import version_ref
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
              blob_store: BlobStore) -> list[Referrer]:
    """The referrers of the model manifest ``digest`` in ``tenant/name`` (its documents as artifacts); none
    when no released version of the repository has that manifest (the spec answers an empty list, not 404).

    Raises:
        PullScopeDeniedError, PermissionDeniedError: see :func:`registry.services.oci.require_pull`.
        TenantNotFoundError, ModelNotFoundError: no such repository.
        InvalidInputError: not a ``sha256:`` digest.
    """
    oci.require_pull(caller, tenant, name)
    model = loaders.load_model_unchecked(session, tenant, name)
    if not oci.DIGEST_RE.match(digest):
        raise InvalidInputError(f"{digest[:80]!r} is not a sha256:<64 hex> digest", field="digest")
    for pulled in oci.released_raw(session, model, manifest_digest=digest):
        return list(referrers_of(session, session.get(Version, pulled.version_id), _subject(pulled),
                                 blob_store=blob_store))
    return []


def manifest_or_referrer(session: Session, caller: OciCaller, tenant: str, name: str, reference: str, *,
                         blob_store: BlobStore) -> Pulled:
    """:func:`registry.services.oci.manifest`, or, for a digest that is no stored manifest of the repository,
    the manifest of one of its released versions' referrers (raises as ``oci.manifest`` when neither)."""
    try:
        return oci.manifest(session, caller, tenant, name, reference)
    except OciManifestUnknownError:
        if not oci.DIGEST_RE.match(reference):
            raise
        # oci.manifest checked the pull and found the repository before it found no such manifest.
        model = loaders.load_model_unchecked(session, tenant, name)
        for pulled, referrer in _every_referrer(session, model, blob_store):
            if referrer.manifest_digest == reference:
                artifact = StoredArtifact(oci.REFERRER_SHAPE, modelpack.OCI_MANIFEST, referrer.manifest_bytes,
                                          referrer.manifest_digest, oci_referrers.EMPTY_DIGEST)
                return Pulled(pulled.repository, pulled.version_id, pulled.number, artifact, referrer=True)
        raise


def blob_or_referrer(session: Session, caller: OciCaller, tenant: str, name: str, digest: str, *,
                     blob_store: BlobStore) -> BlobRef:
    """:func:`registry.services.oci.blob`, or a document (or the empty config) of one of the repository's
    released versions' referrers (raises as ``oci.blob`` when neither)."""
    try:
        return oci.blob(session, caller, tenant, name, digest)
    except OciBlobUnknownError:
        # oci.blob checked the pull, the repository and the digest's form before it found no such blob.
        model = loaders.load_model_unchecked(session, tenant, name)
        for _pulled, referrer in _every_referrer(session, model, blob_store):
            # Every referrer's config is the empty descriptor: any released version makes it this repository's.
            for data, found in ((oci_referrers.EMPTY_BYTES, oci_referrers.EMPTY_DIGEST),
                                (referrer.layer_bytes, referrer.layer_digest)):
                if found == digest:
                    return BlobRef(digest, len(data), digest.removeprefix("sha256:"), data)
        raise


def _every_referrer(session: Session, model: Model, blob_store: BlobStore) -> Iterator[tuple[Pulled, Referrer]]:
    """The referrers of every released version of ``model``, newest version first, built as they are asked."""
    for pulled in oci.released_raw(session, model):
        for referrer in referrers_of(session, session.get(Version, pulled.version_id), _subject(pulled),
                                     blob_store=blob_store):
            yield pulled, referrer


def _subject(pulled: Pulled) -> Subject:
    return Subject(pulled.artifact.manifest_digest, len(pulled.artifact.manifest_bytes))
