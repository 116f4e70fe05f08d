"""An append-only, hash-chained audit log with signed checkpoints.

Each event stores the hash of the event before it; its own hash covers its id, time, actor, action,
subject, tenant, details and that previous hash. ``append`` runs in the caller's transaction, so an
event exists exactly when the change it records is committed; ``append_many`` appends a batch of events
under one lock of the head and one insert (a caller recording N things pays for one append, not N).
``verify`` recomputes the chain and
names the first event that was altered, removed or reordered; the head row (last id and hash,
updated with each append) catches the removal of the newest events.

Whoever can write the database can also cut the newest events and move the head, or recompute the
whole chain after an edit. Checkpoints close that: :func:`checkpoint` signs (event id, chain hash,
time) with the registry's key, in a DSSE envelope of its own payload type. An auditor saves them
outside the database; ``verify(..., checkpoints=...)`` then refuses a chain that is shorter than a
saved checkpoint or whose hash at a checkpointed event differs from the signed one. Workers write a
checkpoint when one is due (:func:`checkpoint_if_due`), not ``append``: appends happen in every
service's transaction, which holds no signing key and should not wait for a signature.

Usage (a sketch, not run as a doctest)::

    append(session, actor="alice", action="version.submitted", subject="acme/llama@3")
    append_many(session, [Entry("bob", "version.approved", "acme/llama@3", "acme"), ...])
    saved = [checkpoint(session, key).as_dict()]
    verify(session, checkpoints=saved, keys=key.public_key)  # raises AuditChainError
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Iterator

from sqlalchemy import insert, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import IntegrityError as SAIntegrityError
from sqlalchemy.orm import Session, make_transient_to_detached

from registry.db.models import AuditCheckpoint, AuditEvent, AuditHead, utcnow
from registry.db.session import begin_write, is_postgres
from registry.domain.errors import AuditChainError, AuditCheckpointError, SignatureError
from registry.signing.canonical import canonical_json
from registry.signing.dsse import sign_envelope, verify_envelope
from registry.signing.keys import SigningKey, VerifyingKey
from registry.tlog import events as log_events

GENESIS = "0" * 64
NOTIFY_CHANNEL = "modelreg_events"
"""PostgreSQL: each append notifies this channel with its (last) event's id (see registry.watch)."""
# The actor of the registry's own actions; no principal may take this name.
SYSTEM_ACTOR = "system"
_HEAD_ID = 1
CHECKPOINT_PAYLOAD_TYPE = "application/vnd.modelreg.audit-checkpoint.v1+json"
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def event_hash(
    *,
    id: int,
    at: dt.datetime,
    actor: str,
    action: str,
    subject: str,
    tenant: str | None,
    details: dict[str, Any],
    prev_hash: str,
) -> str:
    """The sha256 of an event's canonical JSON form."""
    body = {
        "id": id,
        "at": _format_time(at),
        "actor": actor,
        "action": action,
        "subject": subject,
        "tenant": tenant,
        "details": details,
        "prev_hash": prev_hash,
    }
    return hashlib.sha256(_encode(body)).hexdigest()


def event_body(event: Any) -> dict[str, Any]:
    """The body the verifiable log commits to (:mod:`registry.tlog.events`): the fields :func:`event_hash`
    covers plus that chain hash.

    Args:
        event: an :class:`AuditEvent` or a row with the same attributes.
    """
    return {
        "id": event.id, "at": _format_time(event.at), "actor": event.actor, "action": event.action,
        "subject": event.subject, "tenant": event.tenant, "details": event.details,
        "prev_hash": event.prev_hash, "hash": event.hash,
    }


def event_commitment(event: Any) -> bytes:
    """What the verifiable log holds for an event (its leaf is ``merkle.leaf_hash`` of it, ADR 0011): the
    SHA-256 of the canonical JSON of :func:`event_body`."""
    return log_events.commitment(event_body(event))


