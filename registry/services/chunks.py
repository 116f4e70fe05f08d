"""Chunk digests of stored blobs: recorded in the pass that stores the bytes, signed (by root) in releases.

- :func:`tap` puts a :class:`registry.domain.chunks.ChunkHasher` in front of the bytes a mirror or an
  upload hands to ``BlobStore.put``: the store hashes the whole blob, the hasher each chunk, in the one
  read of the source. :func:`chunks_of_put` says whether the hasher saw the whole blob (a put that found
  the blob stored reads nothing), and :func:`record_chunks` keeps the list (``blob_chunks``), per blob
  digest: the list depends on the bytes alone.
- :func:`release_chunks` is what a release says of its files (chunk size and root per path), or None
  while any file's list is missing: a node then fetches whole files.
- :func:`read_chunk_list` answers ``GET .../versions/{number}/chunks/{digest}``, authorized as the blob
  URLs of a release are: ``read`` or ``fetch`` in the tenant, an approved, unrevoked version holding the file.
- Blobs stored before lists were kept get them from a ``record_chunks`` job (:func:`record_blob_chunks`:
  one streamed read of the blob, checked against its digest), queued by sealing for its own files
  and by ``modelreg chunks backfill`` (:func:`queue_backfill`) for every sealed version.

Usage (a sketch, not run as a doctest)::

    hasher = ChunkHasher()
    result = blob_store.put(tap(source, hasher), expected_sha256=digest)
    found = chunks_of_put(hasher, result)   # None when the put read nothing
    ...  # in the write transaction that grants the blob:
    record_chunks(session, digest, found)
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, sessionmaker

from registry import jobs
from registry.auth import AuthenticatedPrincipal, Permission
from registry.db.models import Blob, BlobChunks, Version, VersionFile
from registry.db.session import begin_write, is_postgres
from registry.domain.chunks import ChunkHasher, ChunkList
from registry.domain.errors import (
    BlobNotFoundError,
    ChunksNotRecordedError,
    DigestMismatchError,
    NotApprovedError,
    PermissionDeniedError,
    RevokedError,
    VersionDeletedError,
)
from registry.domain.files import require_sha256
from registry.domain.states import VersionState
from registry.services import loaders
from registry.services.ports import Ports
from registry.storage.base import ByteSource, PutResult

log = logging.getLogger(__name__)


# --- in the pass that stores the bytes ---------------------------------------------------------


class _ReadTap:
    """A file object's ``read``, feeding the hasher every byte it returns."""

    def __init__(self, source: Any, hasher: ChunkHasher) -> None:
        self._read = source.read
        self._hasher = hasher

    def read(self, size: int = -1) -> bytes:
        data = self._read(size)
        self._hasher.update(data)
        return data


def _iter_tap(source: Iterable[bytes], hasher: ChunkHasher) -> Iterator[bytes]:
    for piece in source:
        hasher.update(piece)
        yield piece


def tap(source: ByteSource, hasher: ChunkHasher) -> ByteSource:
    """``source`` as it is (a file object stays one, so stores read it their own way), feeding ``hasher``."""
    if hasattr(source, "read"):
        return _ReadTap(source, hasher)  # type: ignore[return-value]
    return _iter_tap(source, hasher)  # type: ignore[arg-type]


def chunks_of_put(hasher: ChunkHasher, result: PutResult) -> ChunkList | None:
    """The chunk list of a put's blob, when the put read all of it through :func:`tap`; else None.

    The store checked the bytes it read against the digest, so a hasher that saw exactly the blob's
    size saw the blob. A put that found the blob stored read nothing (or only a part): None.
    """
    return hasher.finish() if hasher.size == result.size else None


def record_chunks(session: Session, digest: str, chunks: ChunkList) -> None:
    """Keep a blob's chunk list (once: a list recorded already stays). Call it in the write transaction
    that records the blob row (``grant_blob``)."""
    insert = postgresql_insert if is_postgres(session) else sqlite_insert
    session.execute(insert(BlobChunks).values(digest=digest, chunk_size=chunks.chunk_size, digests=chunks.digests)
                    .on_conflict_do_nothing())


# --- what releases say ---------------------------------------------------------------------------


def release_chunks(session: Session, files: Iterable[tuple[str, str]]) -> dict[str, dict[str, Any]] | None:
    """Per path, ``{"chunk_size": ..., "root": ...}`` of the files ``(path, sha256)``; None while any
    file's chunk list is not recorded (one query)."""
    files = list(files)
    digests = {digest for _, digest in files}
    if not digests:
        return {}
    rows = {row.digest: row for row in session.execute(
        select(BlobChunks.digest, BlobChunks.chunk_size, BlobChunks.digests).where(BlobChunks.digest.in_(digests)))}
    if digests - set(rows):
        return None
    return {path: {"chunk_size": rows[digest].chunk_size,
                   "root": hashlib.sha256(rows[digest].digests).hexdigest()} for path, digest in files}


