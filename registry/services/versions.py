"""Submitting, mirroring and sealing model versions.

``submit`` pins the requested revision once (a branch or tag becomes a commit, recorded beside what
was asked for) and queues one ``mirror_file`` job per file in the same transaction. Each job streams
one file from the upstream into the blob store, hashed in the same pass and checked against what the
upstream published. The job that lands the last file queues ``seal_version``, which freezes the file
list and signs it as an OpenSSF model-signing bundle, from the digests computed while mirroring.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any, Callable

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from registry import audit, jobs
from registry.services import scans
from registry.auth import AuthenticatedPrincipal, Permission, get_tenant, require, validate_name
from registry.db.models import Blob, Job, Model, Version, VersionFile, utcnow
from registry.db.session import begin_write, is_postgres
from registry.domain.errors import (
    InvalidInputError,
    IntegrityError,
    LimitExceededError,
    ModelNotFoundError,
    NotFoundError,
    RegistryError,
    UpstreamError,
    VersionNotFoundError,
)
from registry.domain.files import FileEntry, validate_file_list
from registry.domain.states import LIVE, VersionState, check_transition
from registry.signing.bundle import build_model_statement, sign_model_bundle
from registry.signing.canonical import canonical_json
from registry.signing.keys import SigningKey
from registry.sources import parse_source_uri
from registry.sources.base import Snapshot, Source, UpstreamFile
from registry.storage.base import BlobStore

log = logging.getLogger(__name__)

MIRROR_FILE = "mirror_file"
RESOLVE_VERSION = "resolve_version"
SEAL_VERSION = "seal_version"


@dataclass(frozen=True)
class SubmitRequest:
    source: str
    revision: str | None = None
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    hf_endpoint: str | None = None


@dataclass(frozen=True)
class Limits:
    max_files: int = 10_000
    max_file_size: int = 1024**4
    max_total_size: int = 4 * 1024**4


SourceOpener = Callable[[str, str | None, tuple[str, ...], tuple[str, ...]], Source]
"""``(uri, hf_endpoint, include, exclude) -> Source``; built by bootstrap from settings."""


# --- reading ---------------------------------------------------------------------------------


def get_model(session: Session, tenant: str, name: str) -> Model:
    model = session.scalar(
        select(Model).join(Model.tenant).where(Model.name == name, Model.tenant.has(name=tenant))
    )
    if model is None:
        get_tenant(session, tenant)
        raise ModelNotFoundError(f"{tenant}/{name}")
    return model


def get_version(session: Session, tenant: str, name: str, number: int) -> Version:
    model = get_model(session, tenant, name)
    version = session.scalar(select(Version).where(Version.model_id == model.id, Version.number == number))
    if version is None:
        raise VersionNotFoundError(f"{tenant}/{name}", number)
    return version


def list_versions(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str) -> list[Version]:
    require(principal, tenant, Permission.READ)
    model = get_model(session, tenant, name)
    return list(session.scalars(select(Version).where(Version.model_id == model.id).order_by(Version.number)))


def read_version(
    session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, number: int
) -> Version:
    require(principal, tenant, Permission.READ)
    return get_version(session, tenant, name, number)


def version_ref(version: Version) -> str:
    return f"{version.model.tenant.name}/{version.model.name}@{version.number}"


# --- submitting ------------------------------------------------------------------------------


def source_key(kind: str, repo: str, endpoint: str | None, revision: str, include: tuple, exclude: tuple) -> str:
    """What makes two submissions the same version: source, pinned revision and file selection."""
    body = {"kind": kind, "repo": repo, "endpoint": endpoint, "revision": revision,
            "include": sorted(include), "exclude": sorted(exclude)}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def submit(
    session: Session,
    principal: AuthenticatedPrincipal,
    tenant: str,
    name: str,
    request: SubmitRequest,
    *,
    open_source: SourceOpener,
    limits: Limits,
) -> tuple[Version, bool]:
    """Submit a version; see :func:`_submit`. Retried once when a concurrent submission won a race."""
    from sqlalchemy.exc import IntegrityError as SAIntegrityError

    try:
        return _submit(session, principal, tenant, name, request, open_source=open_source, limits=limits)
    except SAIntegrityError:
        # Two first submissions of a model, or of the same source, committed at once: the unique
        # constraints let one through; the other now finds its model or its version.
        session.rollback()
        return _submit(session, principal, tenant, name, request, open_source=open_source, limits=limits)


def _submit(
    session: Session,
    principal: AuthenticatedPrincipal,
    tenant: str,
    name: str,
    request: SubmitRequest,
    *,
    open_source: SourceOpener,
    limits: Limits,
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
        TenantNotFoundError: no such tenant.
    """
    require(principal, tenant, Permission.SUBMIT)
    validate_name("model", name)
    tenant_row = get_tenant(session, tenant)
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
                         request.include, request.exclude)
        existing = session.scalar(
            select(Version).where(Version.model_id == model.id, Version.source_key == key,
                                  Version.state.in_([s.value for s in LIVE]))
        )
        if existing is not None:
            session.rollback()
            return existing, False
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
    )
    model.next_version += 1
    session.add(version)
    session.flush()
    ref = f"{tenant}/{name}@{version.number}"
    audit.append(session, actor=principal.name, action="version.submitted", subject=ref, tenant=tenant,
                 details={"source": request.source, "requested_revision": request.revision,
                          "include": list(request.include), "exclude": list(request.exclude)})
    if snapshot is not None:
        _accept_snapshot(session, version, snapshot, limits, ref)
    elif isinstance(resolve_error, UpstreamError):
        jobs.enqueue(session, RESOLVE_VERSION, {"version_id": version.id},
                     idempotency_key=f"{RESOLVE_VERSION}:{version.id}")
    else:
        assert resolve_error is not None
        _fail(session, version, resolve_error, ref, actor="system")
    session.commit()
    return version, True


