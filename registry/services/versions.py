"""Submitting and reading model versions.

``submit`` pins the requested revision once (a branch or tag becomes a commit, recorded beside what
was asked for) and queues one ``mirror_file`` job per file in the same transaction; the jobs live in
:mod:`registry.services.mirroring`. A directory uploaded through the API becomes a version with
``submit_uploaded``, its blobs already stored.

Bytes are stored once, but a blob is put into a version only by a tenant that owns it
(:mod:`registry.services.blobs`). Loading models and versions is :mod:`registry.services.loaders`'.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, TypeVar

from sqlalchemy import func, or_, select
from sqlalchemy.exc import IntegrityError as SAIntegrityError
from sqlalchemy.orm import Session

from registry import audit
from registry.auth import AuthenticatedPrincipal, Permission, get_tenant, require, validate_name
from registry.db.models import BlobOwner, Model, Tenant, Version, VersionFile
from registry.db.session import begin_write, is_postgres
from registry.domain.chunks import ChunkHasher
from registry.domain.errors import (
    BlobNotFoundError,
    BlobsNotUploadedError,
    BlobVanishedError,
    InvalidInputError,
    InvalidPathError,
    InvalidStateError,
    LimitExceededError,
    QuotaExceededError,
    RegistryError,
    SizeMismatchError,
    UpstreamError,
)
from registry.domain.files import FileEntry, require_sha256, validate_file_list
from registry.domain.outcomes import Failed, Passed
from registry.domain.states import LIVE, VersionState
from registry.domain.text import (
    MAX_LABEL_LENGTH,
    MAX_REVISION_LENGTH,
    MAX_SOURCE_LENGTH,
    validate_label,
    validate_text,
)
from registry.services import adapters, chunks, gc, licenses, lifecycle, quotas
from registry.services.blobs import grant_blob, owned_blobs
from registry.services.loaders import find_version_unchecked, load_model_unchecked
from registry.services.ports import Ports
from registry.services.stages.mirroring import queue_resolving
from registry.sources import parse_source_uri
from registry.sources.base import Snapshot, Source, UpstreamFile
from registry.storage.base import BlobInfo, BlobStore


@dataclass(frozen=True)
class SubmitRequest:
    source: str
    revision: str | None = None
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    hf_endpoint: str | None = None
    license: str | None = None
    """A license the submitter declares (an SPDX id or expression, a Hub id, or ``other:<name>``)."""
    adapter_of: str | None = None
    """The base version this version is an adapter of (``registry/services/adapters.py``), or None."""

    def validate(self) -> None:
        """Refuse free text that is too long or holds control or bidirectional characters (globs are
        checked where they are compiled).

        Raises:
            InvalidTextError: naming the field.
        """
        validate_text(self.source, field="source", max_length=MAX_SOURCE_LENGTH)
        if self.revision is not None:
            validate_label(self.revision, field="revision", max_length=MAX_REVISION_LENGTH)
        if self.hf_endpoint is not None:
            validate_text(self.hf_endpoint, field="hf_endpoint", max_length=MAX_SOURCE_LENGTH)
        licenses.check_declared(self.license)


@dataclass(frozen=True)
class Limits:
    max_files: int = 10_000
    max_file_size: int = 1024**4
    max_total_size: int = 4 * 1024**4


T = TypeVar("T")

SourceOpener = Callable[[str, str | None, tuple[str, ...], tuple[str, ...]], Source]
"""``(uri, hf_endpoint, include, exclude) -> Source``; built by bootstrap from settings."""


# --- reading ---------------------------------------------------------------------------------


MAX_SEARCH_LENGTH = 200
"""Most characters a list's search text holds."""


def _check_filters(search: str | None, state: str | None) -> None:
    """Raises: InvalidInputError (a search with control characters or too long; not a state's name)."""
    if search is not None:
        validate_text(search, field="q", max_length=MAX_SEARCH_LENGTH)
    if state is not None and state not in {s.value for s in VersionState}:
        raise InvalidInputError(f"state must be one of {', '.join(s.value for s in VersionState)}",
                                field="state", value=state[:40])


def _contains(column: Any, search: str) -> Any:
    """``column`` holds ``search``, ignoring case (``%`` and ``_`` in it match themselves)."""
    return func.lower(column).contains(search.lower(), autoescape=True)