def read_chunk_list(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, number: int,
                    digest: str) -> ChunkList:
    """The chunk list of the file with ``digest`` of ``tenant/name@number``, for a node streaming it.

    Authorized as the release's blob URLs are: ``read`` or ``fetch`` in the tenant, and only of an
    approved version that is neither revoked nor deleted. A digest the version does not hold is
    answered as one nobody holds.

    Raises:
        PermissionDeniedError: neither ``read`` nor ``fetch`` in ``tenant``.
        InvalidInputError: ``digest`` is not a sha256.
        TenantNotFoundError, ModelNotFoundError, VersionNotFoundError: nothing by that name.
        RevokedError, NotApprovedError, VersionDeletedError: the version is not released.
        BlobNotFoundError: the version holds no file with ``digest``.
        ChunksNotRecordedError: it does, but its chunk list is not recorded yet.
    """
    if not {Permission.READ, Permission.FETCH} & principal.permissions(tenant):
        raise PermissionDeniedError(f"{principal.name!r} may neither read nor fetch in tenant {tenant!r}",
                                    principal=principal.name, tenant=tenant, permission="fetch")
    require_sha256(digest)
    version = loaders.find_version_unchecked(session, tenant, name, number)
    ref = f"{tenant}/{name}"
    if version.state == VersionState.REVOKED.value:
        raise RevokedError(ref, number, version.revoke_reason or "revoked")
    if version.state != VersionState.APPROVED.value:
        raise NotApprovedError(ref, number, version.state)
    if version.deleted_at is not None:
        raise VersionDeletedError(ref, number)
    found = session.execute(
        select(VersionFile.path, VersionFile.size, BlobChunks.chunk_size, BlobChunks.digests)
        .outerjoin(BlobChunks, BlobChunks.digest == VersionFile.sha256)
        .where(VersionFile.version_id == version.id, VersionFile.sha256 == digest).limit(1)).first()
    if found is None:
        raise BlobNotFoundError(digest)
    if found.digests is None:
        raise ChunksNotRecordedError(found.path, digest)
    return ChunkList(found.chunk_size, found.size, found.digests)


# --- blobs stored before chunk lists were kept -------------------------------------------------


def queue_missing(session: Session, digests: Iterable[str], ports: Ports) -> int:
    """Queue a ``record_chunks`` job for each of ``digests`` whose list is not recorded; return how many.

    In the caller's transaction (the caller commits); a blob's job is queued once, however often asked.
    """
    wanted = set(digests)
    if not wanted:
        return 0
    have = set(session.scalars(select(BlobChunks.digest).where(BlobChunks.digest.in_(wanted))))
    missing = sorted(wanted - have)
    for digest in missing:
        ports.queue.enqueue_job(session, jobs.JobKind.RECORD_CHUNKS, {"digest": digest}, digest)
    return len(missing)


def queue_backfill(session_factory: sessionmaker[Session], ports: Ports) -> int:
    """Queue ``record_chunks`` for every blob of a sealed version that has no chunk list; return how many.

    What ``modelreg chunks backfill`` runs once after an upgrade (docs/adr/0013-chunk-digests.md).
    """
    with session_factory() as session:
        digests = session.scalars(
            select(VersionFile.sha256).distinct().join(Version, Version.id == VersionFile.version_id)
            .outerjoin(BlobChunks, BlobChunks.digest == VersionFile.sha256)
            .where(Version.sealed_at.is_not(None), Version.deleted_at.is_(None), VersionFile.sha256.is_not(None),
                   BlobChunks.digest.is_(None))).all()
        begin_write(session)
        queued = queue_missing(session, digests, ports)
        session.commit()
    return queued


READ_PIECE = 1 << 20


def record_blob_chunks(session_factory: sessionmaker[Session], digest: str, *, ports: Ports) -> None:
    """Job: read a stored blob once, streamed, and record its chunk list.

    Idempotent: a list recorded already, or a blob deleted meanwhile, is left alone. The bytes are
    checked against the digest in the same pass, so a damaged blob never gets a list that would
    vouch for it.

    Raises:
        DigestMismatchError: the stored bytes are not the blob's (nothing is recorded).
        BlobStoreError: the store failed (the job is retried).
    """
    with session_factory() as session:
        if session.get(BlobChunks, digest) is not None:
            return
        size = session.scalar(select(Blob.size).where(Blob.digest == digest))
    if size is None:
        return
    whole, hasher = hashlib.sha256(), ChunkHasher()
    try:
        pieces = ports.blob_store.open_range(digest)
    except BlobNotFoundError:
        return  # garbage collection took it: nothing to vouch for
    for piece in pieces:
        whole.update(piece)
        hasher.update(piece)
    if whole.hexdigest() != digest:
        log.error("record_chunks: stored blob %s hashes to %s: no chunk list recorded", digest, whole.hexdigest())
        raise DigestMismatchError(digest, expected=digest, actual=whole.hexdigest())
    with session_factory() as session:
        begin_write(session)
        # The row is read under the write lock: a blob collected since has no row, and gets no list.
        if session.scalar(select(Blob.size).where(Blob.digest == digest)) is None:
            return
        record_chunks(session, digest, hasher.finish())
        session.commit()