def upload_blob(session: Session, principal: AuthenticatedPrincipal, tenant: str, digest: str,
                source: Any, size: int | None, *, blob_store: BlobStore) -> bool:
    """Store uploaded bytes under their digest (checked) and record the blob; False if it was there.

    Raises:
        PermissionDeniedError: the principal may not submit in ``tenant``.
        DigestMismatchError, SizeMismatchError: the bytes are not what the digest says.
    """
    require(principal, tenant, Permission.SUBMIT)
    get_tenant(session, tenant)
    if session.get(Blob, digest) is not None and blob_store.exists(digest):
        return False
    result = blob_store.put(source, expected_sha256=digest, expected_size=size)
    begin_write(session)
    if session.get(Blob, digest) is None:
        session.add(Blob(digest=digest, size=result.size))
    session.commit()
    return True


def submit_uploaded(
    session: Session,
    principal: AuthenticatedPrincipal,
    tenant: str,
    name: str,
    files: list[FileEntry],
    *,
    label: str,
    limits: Limits,
) -> tuple[Version, bool]:
    """Submit a version whose files were uploaded beforehand (``PUT /v1/blobs/sha256/{digest}``).

    The revision is the sha256 of the file list, so the same directory uploaded twice is one version.

    Raises:
        InvalidInputError: a bad path or digest, or files whose blobs were never uploaded.
    """
    require(principal, tenant, Permission.SUBMIT)
    validate_name("model", name)
    entries = validate_file_list(files)
    missing = sorted(e.path for e in entries if session.get(Blob, e.sha256) is None)
    if missing:
        raise InvalidInputError(f"{len(missing)} file(s) were not uploaded: {', '.join(missing[:10])}",
                                missing=missing)
    listing = json.dumps([e.as_dict() for e in entries], sort_keys=True).encode()
    snapshot = Snapshot(source_kind="upload", repo=label, requested_revision=None,
                        revision=hashlib.sha256(listing).hexdigest(),
                        files=tuple(UpstreamFile(path=e.path, size=e.size, sha256=e.sha256) for e in entries))
    tenant_row = get_tenant(session, tenant)
    begin_write(session)
    model = _lock_or_create_model(session, tenant_row.id, name)
    key = source_key("upload", label, None, snapshot.revision, (), ())
    existing = session.scalar(select(Version).where(
        Version.model_id == model.id, Version.source_key == key, Version.state.in_([s.value for s in LIVE])))
    if existing is not None:
        session.rollback()
        return existing, False
    version = Version(model_id=model.id, number=model.next_version, state=VersionState.SUBMITTED.value,
                      source_kind="upload", source_repo=label, include=[], exclude=[], submitted_by=principal.id)
    model.next_version += 1
    session.add(version)
    session.flush()
    ref = f"{tenant}/{name}@{version.number}"
    audit.append(session, actor=principal.name, action="version.submitted", subject=ref, tenant=tenant,
                 details={"source": f"upload:{label}", "files": len(entries)})
    _accept_snapshot(session, version, snapshot, limits, ref)
    session.commit()
    return version, True


