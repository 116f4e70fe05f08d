"""The verifiable audit log in the database (ADR 0011): integration into tiles, checkpoints, tiles and proofs.

Audit events are appended in each service's transaction (``registry.audit.append``) and never wait for the
tree. :func:`integrate_audit_log` (the ``integrate_audit_log`` job) later takes the events after the log's
size in id order, appends their commitments with ``merkle.CompactRange``, and writes the tiles those leaves
complete and the new head in one transaction per batch. It never skips an id: the events are read up to
the audit chain's committed head and only while the ids follow each other, so an id whose transaction has
not committed (seen as a gap) stops the batch until it commits. The log head row's lock serializes
integrators; run twice, the second finds the size already advanced.

:func:`sign_checkpoint_if_due` signs a C2SP checkpoint of the integrated tree with the log key, only when the
size grew and, unless asked on demand, once the interval has passed; before signing it proves, from the
stored tiles, that the new tree extends the last checkpoint's. Tiles and proofs are read back through
``tiles.TileHashes``, a few tiles per request whatever the log's size.

Usage (a sketch, not run as a doctest)::

    integrate_audit_log(session_factory)
    sign_checkpoint_if_due(session_factory, log_key, interval=10, now=clock.now())
    with session_factory() as session:
        proof = inclusion(session, index=3, size=10)
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from sqlalchemy import and_, false, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session, sessionmaker

from registry.audit import event_body, event_commitment
from registry.db.models import AuditEvent, AuditHead, Job, LogCosignature, LogHead, LogTile
from registry.db.session import begin_write, is_postgres
from registry.domain.errors import (
    InvalidTileError,
    LogProofRequestError,
    LogTileNotFoundError,
    LogTreeNotFoundError,
    MalformedCheckpointError,
)
from registry.jobs import DEAD, QUEUED, SUCCEEDED, JobKind, enqueue_job, job_key
from registry.settings import LogWitness
from registry.tlog import merkle
from registry.tlog.checkpoint import Checkpoint, parse_checkpoint, sign_checkpoint
from registry.tlog.note import Ed25519Signer, parse_note
from registry.tlog.tiles import (
    TILE_HEIGHT,
    TILE_WIDTH,
    EntryBundle,
    Tile,
    TileHashes,
    encode_entry_bundle,
    parse_tile_path,
    tiles_read,
)

LOG_HEAD_ID = 1
#: The tile level of the rows holding entries (commitments), beside the Merkle tile levels 0..63.
ENTRIES_LEVEL = -1
#: Events integrated per transaction.
DEFAULT_BATCH = 10_000
_HASH = merkle.HASH_SIZE
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Integration:
    """What one :func:`integrate_audit_log` call did: the size before and after, and the new root."""

    old_size: int
    new_size: int
    root: bytes


def integrate_audit_log(session_factory: sessionmaker[Session], *, batch: int = DEFAULT_BATCH,
                        max_events: int | None = None) -> Integration:
    """Integrate the committed audit events after the log's size, ``batch`` per transaction, until caught up
    (or ``max_events`` were integrated). Idempotent: what is integrated already is not read again.
    """
    first: int | None = None
    done = 0
    while True:
        limit = batch if max_events is None else min(batch, max_events - done)
        with session_factory() as session:
            old, size, root = _integrate_batch(session, limit)
        first = old if first is None else first
        done += size - old
        if size - old < limit or (max_events is not None and done >= max_events):
            return Integration(first, size, root)


#: The shortest and longest wait between two submissions of one checkpoint to witnesses that lack its
#: cosignature: each wait is as long as the checkpoint has gone uncosigned since it was signed, within these.
WITNESS_RETRY_MIN = dt.timedelta(seconds=5)
WITNESS_RETRY_MAX = dt.timedelta(minutes=5)


def arm_integration(session: Session, *, now: dt.datetime, witnesses: Sequence[LogWitness] = (),
                    quorum: int = 0) -> bool:
    """Queue the ``integrate_audit_log`` job when the chain has events the log has not integrated, a
    checkpoint may be due (the log grew since the last one), or the newest checkpoint lacks its witnesses'
    quorum while a witness with a URL has not cosigned it; commits. The job keeps one key for ever: a
    finished one is queued again, and one queued or running already is left alone (one waiting out its
    back-off is made due at once when there is log work).

    A missing quorum is asked again with back-off, on the job's due time: the job re-submits the newest
    checkpoint to the witnesses lacking its cosignature (a witness that was down, or a connection that
    failed), each wait as long as the checkpoint has gone uncosigned (between :data:`WITNESS_RETRY_MIN` and
    :data:`WITNESS_RETRY_MAX`), until the quorum holds.

    Args:
        session: a session with no transaction of the caller's open.
        now: the time by the registry's clock.
        witnesses: the log's witnesses (``settings.log_witnesses``).
        quorum: how many of them must cosign (``settings.log_witness_quorum``; at least one is asked for
            when any has a URL).

    Returns:
        Whether there was work to queue.
    """
    chain = session.scalar(select(AuditHead.last_event_id).where(AuditHead.id == 1)) or 0
    head = session.execute(select(LogHead.size, LogHead.checkpoint_size, LogHead.checkpoint_at)
                           .where(LogHead.id == LOG_HEAD_ID)).first()
    size, signed = (head.size, head.checkpoint_size) if head else (0, 0)
    log_work = chain > size or size > signed
    if not log_work and not _cosignatures_wanted(session, witnesses, quorum):
        session.rollback()
        return False
    key = job_key(JobKind.INTEGRATE_AUDIT_LOG.value)
    job = session.execute(select(Job.state, Job.finished_at).where(Job.idempotency_key == key)).first()
    if job is None:
        enqueue_job(session, JobKind.INTEGRATE_AUDIT_LOG, {}, run_after=now)
    elif job.state in (SUCCEEDED, DEAD):
        due = now
        if not log_work and job.finished_at is not None and head.checkpoint_at is not None:
            # The last run (which submitted) ended at finished_at: wait as long again as the checkpoint
            # has waited for its cosignatures, so a witness down for long is asked rarely, never given up.
            waited = max(job.finished_at - head.checkpoint_at, dt.timedelta(0))
            due = job.finished_at + min(max(waited, WITNESS_RETRY_MIN), WITNESS_RETRY_MAX)
        session.execute(
            update(Job).where(Job.idempotency_key == key, Job.state.in_([SUCCEEDED, DEAD]))
            .values(state=QUEUED, attempts=0, run_after=due, last_error=None, finished_at=None,
                    lease_expires_at=None, locked_by=None))
    elif log_work:
        # A job waiting out a witness back-off must not hold back new events' integration.
        session.execute(update(Job).where(Job.idempotency_key == key, Job.state == QUEUED, Job.run_after > now)
                        .values(run_after=now))
    session.commit()
    return True


def _cosignatures_wanted(session: Session, witnesses: Sequence[LogWitness], quorum: int) -> bool:
    """Whether the newest checkpoint has fewer than ``quorum`` (at least one) cosignatures of ``witnesses``
    while one of them with a URL has not cosigned it."""
    submitting = {w.verifier_key for w in witnesses if w.url is not None}
    if not submitting:
        return False
    note = latest_checkpoint(session)
    if note is None:
        return False
    checkpoint = parse_checkpoint(parse_note(note.encode()).text)
    have = set(session.scalars(select(LogCosignature.witness_key)
                               .where(LogCosignature.checkpoint_size == checkpoint.size,
                                      LogCosignature.root == checkpoint.root_hash,
                                      LogCosignature.witness_key.in_({w.verifier_key for w in witnesses}))).all())
    return len(have) < max(quorum, 1) and bool(submitting - have)


def _integrate_batch(session: Session, batch: int, *, through: int | None = None) -> tuple[int, int, bytes]:
    """Integrate at most ``batch`` committed events after the log's size (none past id ``through``, when
    given); commits. Returns the size before and after, read under the head's lock, and the root."""
    head = _lock_head(session)
    old_size = head.size
    # Only ids the chain's committed head covers, read after it: each of them committed before this read.
    bound = session.scalar(select(AuditHead.last_event_id).where(AuditHead.id == 1)) or 0
    rows = session.execute(
        select(AuditEvent.id, AuditEvent.at, AuditEvent.actor, AuditEvent.action, AuditEvent.subject,
               AuditEvent.tenant, AuditEvent.details, AuditEvent.prev_hash, AuditEvent.hash)
        .where(AuditEvent.id > old_size,
               AuditEvent.id <= min(bound, old_size + batch, bound if through is None else through))
        .order_by(AuditEvent.id)
    ).all()
    edge = _edge(head)
    entries: list[bytes] = []
    stored: dict[int, list[bytes]] = {}
    for row in rows:
        # Leaf i is event i + 1: a gap is an id not committed yet (or lost); stop before it, never skip it.
        if row.id != edge.size + 1:
            break
        commitment = event_commitment(row)
        entries.append(commitment)
        for level, _index, h in edge.append(merkle.leaf_hash(commitment)):
            if level % TILE_HEIGHT == 0:
                stored.setdefault(level // TILE_HEIGHT, []).append(h)
    if not entries:
        root = head.root
        session.rollback()
        return old_size, old_size, root
    _extend_tiles(session, ENTRIES_LEVEL, old_size, entries)
    for tile_level, hashes in stored.items():
        _extend_tiles(session, tile_level, old_size >> (TILE_HEIGHT * tile_level), hashes)
    head.size, head.root = edge.size, edge.root()
    head.edge = b"".join(edge.hashes())
    session.commit()
    return old_size, edge.size, edge.root()


def _extend_tiles(session: Session, level: int, start: int, values: list[bytes]) -> None:
    """Append ``values`` (consecutive stored values from index ``start`` of ``level``) to their tiles."""
    at = 0
    while at < len(values):
        index, offset = divmod(start + at, TILE_WIDTH)
        take = values[at:at + TILE_WIDTH - offset]
        row = session.get(LogTile, (level, index)) if offset else None
        if offset and (row is None or row.width != offset):
            raise RuntimeError(f"log tile {level}/{index} has {row and row.width} hashes, not {offset}")
        if row is None:
            session.add(LogTile(level=level, index=index, width=len(take), data=b"".join(take)))
        else:
            row.data = row.data[:offset * _HASH] + b"".join(take)
            row.width = offset + len(take)
        at += len(take)


def _lock_head(session: Session) -> LogHead:
    """The log head row, locked for this transaction (created on first use)."""
    if is_postgres(session):
        session.execute(pg_insert(LogHead).values(
            id=LOG_HEAD_ID, size=0, root=merkle.EMPTY_ROOT, edge=b"", checkpoint_size=0,
        ).on_conflict_do_nothing(index_elements=[LogHead.id]))
        return session.scalars(select(LogHead).where(LogHead.id == LOG_HEAD_ID).with_for_update()).one()
    begin_write(session)
    head = session.get(LogHead, LOG_HEAD_ID)
    if head is None:
        head = LogHead(id=LOG_HEAD_ID, size=0, root=merkle.EMPTY_ROOT, edge=b"", checkpoint_size=0)
        session.add(head)
        session.flush()
    return head


def _edge(head: LogHead) -> merkle.CompactRange:
    hashes = [head.edge[i:i + _HASH] for i in range(0, len(head.edge), _HASH)]
    subtrees = merkle.perfect_subtrees(0, head.size)
    if len(hashes) != len(subtrees):
        raise RuntimeError(f"the log head's right edge has {len(hashes)} hashes, not {len(subtrees)}")
    stored = dict(zip(subtrees, hashes))
    return merkle.CompactRange.from_hashes(head.size, lambda level, index: stored[(level, index)])


# --- checkpoints --------------------------------------------------------------------------------------


def sign_checkpoint_if_due(session_factory: sessionmaker[Session], key: Ed25519Signer, *, interval: float,
                           now: dt.datetime, on_demand: bool = False) -> str | None:
    """Sign a checkpoint of the integrated tree when it grew since the last one and ``interval`` seconds
    passed (or at once, ``on_demand``). The log's origin is the key's name, kept at the first checkpoint.

    Returns:
        The new signed checkpoint (note text), or None when none was due.

    Raises:
        MalformedCheckpointError: the key names another origin than the log's.
        LogProofError: the stored tree does not extend the last checkpoint (nothing is signed).
    """
    with session_factory() as session:
        return _sign_if_due(session, key, interval=interval, now=now, on_demand=on_demand)


def _sign_if_due(session: Session, key: Ed25519Signer, *, interval: float, now: dt.datetime,
                 on_demand: bool) -> str | None:
    head = _lock_head(session)
    if head.origin is not None and head.origin != key.name:
        raise MalformedCheckpointError(f"the log key names origin {key.name!r}, the log is {head.origin!r}",
                                       origin=head.origin)
    due = head.size > head.checkpoint_size
    if due and not on_demand and head.checkpoint_at is not None:
        due = (now - head.checkpoint_at).total_seconds() >= interval
    if not due:
        session.rollback()
        return None
    source = TileHashes(head.size, lambda tile: read_tile(session, tile, head.size))
    if merkle.root_hash(head.size, source) != head.root:
        raise MalformedCheckpointError("the stored tiles do not hash to the log head's root")
    if head.checkpoint is not None:
        last = parse_checkpoint(parse_note(head.checkpoint.encode()).text)
        merkle.verify_consistency(last.size, head.size, last.root_hash, head.root,
                                  merkle.consistency_proof(last.size, head.size, source))
    signed = sign_checkpoint(Checkpoint(key.name, head.size, head.root), key).decode()
    head.origin = key.name
    head.checkpoint, head.checkpoint_size, head.checkpoint_at = signed, head.size, now
    session.commit()
    return signed


def log_through(session: Session, key: Ed25519Signer, event_id: int, *, now: dt.datetime,
                max_behind: int = DEFAULT_BATCH) -> Literal["covered", "signed", "behind"]:
    """Make sure a signed checkpoint covers audit event ``event_id``: when the newest does not, integrate
    up to it and sign one at once (a release is issued against a checkpoint holding its own events, with
    no wait for the worker's interval). Bounded: when the log is more than ``max_behind`` events behind
    (a tree still being built after an upgrade), nothing is done here.

    Another integrator (the worker's ``integrate_audit_log`` job) may integrate the same events meanwhile:
    how far to go is decided from the size read under the log head's lock, and a log it took past
    ``event_id`` is signed here all the same (the worker signs only once its interval has passed).

    Returns:
        ``covered`` (the newest checkpoint did already), ``signed`` (one covering it was signed now), or
        ``behind`` (none covers it: the log is too far behind, or an event before it is missing).
    """
    signed = session.scalar(select(LogHead.checkpoint_size).where(LogHead.id == LOG_HEAD_ID)) or 0
    session.rollback()
    if event_id <= signed:
        return "covered"
    if event_id - log_size(session) > max_behind:
        session.rollback()
        return "behind"
    while True:
        session.rollback()
        old, new, _root = _integrate_batch(session, max_behind, through=event_id)
        if new >= event_id:
            break
        if new == old:
            # A gap before event_id: an id still in flight (only a writer bypassing audit.append's lock on the
            # audit head can leave one) or lost. The log stops before it and so does this release; the
            # manifest answers 503 with Retry-After until the gap is closed.
            return "behind"
    _sign_if_due(session, key, interval=0, now=now, on_demand=True)
    covered = (session.scalar(select(LogHead.checkpoint_size).where(LogHead.id == LOG_HEAD_ID)) or 0) >= event_id
    session.rollback()
    return "signed" if covered else "behind"


def release_proof(session: Session, events: Sequence[AuditEvent]) -> dict[str, Any] | None:
    """The served checkpoint and, for each of ``events``, its body and inclusion proof in that checkpoint's
    tree (what a release carries, ADR 0011); None when the checkpoint does not cover them all yet."""
    served = served_checkpoint(session)
    if served is None or not events:
        return None
    size = parse_checkpoint(parse_note(served.encode()).text).size
    if max(e.id for e in events) > size:
        return None
    proofs, _root = _compute(session, size, lambda source: [merkle.inclusion_proof(e.id - 1, size, source)
                                                            for e in events])
    return {"checkpoint": served,
            "entries": [{"index": e.id - 1, "event": event_body(e),
                         "inclusion_proof": [base64.b64encode(h).decode() for h in proof]}
                        for e, proof in zip(events, proofs)]}


def latest_checkpoint(session: Session) -> str | None:
    """The newest signed checkpoint (note text), or None before the first."""
    return session.scalar(select(LogHead.checkpoint).where(LogHead.id == LOG_HEAD_ID))


def served_checkpoint(session: Session) -> str | None:
    """The newest signed checkpoint followed by the witness cosignature lines collected for that exact
    checkpoint (``registry.services.witnesses`` verified each before storing it), or None before the first."""
    note = latest_checkpoint(session)
    if note is None:
        return None
    checkpoint = parse_checkpoint(parse_note(note.encode()).text)
    lines = session.scalars(select(LogCosignature.line)
                            .where(LogCosignature.checkpoint_size == checkpoint.size,
                                   LogCosignature.root == checkpoint.root_hash)
                            .order_by(LogCosignature.witness_key)).all()
    return note + "".join(lines)


def log_size(session: Session) -> int:
    """How many events the log has integrated."""
    return session.scalar(select(LogHead.size).where(LogHead.id == LOG_HEAD_ID)) or 0


# --- tiles and proofs ---------------------------------------------------------------------------------


def read_tile(session: Session, tile: Tile | EntryBundle, size: int | None = None) -> bytes:
    """The bytes of a tile or entry bundle of the integrated tree (of ``size`` leaves, when given).

    Raises:
        LogTileNotFoundError: the log has not got that tile (a partial one wider than it has stored).
    """
    level = ENTRIES_LEVEL if isinstance(tile, EntryBundle) else tile.level
    row = session.execute(select(LogTile.width, LogTile.data)
                          .where(LogTile.level == level, LogTile.index == tile.index)).first()
    limit = size if size is not None else log_size(session)
    if row is None or row.width < tile.width or _leaves_needed(tile, level) > limit:
        raise LogTileNotFoundError(tile.path)
    data = row.data[:tile.width * _HASH]
    if isinstance(tile, EntryBundle):
        return encode_entry_bundle([data[i:i + _HASH] for i in range(0, len(data), _HASH)])
    return data


def read_tile_path(session: Session, path: str) -> bytes:
    """The bytes a tlog-tiles path (``tile/...``) names.

    Raises:
        LogTileNotFoundError: not a canonical tile path, or a tile the log has not got.
    """
    try:
        tile = parse_tile_path(path)
    except InvalidTileError as err:
        raise LogTileNotFoundError(path, err.reason) from None
    return read_tile(session, tile)


def _compute(session: Session, size: int, compute: Callable[[merkle.StoredHashes], _T]) -> tuple[_T, bytes]:
    """``compute`` over the tree of ``size``, and its root (the head's when ``size`` is the log's, else
    computed). Which hashes a root or proof reads depends on the sizes and indices only (``tiles_read``),
    so the head and every tile needed are read in one statement: one snapshot, one round trip.

    Raises:
        LogTreeNotFoundError: the log has fewer than ``size`` leaves.
        LogTileNotFoundError: the log lacks a tile a tree of its size has (a damaged log).
    """
    tiles = tiles_read(size, lambda source: (compute(source), merkle.root_hash(size, source)))
    wanted = or_(*(and_(LogTile.level == t.level, LogTile.index == t.index) for t in tiles)) if tiles else false()
    rows = session.execute(
        select(LogHead.size, LogHead.root, LogTile.level, LogTile.index, LogTile.width, LogTile.data)
        .select_from(LogHead).outerjoin(LogTile, wanted).where(LogHead.id == LOG_HEAD_ID)).all()
    have, head_root = (rows[0].size, rows[0].root) if rows else (0, merkle.EMPTY_ROOT)
    if size > have:
        raise LogTreeNotFoundError(size, have)
    stored = {(row.level, row.index): row for row in rows if row.level is not None}
    read = {}
    for tile in tiles:
        row = stored.get((tile.level, tile.index))
        if row is None or row.width < tile.width:
            raise LogTileNotFoundError(tile.path)
        read[tile] = row.data[:tile.width * _HASH]

    def unread(tile: Tile) -> bytes:
        raise LookupError(f"{tile.path} was not among the tiles read")  # tiles_read would be wrong

    source = TileHashes(size, unread, read=read)
    return compute(source), head_root if size == have else merkle.root_hash(size, source)


def _leaves_needed(tile: Tile | EntryBundle, level: int) -> int:
    return ((tile.index * TILE_WIDTH) + tile.width) << (TILE_HEIGHT * max(level, 0))


def inclusion(session: Session, *, index: int, size: int) -> dict[str, Any]:
    """RFC 9162 inclusion proof of leaf ``index`` in the tree of ``size``, with the tree's root and the leaf.

    Raises:
        LogProofRequestError: ``index`` is not a leaf of a tree of ``size``.
        LogTreeNotFoundError: the log has fewer than ``size`` leaves.
    """
    if not 0 <= index < size <= merkle.MAX_TREE_SIZE:
        raise LogProofRequestError(f"leaf {index} is not in a tree of size {size}", index=index, size=size)
    (leaf, hashes), root = _compute(
        session, size, lambda source: (source(0, index), merkle.inclusion_proof(index, size, source)))
    return {"index": index, "size": size, "leaf_hash": leaf, "root": root, "hashes": hashes}


def consistency(session: Session, *, first: int, second: int) -> dict[str, Any]:
    """RFC 9162 consistency proof from the tree of ``first`` leaves to the tree of ``second``, with both roots.

    Raises:
        LogProofRequestError: ``first`` is negative or larger than ``second``.
        LogTreeNotFoundError: the log has fewer than ``second`` leaves.
    """
    if not 0 <= first <= second <= merkle.MAX_TREE_SIZE:
        raise LogProofRequestError(f"no consistency proof from size {first} to size {second}",
                                   first=first, second=second)
    (first_root, hashes), second_root = _compute(
        session, second, lambda source: (merkle.root_hash(first, source),
                                         merkle.consistency_proof(first, second, source)))
    return {"first": first, "second": second, "first_root": first_root, "second_root": second_root,
            "hashes": hashes}
