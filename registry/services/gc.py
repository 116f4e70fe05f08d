"""Garbage collection of blobs: delete the bytes nothing references, after a grace period, and never
bytes something references, even while a submission takes them up.

A blob is referenced by a file of a version not deleted by retention (``version_files.sha256``), an
eval set (``eval_sets.digest``) or an eval log (``eval_results.log_digest``). Scan results are keyed
by digest but need no bytes, and signatures live in rows, so neither keeps a blob.

The protocol between the collector and the writers, so that a referenced blob is never deleted:

- The ``blobs`` row stands for the bytes: a row never outlives its bytes. The collector deletes a
  blob in two transactions. The first locks its row (``FOR UPDATE``; SQLite has one writer at a
  time), checks again, with a fresh snapshot, that nothing references it and that it was not used
  within the grace period, deletes the row and commits. The second takes the digest's lock (a
  PostgreSQL advisory lock; SQLite's one writer), and deletes the bytes only if no writer recorded
  them again in between. A collector killed between the two leaves bytes without a row, which the
  next run collects as an orphan; never a row a submission would list and then find without bytes.
- A writer that references blobs already stored (a submission deduplicating against what the tenant
  owns: ``hold_blobs``, or ``blobs.owned_blobs(hold=True)``) locks their rows ``FOR SHARE`` in the transaction that
  commits the references, and references only the rows it found: a blob the collector deleted meanwhile is
  transferred again (mirrored) or refused (an upload submission: upload it again).
- A writer that has just put bytes records them (``record_blob``): it takes the digest's lock, then
  an upsert locks the row, and only then does it check that the bytes are (still) stored: the
  collector may have deleted them between the put and the record. If they are gone the transaction
  is dropped and the writer puts them again (``BlobVanishedError`` is transient: a job retries, an
  upload puts once more).

Either the writer's lock comes first, and the collector then sees the reference (or a fresh
``last_used_at``), or the collector's does, and the writer then finds no row (or no bytes).

Bytes with no row at all (a writer that crashed between its put and its record, a mirror refused by
a quota, or a collector killed between its two transactions) are deleted as in the second
transaction, once older than the orphan age.

Each run that deleted anything appends one ``blobs.collected`` audit event with its counts and at
most :data:`AUDITED_DIGESTS` of the digests: a run may delete millions of blobs, and an event per
blob would make the audit log the largest thing gc leaves.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import asdict, dataclass, field
from typing import Iterable

from sqlalchemy import delete, exists, func, or_, select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, sessionmaker

from registry import audit
from registry.clock import Clock
from registry.db.models import Blob, EvalResult, EvalSet, Version, VersionFile
from registry.db.session import begin_write, is_postgres, lock_digest
from registry.domain.errors import BlobStoreError, BlobVanishedError
from registry.storage.base import BlobStore

log = logging.getLogger(__name__)

BATCH = 500
"""Blobs looked at per query: a store of any size is walked in bounded steps."""

AUDITED_DIGESTS = 100
"""Digests named in a run's audit event; the counts cover the rest."""

# The first key of the digest locks (pg_advisory_xact_lock(int, int)): "gc" apart from other advisory locks.
_DIGEST_LOCK_CLASS = 0x6763


@dataclass
class GcReport:
    """What one collection did: blobs deleted (and their bytes), and blobs seen but kept."""

    deleted: int = 0
    deleted_bytes: int = 0
    orphans_deleted: int = 0
    kept_referenced: int = 0
    kept_young: int = 0
    errors: int = 0
    digests: list[str] = field(default_factory=list, repr=False)
    """The first :data:`AUDITED_DIGESTS` digests deleted (for the audit event; not in :meth:`as_dict`)."""

    def as_dict(self) -> dict[str, int]:
        found = asdict(self)
        del found["digests"]
        return found

    def add_digest(self, digest: str) -> None:
        if len(self.digests) < AUDITED_DIGESTS:
            self.digests.append(digest)


def referenced(digest_column) -> object:
    """A SQL condition: something that needs the bytes references the blob ``digest_column`` names."""
    return or_(
        exists().where(VersionFile.sha256 == digest_column, VersionFile.version_id == Version.id,
                       Version.deleted_at.is_(None)),
        exists().where(EvalSet.digest == digest_column),
        exists().where(EvalResult.log_digest == digest_column),
    )


def _used_at():
    return func.coalesce(Blob.last_used_at, Blob.created_at)


# --- the writers' half -----------------------------------------------------------------------


def hold_blobs(session: Session, digests: Iterable[str]) -> set[str]:
    """Lock the rows of ``digests`` against garbage collection until the transaction ends; return
    those still stored.

    Call it in the write transaction that commits references to them, and reference only what it
    returns.
    """
    wanted = sorted(set(digests))
    if not wanted:
        return set()
    found: set[str] = set()
    for start in range(0, len(wanted), BATCH):
        query = select(Blob.digest).where(Blob.digest.in_(wanted[start:start + BATCH])).order_by(Blob.digest)
        if is_postgres(session):
            query = query.with_for_update(read=True)
        found.update(session.scalars(query))
    return found