def _is_listing_error(exc: RegistryError) -> bool:
    # Bad paths and sizes in an upstream listing fail the version; a bad request is the caller's error.
    return exc.code in ("invalid-path", "limit-exceeded")


def _endpoint(source: Source) -> str | None:
    return getattr(source, "endpoint", None)


def _lock_or_create_model(session: Session, tenant_id: int, name: str) -> Model:
    query = select(Model).where(Model.tenant_id == tenant_id, Model.name == name)
    if is_postgres(session):
        query = query.with_for_update()
    model = session.scalar(query)
    if model is None:
        model = Model(tenant_id=tenant_id, name=name, next_version=1)
        session.add(model)
        session.flush()
    return model


def _accept_snapshot(session: Session, version: Version, snapshot: Snapshot, limits: Limits, ref: str) -> None:
    """Record the pinned revision and files, then queue a mirror job per file not already stored."""
    try:
        _check_limits(snapshot, limits)
    except RegistryError as exc:
        version.resolved_revision = snapshot.revision
        _fail(session, version, exc, ref, actor="system")
        return
    version.resolved_revision = snapshot.revision
    version.license = snapshot.license
    version.source_key = source_key(snapshot.source_kind, snapshot.repo, version.source_endpoint,
                                    snapshot.revision, tuple(version.include), tuple(version.exclude))
    version.state = check_transition(version.state, VersionState.MIRRORING).value
    for upstream in snapshot.files:
        row = VersionFile(
            version_id=version.id, path=upstream.path, size=upstream.size,
            upstream_sha256=upstream.sha256, upstream_git_sha1=upstream.git_sha1, upstream_etag=upstream.etag,
        )
        stored = _already_stored(session, upstream)
        if stored is not None:
            row.sha256, row.mirrored_at = stored, utcnow()
        session.add(row)
    session.flush()
    audit.append(session, actor="system", action="version.resolved", subject=ref,
                 tenant=ref.split("/", 1)[0],
                 details={"requested_revision": version.requested_revision, "revision": snapshot.revision,
                          "files": len(snapshot.files), "bytes": sum(f.size for f in snapshot.files)})
    pending = [f for f in version.files if f.sha256 is None]
    for f in pending:
        jobs.enqueue(session, MIRROR_FILE, {"file_id": f.id}, idempotency_key=f"{MIRROR_FILE}:{f.id}")
    if not pending:
        jobs.enqueue(session, SEAL_VERSION, {"version_id": version.id},
                     idempotency_key=f"{SEAL_VERSION}:{version.id}")


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


def _already_stored(session: Session, upstream: UpstreamFile) -> str | None:
    """The sha256 of a blob we already hold with these bytes, so they are not transferred again."""
    if upstream.sha256 is not None:
        return upstream.sha256 if session.get(Blob, upstream.sha256) is not None else None
    if upstream.git_sha1 is not None:
        # A small git file seen before (any model): its sha1 and size pin the same bytes.
        return session.scalar(
            select(VersionFile.sha256).where(
                VersionFile.upstream_git_sha1 == upstream.git_sha1, VersionFile.size == upstream.size,
                VersionFile.sha256.is_not(None),
            ).limit(1)
        )
    return None


def _fail(session: Session, version: Version, error: RegistryError, ref: str, *, actor: str) -> None:
    version.state = check_transition(version.state, VersionState.FAILED).value
    version.failure_reason = error.code.replace("-", "_")
    version.failure_detail = {"error": type(error).__name__, "message": error.message,
                              **{k: v for k, v in error.details.items() if _jsonable(v)}}
    audit.append(session, actor=actor, action="version.failed", subject=ref, tenant=ref.split("/", 1)[0],
                 details={"reason": version.failure_reason, **version.failure_detail})