def list_versions(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, *,
                  search: str | None = None, state: str | None = None) -> list[Version]:
    """The model's versions by number; only those in ``state``, and whose source or revision holds ``search``.

    Raises:
        PermissionDeniedError: the principal may not read in ``tenant``.
        InvalidInputError: a bad search text or state.
    """
    require(principal, tenant, Permission.READ)
    _check_filters(search, state)
    model = load_model_unchecked(session, tenant, name)
    query = select(Version).where(Version.model_id == model.id)
    if state:
        query = query.where(Version.state == state)
    if search:
        query = query.where(or_(_contains(Version.source_repo, search),
                                _contains(func.coalesce(Version.requested_revision, ""), search),
                                _contains(func.coalesce(Version.resolved_revision, ""), search)))
    return list(session.scalars(query.order_by(Version.number)))


def readable_tenants(session: Session, principal: AuthenticatedPrincipal) -> list[str]:
    """The tenants whose models ``principal`` may read, by name (every tenant, for an administrator)."""
    if principal.is_admin:
        return list(session.scalars(select(Tenant.name).order_by(Tenant.name)))
    return sorted(t for t in principal.roles if Permission.READ in principal.permissions(t))


def list_models(session: Session, principal: AuthenticatedPrincipal, tenant: str, *,
                limit: int = 500, search: str | None = None, state: str | None = None) -> list[Model]:
    """The models of ``tenant``, by name (the first ``limit``); only those whose name holds ``search``, and
    that have a version in ``state``.

    Raises:
        PermissionDeniedError: the principal may not read in ``tenant``.
        InvalidInputError: a bad search text or state.
    """
    require(principal, tenant, Permission.READ)
    _check_filters(search, state)
    tenant_id = get_tenant(session, tenant).id
    query = select(Model).where(Model.tenant_id == tenant_id)
    if search:
        query = query.where(_contains(Model.name, search))
    if state:
        query = query.where(select(Version.id).where(Version.model_id == Model.id, Version.state == state).exists())
    return list(session.scalars(query.order_by(Model.name).limit(limit)))


def read_version(
    session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, number: int
) -> Version:
    require(principal, tenant, Permission.READ)
    return find_version_unchecked(session, tenant, name, number)


def read_signature(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str,
                   number: int) -> dict[str, Any]:
    """The version's OpenSSF model-signing bundle.

    Raises:
        InvalidStateError: the version exists but is not sealed yet, so it has no signature (409).
    """
    version = read_version(session, principal, tenant, name, number)
    if version.manifest_bundle is None:
        raise InvalidStateError(f"{tenant}/{name}@{number} is not sealed yet (state {version.state})",
                                state=version.state)
    return version.manifest_bundle


# --- submitting ------------------------------------------------------------------------------


def source_key(kind: str, repo: str, endpoint: str | None, revision: str, include: tuple, exclude: tuple,
               adapter_of: str | None = None) -> str:
    """What makes two submissions the same version: source, pinned revision and file selection, and for an
    adapter the base it is bound to (``adapter_of``: the base's statement digest; absent for other versions, so
    their keys stay what they were)."""
    body = {"kind": kind, "repo": repo, "endpoint": endpoint, "revision": revision,
            "include": sorted(include), "exclude": sorted(exclude)}
    if adapter_of is not None:
        body["adapter_of"] = adapter_of
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _retry_once_on_race(use_case: Callable[..., T]) -> Callable[..., T]:
    """Run a submission again if it lost a uniqueness race on commit.

    Two first submissions of a model, or of the same source, may commit at once: the unique
    constraints let one through, and the other, run again, finds the model or version it created.
    """

    @functools.wraps(use_case)
    def run(session: Session, *args: Any, **kwargs: Any) -> T:
        try:
            return use_case(session, *args, **kwargs)
        except SAIntegrityError:
            session.rollback()
            return use_case(session, *args, **kwargs)

    return run