def record_blob(session: Session, digest: str, size: int, *, blob_store: BlobStore,
                now: dt.datetime | None = None) -> None:
    """Record bytes just put under ``digest`` (a new row, or a fresh use time), then check they are stored.

    Call it in a write transaction; the row stays locked until it ends.

    Raises:
        BlobVanishedError: garbage collection deleted the bytes after they were put; put them again.
    """
    now = now or dt.datetime.now(dt.timezone.utc)
    _lock_digest(session, digest)
    insert = postgresql_insert if is_postgres(session) else sqlite_insert
    statement = insert(Blob).values(digest=digest, size=size, created_at=now, last_used_at=now)
    session.execute(statement.on_conflict_do_update(index_elements=[Blob.digest],
                                                    set_={"last_used_at": statement.excluded.last_used_at}))
    if not blob_store.exists(digest):
        raise BlobVanishedError(digest)


# --- the collector ---------------------------------------------------------------------------


def collect(session_factory: sessionmaker[Session], blob_store: BlobStore, clock: Clock,
            grace: dt.timedelta, *, orphan_age: dt.timedelta | None = None) -> GcReport:
    """Delete every blob nothing references whose last use is older than ``grace``; see the module.

    Args:
        orphan_age: also walk the store (a listing of all of it) for bytes without a row committed at
            least this long ago: what a writer left that crashed between its put and its record.
            None: do not walk.
    """
    report = GcReport()
    now = clock.now()
    cutoff = now - grace
    after = ""
    while True:
        with session_factory() as session:
            rows = session.execute(
                select(Blob.digest, _used_at() < cutoff, referenced(Blob.digest))
                .where(Blob.digest > after).order_by(Blob.digest).limit(BATCH)
            ).all()
        for digest, old, used in rows:
            if used:
                report.kept_referenced += 1
            elif not old:
                report.kept_young += 1
            else:
                _delete_if_garbage(session_factory, blob_store, digest, cutoff, report)
        if len(rows) < BATCH:
            break
        after = rows[-1][0]
    if orphan_age is not None:
        _collect_orphans(session_factory, blob_store, now - orphan_age, report)
    _audit(session_factory, report)
    return report


def _audit(session_factory: sessionmaker[Session], report: GcReport) -> None:
    if not (report.deleted or report.orphans_deleted):
        return
    details = {**report.as_dict(), "digests": report.digests,
               "digests_omitted": report.deleted + report.orphans_deleted - len(report.digests)}
    with session_factory() as session:
        begin_write(session)
        audit.append(session, actor=audit.SYSTEM_ACTOR, action="blobs.collected", subject="blob-store",
                     details=details)
        session.commit()


def _lock_digest(session: Session, digest: str) -> None:
    """Take the digest's lock until the transaction ends: the collector deleting bytes and a writer
    recording them take it in turn."""
    lock_digest(session, _DIGEST_LOCK_CLASS, digest)


def _delete_if_garbage(session_factory: sessionmaker[Session], blob_store: BlobStore, digest: str,
                       cutoff: dt.datetime, report: GcReport) -> None:
    with session_factory() as session:
        begin_write(session)
        query = select(Blob.size, _used_at()).where(Blob.digest == digest)
        if is_postgres(session):
            query = query.with_for_update()
        row = session.execute(query).first()
        if row is None:
            return
        size, used_at = row
        # Checked again under the lock, with a snapshot taken after it: a writer that held the row
        # has committed its references by now, or refreshed the use time.
        if used_at >= cutoff:
            report.kept_young += 1
            return
        if session.scalar(select(referenced(Blob.digest)).where(Blob.digest == digest)):
            report.kept_referenced += 1
            return
        # The row first (owners go with it): from this commit on no writer can find the blob stored.
        session.execute(delete(Blob).where(Blob.digest == digest))
        session.commit()
    if _delete_unrecorded_bytes(session_factory, blob_store, digest, report):
        report.deleted += 1
        report.deleted_bytes += size
        report.add_digest(digest)


def _delete_unrecorded_bytes(session_factory: sessionmaker[Session], blob_store: BlobStore, digest: str,
                             report: GcReport) -> bool:
    """Delete bytes that have no row, under the digest's lock; False if a writer recorded them or the
    store refused (they stay, without a row: an orphan the next run takes)."""
    with session_factory() as session:
        begin_write(session)
        _lock_digest(session, digest)
        # A writer that put and recorded these bytes since the row was deleted owns them now.
        if session.scalar(select(Blob.digest).where(Blob.digest == digest)) is not None:
            return False
        try:
            blob_store.delete(digest)
        except BlobStoreError as exc:
            log.warning("gc: could not delete blob %s: %s", digest, exc)
            report.errors += 1
            return False
    return True


def _collect_orphans(session_factory: sessionmaker[Session], blob_store: BlobStore, cutoff: dt.datetime,
                     report: GcReport) -> None:
    batch: list[tuple[str, dt.datetime | None]] = []
    for info in blob_store.iter_blobs():
        batch.append((info.digest, info.modified))
        if len(batch) >= BATCH:
            _collect_orphan_batch(session_factory, blob_store, batch, cutoff, report)
            batch = []
    if batch:
        _collect_orphan_batch(session_factory, blob_store, batch, cutoff, report)


def _collect_orphan_batch(session_factory: sessionmaker[Session], blob_store: BlobStore,
                          batch: list[tuple[str, dt.datetime | None]], cutoff: dt.datetime,
                          report: GcReport) -> None:
    with session_factory() as session:
        known = set(session.scalars(select(Blob.digest).where(Blob.digest.in_([d for d, _ in batch]))))
    for digest, modified in batch:
        if digest in known:
            continue
        if modified is None or modified >= cutoff:
            report.kept_young += 1
            continue
        if _delete_unrecorded_bytes(session_factory, blob_store, digest, report):
            report.orphans_deleted += 1
            report.add_digest(digest)