def _jsonable(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool, type(None), list, dict))


def fail_version(session_factory: sessionmaker[Session], version_id: int, error: RegistryError) -> None:
    """Fail a version unless it already left the states a failure can come from."""
    with session_factory() as session:
        begin_write(session)
        version = _lock_version(session, version_id)
        if version is None or version.state not in (
            VersionState.SUBMITTED.value, VersionState.MIRRORING.value, VersionState.SEALED.value,
            VersionState.SCANNING.value, VersionState.EVALUATING.value,
        ):
            return
        _fail(session, version, error, version_ref(version), actor="system")
        session.commit()


def _lock_version(session: Session, version_id: int) -> Version | None:
    query = select(Version).where(Version.id == version_id)
    if is_postgres(session):
        query = query.with_for_update()
    return session.scalar(query)


# --- jobs ------------------------------------------------------------------------------------


def resolve_version(session_factory: sessionmaker[Session], version_id: int, *,
                    open_source: SourceOpener, limits: Limits) -> None:
    """Job: resolve a version whose upstream was unreachable at submission. Transient errors raise."""
    with session_factory() as session:
        version = session.get(Version, version_id)
        if version is None or version.state != VersionState.SUBMITTED.value:
            return
        uri = _source_uri(version)
        source = open_source(uri, version.source_endpoint, tuple(version.include), tuple(version.exclude))
        requested = version.requested_revision
    try:
        snapshot = source.resolve(requested)
    except UpstreamError:
        raise
    except RegistryError as exc:
        fail_version(session_factory, version_id, exc)
        return
    with session_factory() as session:
        begin_write(session)
        version = _lock_version(session, version_id)
        if version is None or version.state != VersionState.SUBMITTED.value:
            return
        _accept_snapshot(session, version, snapshot, limits, version_ref(version))
        session.commit()


def _source_uri(version: Version) -> str:
    if version.source_kind == "hf":
        return f"hf://{version.source_repo}"
    if version.source_kind == "s3":
        return f"s3://{version.source_repo}"
    return version.source_repo


def mirror_file(
    session_factory: sessionmaker[Session],
    file_id: int,
    *,
    blob_store: BlobStore,
    open_source: SourceOpener,
) -> None:
    """Job: stream one file from its upstream into the blob store; queue sealing after the last one.

    Idempotent: a file already mirrored, or of a version no longer mirroring, is left alone; bytes
    already in the store are not transferred again. Integrity failures fail the version at once;
    transport failures raise so the job is retried with backoff.
    """
    with session_factory() as session:
        row = session.get(VersionFile, file_id)
        if row is None:
            return
        version = row.version
        if version.state != VersionState.MIRRORING.value:
            return
        upstream = UpstreamFile(path=row.path, size=row.size, sha256=row.upstream_sha256,
                                git_sha1=row.upstream_git_sha1, etag=row.upstream_etag)
        already = row.sha256
        uri = _source_uri(version)
        endpoint, include, exclude = version.source_endpoint, tuple(version.include), tuple(version.exclude)
        revision, version_id = version.resolved_revision, version.id
    if already is None:
        source = open_source(uri, endpoint, include, exclude)
        try:
            if upstream.sha256 is not None and blob_store.exists(upstream.sha256):
                digest, size = upstream.sha256, upstream.size
            else:
                if upstream.sha256 is not None:
                    _abort_abandoned_uploads(session_factory, blob_store, file_id, upstream.sha256)
                result = blob_store.put(source.open(revision, upstream), expected_sha256=upstream.sha256,
                                        expected_size=upstream.size)
                digest, size = result.digest, result.size
        except IntegrityError as exc:
            fail_version(session_factory, version_id, _with_path(exc, upstream.path))
            return
    else:
        digest, size = already, upstream.size
    with session_factory() as session:
        begin_write(session)
        version = _lock_version(session, version_id)
        if version is None or version.state != VersionState.MIRRORING.value:
            return
        row = session.get(VersionFile, file_id)
        if row.sha256 is None:
            row.sha256, row.mirrored_at = digest, utcnow()
        if session.get(Blob, digest) is None:
            session.add(Blob(digest=digest, size=size))
        session.flush()
        remaining = session.scalar(
            select(func.count()).select_from(VersionFile).where(
                VersionFile.version_id == version_id, VersionFile.sha256.is_(None))
        )
        if remaining == 0:
            jobs.enqueue(session, SEAL_VERSION, {"version_id": version_id},
                         idempotency_key=f"{SEAL_VERSION}:{version_id}")
        session.commit()