@_retry_once_on_race
def submit(
    session: Session,
    principal: AuthenticatedPrincipal,
    tenant: str,
    name: str,
    request: SubmitRequest,
    *,
    open_source: SourceOpener,
    limits: Limits,
    ports: Ports,
) -> tuple[Version, bool]:
    """Submit a version of ``tenant/name`` from ``request.source``.

    The revision is resolved now. An unknown repository or revision, a bad listing or a listing
    over the limits makes a ``failed`` version that records why; an unreachable upstream makes a
    ``submitted`` version whose ``resolve_version`` job retries with backoff.

    Returns:
        The version and whether it was created (False: a live version of the same source, revision
        and file selection already existed and is returned instead).

    Raises:
        PermissionDeniedError: the principal may not submit in ``tenant``.
        InvalidInputError: a bad model name, source URI or glob.
        UnrecognizedLicenseError: the declared license normalizes to nothing.
        TenantNotFoundError: no such tenant.
        QuotaExceededError: the files the tenant does not own yet would take it over its quota
            (their declared sizes); nothing is created.
        AdapterBaseNotFoundError, AdapterBaseUnusableError: ``request.adapter_of`` names no usable base.
    """
    require(principal, tenant, Permission.SUBMIT)
    validate_name("model", name)
    request.validate()
    tenant_row = get_tenant(session, tenant)
    base = None if request.adapter_of is None else adapters.resolve_base(session, principal, tenant, name,
                                                                         request.adapter_of)
    kind, locator = parse_source_uri(request.source)
    source = open_source(request.source, request.hf_endpoint, request.include, request.exclude)
    try:
        snapshot: Snapshot | None = source.resolve(request.revision)
        resolve_error: RegistryError | None = None
    except UpstreamError as exc:
        snapshot, resolve_error = None, exc
    except RegistryError as exc:
        if isinstance(exc, InvalidInputError) and not _is_listing_error(exc):
            raise
        snapshot, resolve_error = None, exc

    begin_write(session)
    model = _lock_or_create_model(session, tenant_row.id, name)
    if snapshot is not None:
        key = source_key(snapshot.source_kind, snapshot.repo, _endpoint(source), snapshot.revision,
                         request.include, request.exclude, adapters.key_of(base))
        existing = session.scalar(
            select(Version).where(Version.model_id == model.id, Version.source_key == key,
                                  Version.state.in_([s.value for s in LIVE]), Version.deleted_at.is_(None))
        )
        if existing is not None:
            session.rollback()
            return existing, False
        owned = owned_blobs(session, tenant_row.id, (f.sha256 for f in snapshot.files if f.sha256))
        try:
            quotas.check(session, tenant_row, quotas.new_bytes(owned, ((f.sha256, f.size) for f in snapshot.files)))
        except QuotaExceededError:
            session.rollback()
            raise
    version = Version(
        model_id=model.id,
        number=model.next_version,
        state=VersionState.SUBMITTED.value,
        source_kind=kind,
        source_repo=locator,
        source_endpoint=_endpoint(source),
        requested_revision=request.revision,
        include=list(request.include),
        exclude=list(request.exclude),
        submitted_by=principal.id,
        declared_license=request.license,
    )
    model.next_version += 1
    session.add(version)
    session.flush()
    ref = f"{tenant}/{name}@{version.number}"
    if base is not None:
        adapters.bind(session, version, base)
    audit.append(session, actor=principal.name, action="version.submitted", subject=ref, tenant=tenant,
                 details={"source": request.source, "requested_revision": request.revision,
                          "include": list(request.include), "exclude": list(request.exclude),
                          "declared_license": request.license,
                          **({} if base is None else {"adapter_of": adapters.statement_binding(version)})})
    if snapshot is not None:
        accept_snapshot(session, version, snapshot, limits, ports)
    elif isinstance(resolve_error, UpstreamError):
        queue_resolving(session, version, ports)
    else:
        assert resolve_error is not None
        lifecycle.fail(session, version, Failed.from_error(resolve_error))
    session.commit()
    return version, True


def authorize_upload(session: Session, principal: AuthenticatedPrincipal, tenant: str,
                     size: int | None = None, limits: Limits | None = None) -> Tenant:
    """Check an upload before its bytes are read: who sends it, for which tenant, and how large.

    Returns:
        The tenant.

    Raises:
        PermissionDeniedError: the principal may not submit in ``tenant``.
        TenantNotFoundError: no such tenant.
        LimitExceededError: ``size`` is over the largest file a version may hold.
    """
    require(principal, tenant, Permission.SUBMIT)
    tenant_row = get_tenant(session, tenant)
    if size is not None and limits is not None and size > limits.max_file_size:
        raise LimitExceededError(f"an upload of {size} bytes is over the limit of {limits.max_file_size}",
                                 size=size, limit=limits.max_file_size)
    return tenant_row


