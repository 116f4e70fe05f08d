"""Mirroring and sealing jobs: the work a submission queues.

``resolve_version`` pins a version whose upstream was unreachable at submission; ``mirror_file`` streams
one file from the upstream into the blob store, hashed in the same pass and checked against what the
upstream published, grants the version's tenant ownership of the blob, and the job that lands the last
file queues ``seal_version``; ``seal_version`` freezes the file list, signs it as an OpenSSF
model-signing bundle from the digests computed while mirroring (no file is read again), and reports
the mirroring stage passed (the lifecycle moves the version on). The jobs a stage queues are queued in
:mod:`registry.services.stages.mirroring`.
"""

from __future__ import annotations

import hashlib
import logging

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from registry import jobs
from registry.db.models import Job, Version, VersionFile
from registry.db.session import begin_write
from registry.domain.chunks import ChunkHasher, ChunkList
from registry.domain.components import NODE_WRITTEN_FILES, components_map, unit_components
from registry.domain.errors import (
    BlobVanishedError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    PolicyViolationError,
    QuotaExceededError,
    RegistryError,
    UpstreamError,
)
from registry.domain.files import FileEntry, validate_file_list
from registry.domain.outcomes import Failed, Passed
from registry.domain.source_uris import submission_uri
from registry.domain.states import VersionState
from registry.domain.unit_parts import UnitParts, is_held_part, read_held_parts, serving_config
from registry.services import adapters, chunks, facts, licenses, lifecycle, quotas, units
from registry.services.blobs import grant_blob, owned_blobs
from registry.services.lifecycle import fail_version
from registry.services.loaders import lock_version_unchecked
from registry.services.ports import Ports
from registry.services.stages.mirroring import queue_sealing
from registry.services.stages.scanning import lock_scans_of
from registry.services.versions import Limits, SourceOpener, accept_snapshot
from registry.signing.bundle import build_model_statement, is_ignored, sign_model_bundle
from registry.signing.canonical import canonical_json
from registry.sources.base import UpstreamFile
from registry.storage.base import BlobStore

log = logging.getLogger(__name__)


def resolve_version(session_factory: sessionmaker[Session], version_id: int, *,
                    open_source: SourceOpener, limits: Limits, ports: Ports) -> None:
    """Job: resolve a version whose upstream was unreachable at submission. Transient errors raise."""
    with session_factory() as session:
        version = session.get(Version, version_id)
        if version is None or version.state != VersionState.SUBMITTED.value:
            return
        uri = submission_uri(version.source_kind, version.source_repo)
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
        version = lock_version_unchecked(session, version_id)
        if version is None or version.state != VersionState.SUBMITTED.value:
            return
        accept_snapshot(session, version, snapshot, limits, ports)
        session.commit()


def mirror_file(
    session_factory: sessionmaker[Session],
    file_id: int,
    *,
    open_source: SourceOpener,
    ports: Ports,
) -> None:
    """Job: stream one file from its upstream into the blob store; queue sealing after the last one.

    Idempotent: a file already mirrored, or of a version no longer mirroring, is left alone; bytes
    already in the store are not transferred again. Integrity failures fail the version at once;
    transport failures raise so the job is retried with backoff.
    """
    blob_store = ports.blob_store
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
        uri = submission_uri(version.source_kind, version.source_repo)
        endpoint, include, exclude = version.source_endpoint, tuple(version.include), tuple(version.exclude)
        revision, version_id, tenant_id = version.resolved_revision, version.id, version.model.tenant_id
        owned = upstream.sha256 is not None and bool(owned_blobs(session, tenant_id, [upstream.sha256]))
        try:
            # Checked before any byte moves; checked again, under a lock, when the blob is granted.
            if not owned and already is None:
                quotas.check(session, tenant_id, upstream.size)
        except QuotaExceededError as exc:
            quota_error: QuotaExceededError | None = exc
        else:
            quota_error = None
    if quota_error is not None:
        fail_version(session_factory, version_id, _with_path(quota_error, upstream.path))
        return
    for attempt in range(1, PUTS + 1):
        if already is None:
            source = open_source(uri, endpoint, include, exclude)
            try:
                if upstream.sha256 is not None:
                    _abort_abandoned_uploads(session_factory, blob_store, file_id, upstream.sha256)
                # With the digest known, put finds bytes this tenant owns and never reads the source, which
                # opens its connection only when iterated. Bytes stored for another tenant are read from
                # the upstream in full: a published digest proves nothing, served bytes do.
                put = blob_store.put if owned else blob_store.put_proving_possession
                # Each chunk is hashed beside the whole file, in the same read of the upstream.
                hasher = ChunkHasher()
                result = put(chunks.tap(source.open(revision, upstream), hasher), expected_sha256=upstream.sha256,
                             expected_size=upstream.size)
                digest, size = result.digest, result.size
                found = chunks.chunks_of_put(hasher, result)
            except IntegrityError as exc:
                fail_version(session_factory, version_id, _with_path(exc, upstream.path))
                return
        else:
            digest, size, found = already, upstream.size, None
        try:
            _record_mirrored(session_factory, version_id, file_id, tenant_id, digest, size, found, ports=ports)
            return
        except QuotaExceededError as exc:
            fail_version(session_factory, version_id, _with_path(exc, upstream.path))
            return
        except BlobVanishedError:
            # Garbage collection took the bytes between the put and the record: put them again (the
            # job's retry does, after the last of these).
            if attempt == PUTS:
                raise


