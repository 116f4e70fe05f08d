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
again) gives its referrer a new digest; the subject, the model manifest, never changes for it. Authorization
is the caller's: ``registry/services/oci.py`` checks the pull before it asks for any of these.

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

from registry.db.models import Version
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
from registry.services import evals, exports, scans
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