def upload_blob(session: Session, principal: AuthenticatedPrincipal, tenant: str, digest: str,
                source: Any, size: int | None, *, blob_store: BlobStore) -> bool:
    """Store uploaded bytes under their digest (checked) and make ``tenant`` their owner.

    A tenant that does not own the digest yet proves that it holds the bytes: the whole body is read
    and hashed even when the same bytes are already stored (for another tenant), and a wrong body
    grants nothing. An owner's upload of a blob still stored is not read at all.

    Returns:
        False if the tenant owned the blob already; whether another tenant did is never told.

    Raises:
        PermissionDeniedError: the principal may not submit in ``tenant``.
        DigestMismatchError, SizeMismatchError: the bytes are not what the digest says.
        QuotaExceededError: the bytes would take the tenant over its quota (checked on the declared
            size before reading, and again when granted).
        BlobVanishedError: garbage collection took the stored bytes this upload found (a 503: send
            them again).
    """
    tenant_row = authorize_upload(session, principal, tenant)
    tenant_id = tenant_row.id
    owned = bool(owned_blobs(session, tenant_id, [digest]))
    if owned and blob_store.exists(digest):
        return False
    if not owned and size is not None:
        quotas.check(session, tenant_row, size)
    # No transaction stays open while the bytes stream.
    session.rollback()
    put = blob_store.put if owned else blob_store.put_proving_possession
    # Each chunk is hashed beside the whole blob, in the same read of the body.
    hasher = ChunkHasher()
    result = put(chunks.tap(source, hasher), expected_sha256=digest, expected_size=size)
    found = chunks.chunks_of_put(hasher, result)
    begin_write(session)
    try:
        grant_blob(session, tenant_id, digest, result.size, via="upload", blob_store=blob_store)
    except (BlobVanishedError, QuotaExceededError):
        session.rollback()  # the write lock goes before the answer does
        raise
    if found is not None:
        chunks.record_chunks(session, digest, found)
    session.commit()
    return True


def stat_uploaded_blob(session: Session, principal: AuthenticatedPrincipal, tenant: str, digest: str, *,
                       blob_store: BlobStore) -> BlobInfo:
    """The size of a blob ``tenant`` owns, so an uploader skips what it sent before.

    Raises:
        PermissionDeniedError: the principal may not submit in ``tenant``.
        BlobNotFoundError: ``tenant`` does not own the blob, whether or not another tenant does.
    """
    tenant_id = authorize_upload(session, principal, tenant).id
    require_sha256(digest)
    if not owned_blobs(session, tenant_id, [digest]):
        raise BlobNotFoundError(digest)
    return blob_store.stat(digest)


