"""The documents of a released version, gathered as OCI referrers of its manifests, and its cosign signatures.

The model manifest (the raw shape) has six documents, each one referrer (``registry/domain/oci_referrers.py``
builds the manifests):

- the OpenSSF model-signing bundle, byte for byte the ``model.sig`` that ``modelreg fetch`` writes;
- the registry's Sigstore bundle over the manifest itself (a message signature with the registry's key,
  ``registry/domain/oci_signatures.py``), which ``@sigstore/verify`` and cosign's bundle format check;
- the CycloneDX 1.6 ML-BOM (``exports.cyclonedx_bom``), timestamped with the sealing time and with a serial
  number derived from the subject, so the same rows always give the same bytes;
- the SLSA provenance statement (``exports.slsa_statement``, unsigned: a DSSE signature is randomized, and a
  referrer must keep its digest between the listing and the pull; the signed envelope stays the auditors'
  export);
- the scan report (every file's verdicts, ``scans.file_scans``) and, once an eval ran, the eval report
  (``evals.result_doc`` of each suite).

The image-shaped manifest (``<tag>-image``) has its own two: the registry's Sigstore bundle over it, and the
ML-BOM, so a policy engine checking an image volume's reference finds them. Each manifest of either shape also
answers cosign's legacy attachment tag ``sha256-<hex>.sig`` (the simple-signing manifest, whose payload names
the manifest as ``<host>/<tenant>/<model>``, the host the caller asked) and the referrers tag schema's
``sha256-<hex>`` (the referrers index, for clients without the referrers API): :func:`manifest_or_referrer`.
The signatures are deterministic (RFC 6979), so none is stored either. The ``.sig`` manifest's digest and its
payload's are recorded as a referrer's are, when the tag is read, so the payload answers a pull by digest.

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

    for ref in referrers_of(session, version, pulled, blob_store=container.blob_store, signer=signer):
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
from registry.domain import modelpack, oci_referrers, oci_signatures
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
from registry.domain.oci_signatures import FALLBACK_TAG_RE, SIG_TAG_RE, SIMPLE_SIGNING, ManifestSigner
from registry.services import evals, exports, loaders, oci_serving, scans
from registry.services.loaders import version_ref
from registry.services.oci_serving import BlobRef, Pulled, StoredArtifact
from registry.services.oci_tokens import OciCaller
from registry.signing.bundle import PREDICATE_TYPE, SIGNATURE_FILE_NAME
from registry.signing.keys import SigningKey
from registry.storage.base import BlobStore

ANNOTATION_VERSION = "dev.modelreg.version"
"""``tenant/model@number`` on every referrer, so ``oras discover`` says which version a document is of."""


def signer_of(key: SigningKey) -> ManifestSigner:
    """The registry's signing key (``keyring.primary``, published at ``/v1/keys``) as /v2's signatures use it."""
    return ManifestSigner(key.sign_deterministic, key.key_id)


class _At:
    """A clock that always reads one moment (the BOM's timestamp is the version's sealing)."""

    def __init__(self, moment: dt.datetime) -> None:
        self._moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.timezone.utc)

    def now(self) -> dt.datetime:
        return self._moment


def referrers_of(session: Session, version: Version, pulled: Pulled, *, blob_store: BlobStore,
                 signer: ManifestSigner) -> Iterator[Referrer]:
    """The referrers of ``pulled`` (a stored shape of ``version``), one per document, built lazily in the
    order of :data:`registry.domain.oci_referrers.KINDS`: six (five before an eval) of the raw shape, two of
    the image shape (the caller checked the pull).

    Raises:
        BlobNotFoundError: the README the BOM reads is missing from the store.
        BomSchemaError: the BOM fails the CycloneDX schema (a bug).
    """
    subject = _subject(pulled)
    for document in _documents(session, version, pulled, blob_store, signer):
        yield build(subject, document)


def _documents(session: Session, version: Version, pulled: Pulled, blob_store: BlobStore,
               signer: ManifestSigner) -> Iterator[Document]:
    ref = version_ref(version)
    tag = {ANNOTATION_VERSION: ref}
    raw = pulled.artifact.shape == modelpack.RAW
    if raw and version.manifest_bundle is not None:
        yield Document(SIGNATURE, SIGNATURE_FILE_NAME, json.dumps(version.manifest_bundle, indent=2).encode(),
                       {**tag, "dev.sigstore.bundle.content": "dsse-envelope",
                        "dev.sigstore.bundle.predicateType": PREDICATE_TYPE})
    manifest = pulled.artifact
    yield oci_signatures.bundle_document(
        manifest.manifest_digest, oci_signatures.sigstore_bundle(manifest.manifest_bytes, signer.sign, signer.key_id),
        tag)
    sealed = version.sealed_at or version.created_at
    bom = exports.cyclonedx_bom(session, version, blob_store=blob_store, clock=_At(sealed),
                                serial_number=uuid.uuid5(uuid.NAMESPACE_URL,
                                                         f"urn:modelreg:bom:{manifest.manifest_digest}"))
    yield Document(CYCLONEDX, f"{_stem(version)}.cdx.json", bom, tag)
    if not raw:
        return
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


def signature_manifest(pulled: Pulled, docker_repository: str, signer: ManifestSigner) -> Referrer:
    """cosign's ``sha256-<hex>.sig`` manifest of ``pulled`` (named as ``docker_repository``), as a Referrer
    (its layer the simple-signing payload) so it is recorded and looked up as one; it has no subject and is
    never listed among the referrers."""
    payload = oci_signatures.simple_signing_payload(docker_repository, pulled.artifact.manifest_digest)
    sig = oci_signatures.simple_signing_manifest(payload, signer.sign)
    return Referrer(SIMPLE_SIGNING, json.loads(sig.manifest_bytes), sig.manifest_bytes, sig.manifest_digest,
                    sig.payload, sig.payload_digest)


def docker_repository(host: str, tenant: str, name: str) -> str | None:
    """``host/tenant/name`` as a simple-signing ``docker-reference``; None when that is no valid reference
    (the Host header is the caller's: it is checked, never trusted to be well formed)."""
    candidate = f"{host.lower()}/{tenant}/{name}"
    return candidate if oci_signatures.DOCKER_REFERENCE_RE.match(candidate) else None


def _attachments(session: Session, version: Version, pulled: Pulled, blob_store: BlobStore, signer: ManifestSigner,
                 repository: str | None) -> Iterator[Referrer]:
    """The referrers of ``pulled`` and, for a caller whose host makes a reference, its ``.sig`` manifest."""
    yield from referrers_of(session, version, pulled, blob_store=blob_store, signer=signer)
    if repository is not None:
        yield signature_manifest(pulled, repository, signer)


# --- the /v2 answers that referrers add ------------------------------------------------------------


def referrers(session: Session, caller: OciCaller, tenant: str, name: str, digest: str, *,
              blob_store: BlobStore, clock: Clock, signer: ManifestSigner) -> list[Referrer]:
    """The referrers of the manifest ``digest`` (either shape) in ``tenant/name`` (its documents as artifacts);
    none when no released version of the repository has that manifest (the spec answers an empty list, not 404).

    Raises:
        PullScopeDeniedError, PermissionDeniedError: see :func:`registry.services.oci_serving.require_pull`.
        TenantNotFoundError, ModelNotFoundError: no such repository.
        InvalidInputError: not a ``sha256:`` digest.
    """
    oci_serving.require_pull(caller, tenant, name)
    model = loaders.load_model_unchecked(session, tenant, name)
    if not oci_serving.DIGEST_RE.match(digest):
        raise InvalidInputError(f"{digest[:80]!r} is not a sha256:<64 hex> digest", field="digest")
    for pulled in oci_serving.released_shapes(session, model, manifest_digest=digest):
        found = list(referrers_of(session, session.get(Version, pulled.version_id), pulled, blob_store=blob_store,
                                  signer=signer))
        # What a client learns here it may pull by digest next: the lookup finds it recorded.
        record(session, model, pulled, found, clock=clock)
        return found
    return []


def manifest_or_referrer(session: Session, caller: OciCaller, tenant: str, name: str, reference: str, *,
                         blob_store: BlobStore, clock: Clock, signer: ManifestSigner, host: str) -> Pulled:
    """:func:`registry.services.oci_serving.manifest`, or, for a digest that is no stored manifest of the repository,
    the manifest of one of its released versions' referrers or ``.sig`` manifests (raises as
    ``oci_serving.manifest`` when neither); the tags ``sha256-<hex>.sig`` and ``sha256-<hex>`` name the
    ``.sig`` manifest and the referrers index of the released manifest ``sha256:<hex>`` (:func:`_attachment_tag`).
    ``host`` is the one the caller asked (the ``.sig`` payload's ``docker-reference``).

    A digest is looked up among the recorded ones (:func:`record`): one indexed query, and only the version
    it names has its documents built, to serve them."""
    if SIG_TAG_RE.match(reference) or FALLBACK_TAG_RE.match(reference):
        return _attachment_tag(session, caller, tenant, name, reference, blob_store=blob_store, clock=clock,
                               signer=signer, host=host)
    try:
        return oci_serving.manifest(session, caller, tenant, name, reference, clock=clock)
    except OciManifestUnknownError:
        if not oci_serving.DIGEST_RE.match(reference):
            raise
        # oci_serving.manifest checked the pull and found the repository before it found no such manifest.
        model = loaders.load_model_unchecked(session, tenant, name)
        for pulled, referrer in _recorded(session, model, OciReferrerDigest.manifest_digest, reference, blob_store,
                                          clock, signer, docker_repository(host, tenant, name)):
            if referrer.manifest_digest == reference:
                artifact = StoredArtifact(oci_serving.REFERRER_SHAPE, modelpack.OCI_MANIFEST, referrer.manifest_bytes,
                                          referrer.manifest_digest, oci_referrers.EMPTY_DIGEST)
                return Pulled(pulled.repository, pulled.version_id, pulled.number, artifact, referrer=True)
        raise


def _attachment_tag(session: Session, caller: OciCaller, tenant: str, name: str, reference: str, *,
                    blob_store: BlobStore, clock: Clock, signer: ManifestSigner, host: str) -> Pulled:
    """The ``.sig`` manifest or the referrers index (the referrers tag schema) of a released manifest."""
    oci_serving.require_pull(caller, tenant, name)
    model = loaders.load_model_unchecked(session, tenant, name)
    repository = f"{tenant}/{name}"
    sig = SIG_TAG_RE.match(reference)
    digest = "sha256:" + (sig or FALLBACK_TAG_RE.match(reference)).group(1)  # type: ignore[union-attr]
    pulled = next(oci_serving.released_shapes(session, model, manifest_digest=digest), None)
    if pulled is None:
        raise OciManifestUnknownError(repository, reference, "no released version has the manifest this tag names")
    if sig:
        named = docker_repository(host, tenant, name)
        if named is None:
            raise OciManifestUnknownError(repository, reference,
                                          f"{host[:100]!r}/{repository} is no docker reference to sign")
        found = [signature_manifest(pulled, named, signer)]
        record(session, model, pulled, found, clock=clock)
        artifact = StoredArtifact(oci_serving.REFERRER_SHAPE, modelpack.OCI_MANIFEST, found[0].manifest_bytes,
                                  found[0].manifest_digest, oci_referrers.EMPTY_DIGEST)
    else:
        found = list(referrers_of(session, session.get(Version, pulled.version_id), pulled, blob_store=blob_store,
                                  signer=signer))
        record(session, model, pulled, found, clock=clock)
        listed = oci_referrers.index(found)
        artifact = StoredArtifact(oci_serving.REFERRER_SHAPE, oci_referrers.OCI_INDEX, listed,
                                  modelpack.digest_of(listed), "")
    return Pulled(pulled.repository, pulled.version_id, pulled.number, artifact, referrer=True)


def blob_or_referrer(session: Session, caller: OciCaller, tenant: str, name: str, digest: str, *,
                     blob_store: BlobStore, clock: Clock, signer: ManifestSigner, host: str) -> BlobRef:
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
        for _pulled, referrer in _recorded(session, model, OciReferrerDigest.layer_digest, digest, blob_store, clock,
                                           signer, docker_repository(host, tenant, name)):
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
                   clock: Clock, signer: ManifestSigner) -> None:
    """Record the referrers' digests of version ``version_id`` (of each stored shape) if it is released and
    its model manifest is stored (the ``build_oci_artifacts`` job, once it stored the shapes); nothing otherwise."""
    with session_factory() as session:
        version = session.get(Version, version_id)
        if version is None:
            return
        model = version.model
        for pulled in oci_serving.released_shapes(session, model, version_ids=[version_id]):
            record(session, model, pulled, list(referrers_of(session, version, pulled, blob_store=blob_store,
                                                             signer=signer)), clock=clock)