def _encode(body: dict[str, Any]) -> bytes:
    return log_events.encode_body(body)


@dataclass(frozen=True, slots=True)
class Entry:
    """One event to append (:func:`append_many`): everything but its id, time and hashes."""

    actor: str
    action: str
    subject: str
    tenant: str | None = None
    details: Mapping[str, Any] | None = None


def append(
    session: Session,
    *,
    actor: str,
    action: str,
    subject: str,
    tenant: str | None = None,
    details: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one event in the caller's transaction (the caller commits): :func:`append_many` of one."""
    return append_many(session, [Entry(actor, action, subject, tenant, details)])[0]


def append_many(session: Session, entries: Sequence[Entry]) -> list[AuditEvent]:
    """Append ``entries`` in order, as consecutive events, in the caller's transaction (the caller commits).

    Appends are serialized by a lock on the head row, so concurrent transactions form one chain. A batch takes
    that lock once, chains its events in memory, inserts them in one bulk statement and moves the head once; on
    PostgreSQL it sends one notification, the last event's id (:mod:`registry.watch` reads every event past its
    head when notified). Each event is hashed exactly as if it had been appended alone.

    Returns:
        The events, in ``entries``' order, persistent in ``session``.
    """
    if not entries:
        return []
    head = _lock_head(session)
    # Microsecond precision survives both databases, so the hash recomputes identically.
    at = utcnow()
    prev_hash, next_id = head.last_hash, head.last_event_id + 1
    rows: list[dict[str, Any]] = []
    for entry in entries:
        details = json.loads(json.dumps(dict(entry.details or {}), default=str))
        row = {"id": next_id, "at": at, "actor": entry.actor, "action": entry.action, "subject": entry.subject,
               "tenant": entry.tenant, "details": details, "prev_hash": prev_hash}
        row["hash"] = prev_hash = event_hash(**row)
        rows.append(row)
        next_id += 1
    # The table, not the mapped class: the ORM's bulk insert would split the rows wherever a None (a tenant) comes
    # and goes, one statement per run.
    session.execute(insert(AuditEvent.__table__), rows)
    head.last_event_id, head.last_hash = rows[-1]["id"], prev_hash
    session.flush()
    if is_postgres(session):
        # Delivered when this transaction commits, never before nor on rollback: the API processes'
        # watchers (registry.watch) wake the long-polls these events concern.
        session.execute(text("SELECT pg_notify(:channel, :id)"),
                        {"channel": NOTIFY_CHANNEL, "id": str(rows[-1]["id"])})
    events = []
    for row in rows:
        event = AuditEvent(**row)
        # Inserted above: the session takes it as loaded from the database, not as one more to insert.
        make_transient_to_detached(event)
        session.add(event)
        events.append(event)
    return events


def _lock_head(session: Session) -> AuditHead:
    """The chain's head row, locked until the transaction ends (created, at genesis, if there is none)."""
    head_query = select(AuditHead).where(AuditHead.id == _HEAD_ID)
    if is_postgres(session):
        # The head row must exist before it can be locked: otherwise two first appends both see
        # none, both write event 1, and one fails. The losing INSERT waits for the winner's commit.
        session.execute(
            pg_insert(AuditHead).values(id=_HEAD_ID, last_event_id=0, last_hash=GENESIS)
            .on_conflict_do_nothing(index_elements=[AuditHead.id])
        )
        head_query = head_query.with_for_update()
    head = session.scalar(head_query)
    if head is None:
        head = AuditHead(id=_HEAD_ID, last_event_id=0, last_hash=GENESIS)
        session.add(head)
    return head


def events(session: Session, *, tenant: str | None = None, after: int = 0, limit: int = 100,
           actor: str | None = None, action: str | None = None, since: dt.datetime | None = None,
           until: dt.datetime | None = None) -> list[AuditEvent]:
    """Events after the id ``after``, oldest first; only ``tenant``'s when given, and only those of ``actor``,
    of ``action`` (an action, or a prefix ending in ``.``: ``version.``) and at ``since`` or later, before
    ``until``, when given."""
    query = select(AuditEvent).where(AuditEvent.id > after).order_by(AuditEvent.id).limit(limit)
    if tenant is not None:
        query = query.where(AuditEvent.tenant == tenant)
    if actor:
        query = query.where(AuditEvent.actor == actor)
    if action:
        query = query.where(AuditEvent.action.startswith(action, autoescape=True) if action.endswith(".")
                            else AuditEvent.action == action)
    if since is not None:
        query = query.where(AuditEvent.at >= since)
    if until is not None:
        query = query.where(AuditEvent.at < until)
    return list(session.scalars(query))


@dataclass(frozen=True, slots=True)
class ChainReport:
    events: int
    head_hash: str
    checkpoints: int = 0


@dataclass(frozen=True, slots=True)
class SignedCheckpoint:
    """What a checkpoint's verified signature states: the chain reached ``event_id`` with ``event_hash``."""

    event_id: int
    event_hash: str
    at: str


def verify(
    session: Session,
    batch: int = 5000,
    *,
    checkpoints: Sequence[Mapping[str, Any]] = (),
    keys: Mapping[str, VerifyingKey] | VerifyingKey | Sequence[VerifyingKey] = (),
) -> ChainReport:
    """Recompute the whole chain, and hold it to checkpoints saved earlier.

    Args:
        session: A database session.
        batch: Events read per query.
        checkpoints: Checkpoints as served (``{"envelope": ..., ...}``); only their signed payloads count.
        keys: The registry's public keys the checkpoints must be signed with.

    Raises:
        AuditCheckpointError: a checkpoint is malformed or not signed by one of ``keys``
            (``details['checkpoint']`` is its index), checked before the chain is read.
        AuditChainError: naming (``details['event_id']``) the first event whose hash does not match
            its contents, whose ``prev_hash`` does not match the event before it, or whose id breaks
            the sequence; or the head when the newest events were removed; or a checkpointed event
            whose chain hash differs from the signed one (``rewritten``) or that is gone
            (``truncated``).
    """
    signed = [open_checkpoint(entry, keys, index=i) for i, entry in enumerate(checkpoints)]
    by_event: dict[int, list[SignedCheckpoint]] = {}
    for cp in signed:
        by_event.setdefault(cp.event_id, []).append(cp)
    prev_hash = GENESIS
    expected_id = 1
    count = 0
    for event in _iter_events(session, batch):
        _check_event(event, expected_id, prev_hash)
        for cp in by_event.get(event.id, ()):
            if cp.event_hash != event.hash:
                raise AuditChainError(
                    f"audit chain was rewritten at or before event {event.id}: its hash {event.hash} differs "
                    f"from {cp.event_hash} in the checkpoint signed at {cp.at}",
                    event_id=event.id, problem="rewritten", checkpoint_at=cp.at,
                    expected=cp.event_hash, actual=event.hash,
                )
        prev_hash = event.hash
        expected_id += 1
        count += 1
    head = session.scalar(select(AuditHead).where(AuditHead.id == _HEAD_ID))
    head_id, head_hash = (head.last_event_id, head.last_hash) if head else (0, GENESIS)
    if head_id != count or head_hash != prev_hash:
        raise AuditChainError(
            f"audit log ends at event {count} but its head records event {head_id}: "
            f"events after {count} were removed or the head was altered",
            event_id=count + 1, problem="truncated",
        )
    beyond = [cp for cp in signed if cp.event_id > count]
    if beyond:
        cp = max(beyond, key=lambda c: c.event_id)
        raise AuditChainError(
            f"audit log ends at event {count} but the checkpoint signed at {cp.at} records event "
            f"{cp.event_id}: events after {count} were removed",
            event_id=count + 1, problem="truncated", checkpoint_event_id=cp.event_id, checkpoint_at=cp.at,
        )
    return ChainReport(events=count, head_hash=prev_hash, checkpoints=len(signed))


# --- checkpoints --------------------------------------------------------------------------------


def open_checkpoint(
    entry: Mapping[str, Any],
    keys: Mapping[str, VerifyingKey] | VerifyingKey | Sequence[VerifyingKey],
    *,
    index: int = 0,
) -> SignedCheckpoint:
    """Verify a checkpoint's signature and return what it signs; the fields beside the envelope are ignored.

    Raises:
        AuditCheckpointError: not an object with an envelope, a signature that does not verify with
            ``keys``, or a payload that is not a checkpoint.
    """
    envelope = entry.get("envelope") if isinstance(entry, Mapping) else None
    if not isinstance(envelope, Mapping):
        raise AuditCheckpointError(f"checkpoint {index} has no signed envelope", checkpoint=index,
                                   problem="malformed")
    try:
        payload = json.loads(verify_envelope(envelope, keys, CHECKPOINT_PAYLOAD_TYPE))
    except SignatureError as err:
        raise AuditCheckpointError(
            f"checkpoint {index} has a bad signature ({err.message})",
            checkpoint=index, problem="bad-signature",
        ) from None
    except ValueError:
        raise AuditCheckpointError(f"checkpoint {index}: its signed payload is not JSON", checkpoint=index,
                                   problem="malformed") from None
    event_id, event_hash_, at = (payload.get(k) if isinstance(payload, dict) else None
                                 for k in ("event_id", "event_hash", "at"))
    if not (type(event_id) is int and event_id >= 1 and isinstance(event_hash_, str)
            and isinstance(at, str)):
        raise AuditCheckpointError(f"checkpoint {index}: its signed payload is not a checkpoint",
                                   checkpoint=index, problem="malformed")
    return SignedCheckpoint(event_id=event_id, event_hash=event_hash_, at=at)


def checkpoint(
    session: Session, key: SigningKey, *, now: dt.datetime | None = None
) -> AuditCheckpoint | None:
    """Sign the chain's head and store the checkpoint (in ``session``; this commits).

    The events since the previous checkpoint are checked first, so the registry never signs a chain
    it did not verify. That check reads in its own transaction: on SQLite the write lock is taken
    only to insert the checkpoint, so appends never wait for a long check. When the head has not
    moved since the last checkpoint, that one is returned.

    Returns:
        The checkpoint of the current head, or None while the log is empty.

    Raises:
        AuditChainError: the chain since the previous checkpoint is broken.
    """
    head = session.execute(
        select(AuditHead.last_event_id, AuditHead.last_hash).where(AuditHead.id == _HEAD_ID)
    ).first()
    if head is None or head.last_event_id == 0:
        session.rollback()
        return None
    last = latest_checkpoint(session)
    if last is not None and last.event_id >= head.last_event_id:
        return last
    _verify_since(session, last, head.last_event_id, head.last_hash)
    at = _format_time(now or utcnow())
    payload = {"event_id": head.last_event_id, "event_hash": head.last_hash, "at": at}
    record = AuditCheckpoint(
        event_id=head.last_event_id, event_hash=head.last_hash,
        at=dt.datetime.strptime(at, _TIME_FORMAT).replace(tzinfo=dt.timezone.utc), key_id=key.key_id,
        envelope=sign_envelope(canonical_json(payload), CHECKPOINT_PAYLOAD_TYPE, key),
    )
    begin_write(session)
    session.add(record)
    try:
        session.commit()
    except SAIntegrityError:
        # Another process checkpointed the same head first: its checkpoint says the same thing.
        session.rollback()
        return session.scalar(select(AuditCheckpoint).where(AuditCheckpoint.event_id == head.last_event_id))
    return record


def checkpoint_if_due(
    session: Session, key: SigningKey, *, every_events: int, every_seconds: float, now: dt.datetime,
) -> AuditCheckpoint | None:
    """Write a checkpoint when the head moved and ``every_events`` events or ``every_seconds`` passed.

    Returns:
        The new checkpoint, or None when none was due.
    """
    head = session.scalar(select(AuditHead.last_event_id).where(AuditHead.id == _HEAD_ID)) or 0
    last = session.execute(
        select(AuditCheckpoint.event_id, AuditCheckpoint.at)
        .order_by(AuditCheckpoint.event_id.desc()).limit(1)
    ).first()
    session.rollback()
    if last is None:
        due = head > 0
    else:
        due = head > last.event_id and (
            head - last.event_id >= every_events or (now - last.at).total_seconds() >= every_seconds
        )
    return checkpoint(session, key, now=now) if due else None


def latest_checkpoint(session: Session) -> AuditCheckpoint | None:
    return session.scalar(select(AuditCheckpoint).order_by(AuditCheckpoint.event_id.desc()).limit(1))


def checkpoints(session: Session, *, after: int = 0, limit: int = 100) -> list[AuditCheckpoint]:
    """Checkpoints with a row id after ``after``, oldest first."""
    return list(session.scalars(
        select(AuditCheckpoint).where(AuditCheckpoint.id > after).order_by(AuditCheckpoint.id).limit(limit)
    ))


def _verify_since(session: Session, last: AuditCheckpoint | None, head_id: int, head_hash: str) -> None:
    """Check the events after the previous checkpoint up to the head (a full check without one)."""
    prev_id, prev_hash = (last.event_id, last.event_hash) if last is not None else (0, GENESIS)
    if last is not None:
        anchor = session.get(AuditEvent, last.event_id)
        if anchor is None or anchor.hash != last.event_hash:
            raise AuditChainError(
                f"audit event {last.event_id} no longer has the hash of its checkpoint",
                event_id=last.event_id, problem="rewritten",
            )
    for event in _iter_events(session, 5000, after=prev_id, upto=head_id):
        _check_event(event, prev_id + 1, prev_hash)
        prev_id, prev_hash = event.id, event.hash
    if prev_id != head_id or prev_hash != head_hash:
        raise AuditChainError(
            f"audit log ends at event {prev_id} but its head records event {head_id}",
            event_id=prev_id + 1, problem="truncated",
        )


def _check_event(event: AuditEvent, expected_id: int, prev_hash: str) -> None:
    """Raise AuditChainError unless ``event`` is number ``expected_id``, follows ``prev_hash``, hashes right."""
    if event.id != expected_id:
        raise AuditChainError(
            f"audit event {expected_id} is missing (next present is {event.id})",
            event_id=expected_id, problem="missing",
        )
    if event.prev_hash != prev_hash:
        raise AuditChainError(
            f"audit event {event.id} does not follow event {event.id - 1} (removed or reordered)",
            event_id=event.id, problem="broken-link",
        )
    recomputed = event_hash(
        id=event.id, at=event.at, actor=event.actor, action=event.action, subject=event.subject,
        tenant=event.tenant, details=event.details, prev_hash=event.prev_hash,
    )
    if recomputed != event.hash:
        raise AuditChainError(
            f"audit event {event.id} was altered (its hash does not match its contents)",
            event_id=event.id, problem="altered",
        )


def _format_time(at: dt.datetime) -> str:
    return at.astimezone(dt.timezone.utc).strftime(_TIME_FORMAT)


def _iter_events(
    session: Session, batch: int, *, after: int = 0, upto: int | None = None
) -> Iterator[AuditEvent]:
    last = after
    while True:
        query = select(AuditEvent).where(AuditEvent.id > last).order_by(AuditEvent.id).limit(batch)
        if upto is not None:
            query = query.where(AuditEvent.id <= upto)
        rows = session.scalars(query).all()
        if not rows:
            return
        yield from rows
        last = rows[-1].id
        session.expunge_all()