PUTS = 3
"""Puts of one file per attempt of its job, when garbage collection takes the bytes before they are recorded."""


def _record_mirrored(session_factory: sessionmaker[Session], version_id: int, file_id: int, tenant_id: int,
                     digest: str, size: int, found: ChunkList | None, *, ports: Ports) -> None:
    """Set the file's digest, grant the tenant the blob (with its chunk list, when the put read the
    bytes), and queue sealing after the last file.

    Raises:
        BlobVanishedError: the bytes are no longer stored (nothing is recorded).
    """
    with session_factory() as session:
        begin_write(session)
        version = lock_version_unchecked(session, version_id)
        if version is None or version.state != VersionState.MIRRORING.value:
            return
        row = session.get(VersionFile, file_id)
        if row.sha256 is None:
            row.sha256, row.mirrored_at = digest, ports.clock.now()
        grant_blob(session, tenant_id, digest, size, via="mirror", blob_store=ports.blob_store)
        if found is not None:
            chunks.record_chunks(session, digest, found)
        session.flush()
        remaining = session.scalar(
            select(func.count()).select_from(VersionFile).where(
                VersionFile.version_id == version_id, VersionFile.sha256.is_(None))
        )
        if remaining == 0:
            queue_sealing(session, version, ports)
        session.commit()


def fail_version_of_file(session_factory: sessionmaker[Session], file_id: int, error: str) -> None:
    """When a file's mirror job is dead: its version fails with ``upstream``, naming the file."""
    with session_factory() as session:
        row = session.get(VersionFile, file_id)
        if row is None:
            return
        version_id, path = row.version_id, row.path
    fail_version(session_factory, version_id,
                 UpstreamError(f"mirroring {path} failed after retries: {error}", path=path))


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
                Job.kind == jobs.JobKind.MIRROR_FILE.value, Job.state == jobs.RUNNING,
                Job.idempotency_key.in_([jobs.job_key(jobs.JobKind.MIRROR_FILE.value, i) for i in siblings]))
        )
    if busy:
        return
    aborted = blob_store.abort_uploads(digest, stale)
    log.info("mirror of file %d: aborted %d abandoned upload(s) of %s", file_id, aborted, digest)


def _with_path(exc: RegistryError, path: str) -> RegistryError:
    """Name the version's file in an error raised by the blob store or a quota (which know no paths)."""
    from registry.domain.errors import DigestMismatchError, SizeMismatchError

    if isinstance(exc, QuotaExceededError):
        exc.details.setdefault("path", path)
        return exc
    if isinstance(exc, DigestMismatchError) and exc.details.get("path") != path:
        return DigestMismatchError(path, expected=exc.details["expected"], actual=exc.details["actual"],
                                   algorithm=exc.details.get("algorithm", "sha256"))
    if isinstance(exc, SizeMismatchError) and exc.details.get("path") != path:
        return SizeMismatchError(path, expected=exc.details["expected"], actual=exc.details["actual"])
    return exc