@_retry_once_on_race
def submit_uploaded(
    session: Session,
    principal: AuthenticatedPrincipal,
    tenant: str,
    name: str,
    files: list[FileEntry],
    *,
    label: str,
    limits: Limits,
    ports: Ports,
    license: str | None = None,
    derived_from: Version | None = None,
    adapter_of: str | None = None,
) -> tuple[Version, bool]:
    """Submit a version whose files were uploaded beforehand (``PUT /v1/blobs/sha256/{digest}``).

    The revision is the sha256 of the file list, so the same directory uploaded twice is one version.
    ``derived_from``: the version of the same model this unit was derived from (``registry.services.derive``);
    it is part of the source's key, so the same parts derived from another version are another version.
    ``adapter_of``: the base version the upload is an adapter of (``registry/services/adapters.py``).

    Raises:
        LimitExceededError: more files than a version may hold (refused before any lookup).
        AdapterBaseNotFoundError, AdapterBaseUnusableError: ``adapter_of`` names no usable base.
        InvalidInputError: a bad path or digest.
        BlobsNotUploadedError: files whose blobs the tenant has not uploaded or mirrored itself.
        SizeMismatchError: a file whose size differs from its stored blob's.
    """
    require(principal, tenant, Permission.SUBMIT)
    validate_name("model", name)
    validate_label(label, field="label", max_length=MAX_LABEL_LENGTH)
    licenses.check_declared(license)
    # Refused before any lookup: a huge list costs no more than this.
    if len(files) > limits.max_files:
        raise LimitExceededError(f"{len(files)} files exceed the limit of {limits.max_files}",
                                 files=len(files), limit=limits.max_files)
    entries = validate_file_list(files)
    tenant_id = get_tenant(session, tenant).id
    base = None if adapter_of is None else adapters.resolve_base(session, principal, tenant, name, adapter_of)
    begin_write(session)
    # Held until the version's files are committed: a blob garbage collection took is missing here,
    # and the client uploads it again.
    stored = owned_blobs(session, tenant_id, (e.sha256 for e in entries), hold=True)
    missing = [e.path for e in entries if e.sha256 not in stored]
    if missing:
        session.rollback()
        raise BlobsNotUploadedError(tenant, missing)
    for e in entries:
        if e.size != stored[e.sha256]:
            session.rollback()
            raise SizeMismatchError(e.path, expected=stored[e.sha256], actual=e.size)
    # Sizes come from the store, never from the client: they are signed and held against the limits.
    entries = [FileEntry(e.path, stored[e.sha256], e.sha256) for e in entries]
    listing = json.dumps([e.as_dict() for e in entries], sort_keys=True).encode()
    snapshot = Snapshot(source_kind="upload", repo=label, requested_revision=None,
                        revision=hashlib.sha256(listing).hexdigest(),
                        files=tuple(UpstreamFile(path=e.path, size=e.size, sha256=e.sha256) for e in entries))
    model = _lock_or_create_model(session, tenant_id, name)
    key = source_key("upload", label, None, snapshot.revision, (), (), adapters.key_of(base))
    if derived_from is not None and derived_from.model_id != model.id:
        session.rollback()
        raise InvalidInputError("a unit is derived from a version of the same model", reason="derive-other-model")
    existing = session.scalar(select(Version).where(
        Version.model_id == model.id, Version.source_key == key, Version.state.in_([s.value for s in LIVE]),
        Version.deleted_at.is_(None)))
    if existing is not None:
        session.rollback()
        return existing, False
    version = Version(model_id=model.id, number=model.next_version, state=VersionState.SUBMITTED.value,
                      source_kind="upload", source_repo=label, include=[], exclude=[], submitted_by=principal.id,
                      declared_license=license, derived_from=None if derived_from is None else derived_from.number)
    model.next_version += 1
    session.add(version)
    session.flush()
    if base is not None:
        adapters.bind(session, version, base)
    ref = f"{tenant}/{name}@{version.number}"
    audit.append(session, actor=principal.name, action="version.submitted", subject=ref, tenant=tenant,
                 details={"source": f"upload:{label}", "files": len(entries),
                          **({} if derived_from is None else {"derived_from": derived_from.number}),
                          **({} if base is None else {"adapter_of": adapters.statement_binding(version)})})
    accept_snapshot(session, version, snapshot, limits, ports, stored={e.path: e.sha256 for e in entries},
                    held=True)
    session.commit()
    return version, True


def _is_listing_error(exc: RegistryError) -> bool:
    # Bad paths and sizes in an upstream listing fail the version; a bad request is the caller's error.
    return isinstance(exc, (InvalidPathError, LimitExceededError))


def _endpoint(source: Source) -> str | None:
    return getattr(source, "endpoint", None)


def _lock_or_create_model(session: Session, tenant_id: int, name: str) -> Model:
    query = select(Model).where(Model.tenant_id == tenant_id, Model.name == name)
    if is_postgres(session):
        # FOR NO KEY UPDATE: submissions of the model wait for each other (next_version), but a
        # transaction that only references the model (a foreign key check takes KEY SHARE, e.g. while
        # sealing its previous version, which holds the audit head) does not wait for this one, which
        # next waits for the audit head: FOR UPDATE deadlocked the two.
        query = query.with_for_update(key_share=True)
    model = session.scalar(query)
    if model is None:
        model = Model(tenant_id=tenant_id, name=name, next_version=1)
        session.add(model)
        session.flush()
    return model