def _abort_abandoned_uploads(session_factory: sessionmaker[Session], blob_store: BlobStore, file_id: int,
                             digest: str) -> None:
    """Abort the unfinished uploads of ``digest`` an earlier, crashed attempt left at its final key.

    The uploads are listed first and aborted only if then no other mirror job of the same bytes is
    running: an upload started after the listing is never touched, and a listed one is abandoned, or
    belongs to an attempt of this very job whose lease was lost (its result does not count anyway).
    Aborting never commits anything; at worst a writer's put fails and its job is retried. Temporary
    files of a local store are left to ``sweep_incomplete``.
    """
    stale = blob_store.unfinished_uploads(digest)
    if not stale:
        return
    with session_factory() as session:
        siblings = session.scalars(
            select(VersionFile.id).where(VersionFile.upstream_sha256 == digest, VersionFile.id != file_id,
                                         VersionFile.sha256.is_(None))
        ).all()
        busy = bool(siblings) and session.scalar(
            select(func.count()).select_from(Job).where(
                Job.kind == MIRROR_FILE, Job.state == jobs.RUNNING,
                Job.idempotency_key.in_([f"{MIRROR_FILE}:{i}" for i in siblings]))
        )
    if busy:
        return
    aborted = blob_store.abort_uploads(digest, stale)
    log.info("mirror of file %d: aborted %d abandoned upload(s) of %s", file_id, aborted, digest)


def _with_path(exc: IntegrityError, path: str) -> IntegrityError:
    """Name the version's file in an integrity error raised by the blob store (which knows no paths)."""
    from registry.domain.errors import DigestMismatchError, SizeMismatchError

    if isinstance(exc, DigestMismatchError) and exc.details.get("path") != path:
        return DigestMismatchError(path, expected=exc.details["expected"], actual=exc.details["actual"],
                                   algorithm=exc.details.get("algorithm", "sha256"))
    if isinstance(exc, SizeMismatchError) and exc.details.get("path") != path:
        return SizeMismatchError(path, expected=exc.details["expected"], actual=exc.details["actual"])
    return exc


def seal_version(session_factory: sessionmaker[Session], version_id: int, *, signing_key: SigningKey,
                 registry_url: str | None = None) -> None:
    """Job: freeze the file list and sign it; then run the after-seal hooks (scanning)."""
    with session_factory() as session:
        begin_write(session)
        version = _lock_version(session, version_id)
        if version is None or version.state != VersionState.MIRRORING.value:
            return
        files = version.files
        if any(f.sha256 is None for f in files):
            raise NotFoundError(f"version {version_id} still has files to mirror")
        ref = version_ref(version)
        entries = validate_file_list(FileEntry(f.path, f.size, f.sha256) for f in files)
        statement = build_model_statement(
            f"{version.model.tenant.name}/{version.model.name}",
            entries,
            extra_predicate={"modelreg": {
                "model": f"{version.model.tenant.name}/{version.model.name}",
                "version": version.number,
                "source": {"kind": version.source_kind, "repo": version.source_repo,
                           "endpoint": version.source_endpoint},
                "requested_revision": version.requested_revision,
                "revision": version.resolved_revision,
                "files": [e.as_dict() for e in entries],
                "registry": registry_url,
            }},
        )
        bundle = sign_model_bundle(statement, signing_key)
        version.manifest_bundle = bundle
        version.manifest_digest = hashlib.sha256(canonical_json(statement)).hexdigest()
        version.signing_key_id = signing_key.key_id
        version.sealed_at = utcnow()
        version.state = check_transition(version.state, VersionState.SEALED).value
        audit.append(session, actor="system", action="version.sealed", subject=ref,
                     tenant=version.model.tenant.name,
                     details={"manifest_digest": version.manifest_digest, "key_id": signing_key.key_id,
                              "files": len(entries), "bytes": sum(e.size for e in entries)})
        scans.start_scanning(session, version)
        session.commit()