def _held_parts(files: list[VersionFile], found: dict,
                ports: Ports) -> tuple[UnitParts | None, InvalidInputError | PolicyViolationError | None]:
    """The unit's prompt templates and serving profile checked (``registry/domain/unit_parts.py``), and why the
    unit is refused (a part that does not check, a profile that does not fit), or None; read from the store
    before any lock (each part is small: a larger one is refused unread)."""
    if not any(is_held_part(f.path) for f in files):
        return UnitParts(), None
    try:
        data = read_held_parts(files, lambda digest, size: b"".join(ports.blob_store.open_range(digest, 0, size)))
        gpus, margin = serving_config(ports.policy.data())
        parts = units.check_parts(data, found, gpus, runtime_margin_bytes=margin, require_fit=False)
    except (InvalidInputError, PolicyViolationError) as exc:
        return None, exc
    try:
        if parts.fit is not None:
            parts.fit.require()
    except PolicyViolationError as exc:
        return parts, exc
    return parts, None


def seal_version(session_factory: sessionmaker[Session], version_id: int, *, ports: Ports,
                 registry_url: str | None = None) -> None:
    """Job: freeze the file list, record what the files say (facts, licenses) and sign it with the ports'
    signer; the mirroring stage has passed, and the lifecycle starts the next stage's work."""
    blob_store, signing_key, clock = ports.blob_store, ports.signer, ports.clock
    with session_factory() as session:
        # The facts are headers read from the store: read before the write lock, not while holding it.
        version = session.get(Version, version_id)
        if version is None or version.state != VersionState.MIRRORING.value:
            return
        if any(f.sha256 is None for f in version.files):
            raise NotFoundError(f"version {version_id} still has files to mirror")
        found = facts.collect_facts([(f.path, f.size, f.sha256) for f in version.files], blob_store)
        parts, refused = _held_parts(version.files, found, ports)
        # An adapter's config and tensors against its base's: headers read now, judged under the lock.
        adapter_check = adapters.check_files(version, blob_store)
        digests = sorted({f.sha256 for f in version.files})
        session.rollback()

        begin_write(session)
        # The files' scan locks first, rows after: the scanning stage this seal starts takes them anyway,
        # and a scan job holding one waits for rows this transaction locks (the version's, the audit head),
        # which deadlocked the two on PostgreSQL when the locks were taken the other way round.
        for digest in digests:
            lock_scans_of(session, digest)
        version = lock_version_unchecked(session, version_id)
        if version is None or version.state != VersionState.MIRRORING.value:
            return
        files = version.files
        if any(f.sha256 is None for f in files):
            raise NotFoundError(f"version {version_id} still has files to mirror")
        facts.store_facts(session, version, found, clock=clock)
        entries = validate_file_list(FileEntry(f.path, f.size, f.sha256) for f in files)
        # The release unit's components, from the files and the parts the facts readers split: recorded once here,
        # read by every later question (version detail, diff, policy, releases, provenance).
        components = unit_components(entries, found.get("parts") or {})
        units.record_components(session, version, components, parts=parts,
                                parts_error=refused if parts is None else None)
        if refused is None:
            refused = adapters.conclude_check(session, version, adapter_check)
        if refused is not None:
            # A prompt template or serving profile the unit may not hold, or an adapter that does not fit its base
            # (every reason listed): the version fails, with the reason (a serving profile that does not fit shows
            # its arithmetic).
            lifecycle.fail(session, version, Failed.from_error(refused))
            session.commit()
            return
        # Blobs this mirror found stored (put read nothing) that have no chunk list yet get one by a job.
        chunks.queue_missing(session, {f.sha256 for f in files}, ports)
        # A few bounded reads (README front matter, LICENSE files) of files now known to be stored.
        licenses.record_licenses(session, version, blob_store)
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
                "components": components_map(components),
                "registry": registry_url,
                # An adapter's binding to its base version and the base's weights digest, signed with its files.
                **({} if version.adapter_binding is None
                   else {"adapter_of": adapters.statement_binding(version)}),
            }},
            # What fetch writes beside the files, so model_signing verify on DEST sees only the signed files;
            # a version listing one of those names itself keeps the old statement (and gets no unit files).
            extra_ignore_paths=() if any(is_ignored(e.path, NODE_WRITTEN_FILES) for e in entries)
            else NODE_WRITTEN_FILES,
        )
        bundle = sign_model_bundle(statement, signing_key)
        version.manifest_bundle = bundle
        version.manifest_digest = hashlib.sha256(canonical_json(statement)).hexdigest()
        version.signing_key_id = signing_key.key_id
        version.sealed_at = clock.now()
        lifecycle.conclude(session, version, Passed({
            "manifest_digest": version.manifest_digest, "key_id": signing_key.key_id,
            "files": len(entries), "bytes": sum(e.size for e in entries)}), ports)
        session.commit()