def accept_snapshot(session: Session, version: Version, snapshot: Snapshot, limits: Limits, ports: Ports,
                    *, stored: dict[str, str] | None = None, held: bool = False) -> None:
    """Record the pinned revision and files, then queue a mirror job per file not already stored.

    Args:
        stored: path -> sha256 of the files whose bytes the version's tenant owns, when the caller
            looked them up already; else they are looked up here.
        held: the caller holds ``stored`` against garbage collection already (``owned_blobs(hold=True)``
            in this transaction).
    """
    try:
        _check_limits(snapshot, limits)
    except RegistryError as exc:
        version.resolved_revision = snapshot.revision
        lifecycle.fail(session, version, Failed.from_error(exc))
        return
    version.resolved_revision = snapshot.revision
    # The card's license, normalized (never the raw text: that is bounded in upstream_card); the
    # license recorded after mirroring (services.licenses.record_licenses) replaces it.
    version.upstream_card = licenses.bounded_card(snapshot.card)
    card = licenses.card_license(version.upstream_card)
    version.license = card.id if card is not None else None
    binding = version.adapter_binding
    version.source_key = source_key(snapshot.source_kind, snapshot.repo, version.source_endpoint,
                                    snapshot.revision, tuple(version.include), tuple(version.exclude),
                                    None if binding is None else binding.base_manifest_digest)
    if stored is None:
        stored = _already_stored(session, version.model.tenant_id, snapshot.files)
    # Locked until this transaction commits the references; a blob garbage-collected meanwhile is
    # mirrored again instead.
    if not held:
        kept = gc.hold_blobs(session, stored.values())
        stored = {path: digest for path, digest in stored.items() if digest in kept}
    for upstream in snapshot.files:
        row = VersionFile(
            version_id=version.id, path=upstream.path, size=upstream.size,
            upstream_sha256=upstream.sha256, upstream_git_sha1=upstream.git_sha1, upstream_etag=upstream.etag,
        )
        if upstream.path in stored:
            row.sha256, row.mirrored_at = stored[upstream.path], ports.clock.now()
        session.add(row)
    session.flush()
    # Resolved: the submitted stage passes, and the lifecycle starts mirroring.
    lifecycle.conclude(session, version, Passed({
        "requested_revision": version.requested_revision, "revision": snapshot.revision,
        "files": len(snapshot.files), "bytes": sum(f.size for f in snapshot.files)}), ports)


def _check_limits(snapshot: Snapshot, limits: Limits) -> None:
    if not snapshot.files:
        raise InvalidInputError("the upstream revision has no files to mirror (check include/exclude)",
                                reason="empty")
    if len(snapshot.files) > limits.max_files:
        raise LimitExceededError(f"{len(snapshot.files)} files exceed the limit of {limits.max_files}",
                                 files=len(snapshot.files), limit=limits.max_files)
    for f in snapshot.files:
        if f.size > limits.max_file_size:
            raise LimitExceededError(f"{f.path} is {f.size} bytes, over the limit of {limits.max_file_size}",
                                     path=f.path, size=f.size, limit=limits.max_file_size)
    total = sum(f.size for f in snapshot.files)
    if total > limits.max_total_size:
        raise LimitExceededError(f"{total} bytes in all exceed the limit of {limits.max_total_size}",
                                 size=total, limit=limits.max_total_size)
    validate_file_list(FileEntry(f.path, f.size, "0" * 64) for f in snapshot.files)


def _already_stored(session: Session, tenant_id: int, files: Iterable[UpstreamFile]) -> dict[str, str]:
    """path -> sha256 of the files whose bytes the tenant owns already, so they are not transferred again.

    Only the tenant's own blobs count: another tenant's copy is no proof that this upstream serves
    the same bytes. Two queries, however many files.
    """
    files = list(files)
    owned = owned_blobs(session, tenant_id, (f.sha256 for f in files if f.sha256 is not None))
    found = {f.path: f.sha256 for f in files if f.sha256 in owned}
    # A small git file seen before in this tenant: its sha1 and size pin the same bytes.
    by_git: dict[tuple[str, int], list[str]] = {}
    for f in files:
        if f.sha256 is None and f.git_sha1 is not None:
            by_git.setdefault((f.git_sha1, f.size), []).append(f.path)
    if by_git:
        rows = session.execute(
            select(VersionFile.upstream_git_sha1, VersionFile.size, VersionFile.sha256).distinct()
            .join(BlobOwner, BlobOwner.digest == VersionFile.sha256)
            .where(BlobOwner.tenant_id == tenant_id,
                   VersionFile.upstream_git_sha1.in_({sha1 for sha1, _ in by_git}))
        )
        for sha1, size, sha256 in rows:
            found.update(dict.fromkeys(by_git.get((sha1, size), ()), sha256))
    return found