BACKFILL_PER_LOOKUP = 2
"""How many released versions without recorded digests (approved before revision 0029) one lookup that
finds no digest records, oldest first: each such lookup builds at most this many versions' documents, and
once all are recorded a lookup builds none."""


def _recorded(session: Session, model: Model, column: Any, digest: str, blob_store: BlobStore, clock: Clock,
              signer: ManifestSigner, repository: str | None) -> Iterator[tuple[Pulled, Referrer]]:
    """The referrers (and ``.sig`` manifests, named as ``repository``), as they are now, of every shape of the
    released version whose recorded ``column`` is ``digest`` (none when no row names it: nothing is built to
    search)."""
    found = _version_named(session, model, column, digest)
    if found is None and _backfill(session, model, blob_store, clock, signer):
        found = _version_named(session, model, column, digest)
    if found is None:
        return
    version = session.get(Version, found.version_id)
    for pulled in oci_serving.released_shapes(session, model, version_ids=[found.version_id]):
        for referrer in _attachments(session, version, pulled, blob_store, signer, repository):
            yield pulled, referrer


def _version_named(session: Session, model: Model, column: Any, digest: str) -> Pulled | None:
    """The released version of ``model`` a recorded ``column`` equal to ``digest`` names (one indexed query)."""
    named = select(OciReferrerDigest.version_id).where(OciReferrerDigest.model_id == model.id, column == digest)
    return next(oci_serving.released_raw(session, model, version_ids=named), None)


def _backfill(session: Session, model: Model, blob_store: BlobStore, clock: Clock, signer: ManifestSigner) -> bool:
    """Record up to :data:`BACKFILL_PER_LOOKUP` released versions of ``model`` that have no recorded digests;
    whether any was."""
    unrecorded = ~exists().where(OciReferrerDigest.version_id == OciArtifact.version_id)
    pending = list(oci_serving.released_raw(session, model, version_ids=select(OciArtifact.version_id).where(
        OciArtifact.model_id == model.id, OciArtifact.shape == modelpack.RAW, unrecorded)))
    pending = pending[-BACKFILL_PER_LOOKUP:]
    for pending_raw in pending:
        version = session.get(Version, pending_raw.version_id)
        for pulled in oci_serving.released_shapes(session, model, version_ids=[pending_raw.version_id]):
            record(session, model, pulled, list(referrers_of(session, version, pulled, blob_store=blob_store,
                                                             signer=signer)), clock=clock)
    return bool(pending)


def _subject(pulled: Pulled) -> Subject:
    return Subject(pulled.artifact.manifest_digest, len(pulled.artifact.manifest_bytes))
