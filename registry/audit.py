"""An append-only, hash-chained audit log.

Each event stores the hash of the event before it; its own hash covers its id, time, actor, action,
subject, tenant, details and that previous hash. ``append`` runs in the caller's transaction, so an
event exists exactly when the change it records is committed. ``verify`` recomputes the chain and
names the first event that was altered, removed or reordered; the head row (last id and hash,
updated with each append) catches the removal of the newest events.

Example:
    >>> append(session, actor="alice", action="version.submitted", subject="acme/llama@3")  # doctest: +SKIP
    >>> verify(session)  # raises AuditChainError naming the first bad event  # doctest: +SKIP
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterator

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from registry.db.models import AuditEvent, AuditHead, utcnow
from registry.db.session import is_postgres
from registry.domain.errors import AuditChainError

GENESIS = "0" * 64
_HEAD_ID = 1


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
        "at": at.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "actor": actor,
        "action": action,
        "subject": subject,
        "tenant": tenant,
        "details": details,
        "prev_hash": prev_hash,
    }
    encoded = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return hashlib.sha256(encoded).hexdigest()


def append(
    session: Session,
    *,
    actor: str,
    action: str,
    subject: str,
    tenant: str | None = None,
    details: dict[str, Any] | None = None,
) -> AuditEvent:
    """Append one event in the caller's transaction (the caller commits).

    Appends are serialized by a lock on the head row, so concurrent transactions form one chain.
    """
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
    details = json.loads(json.dumps(details or {}, default=str))
    # Microsecond precision survives both databases, so the hash recomputes identically.
    at = utcnow()
    event = AuditEvent(
        id=head.last_event_id + 1,
        at=at,
        actor=actor,
        action=action,
        subject=subject,
        tenant=tenant,
        details=details,
        prev_hash=head.last_hash,
    )
    event.hash = event_hash(
        id=event.id, at=at, actor=actor, action=action, subject=subject, tenant=tenant,
        details=details, prev_hash=event.prev_hash,
    )
    session.add(event)
    head.last_event_id = event.id
    head.last_hash = event.hash
    session.flush()
    return event


def events(session: Session, *, tenant: str | None = None, after: int = 0, limit: int = 100) -> list[AuditEvent]:
    """Events after the id ``after``, oldest first; only ``tenant``'s when given."""
    query = select(AuditEvent).where(AuditEvent.id > after).order_by(AuditEvent.id).limit(limit)
    if tenant is not None:
        query = query.where(AuditEvent.tenant == tenant)
    return list(session.scalars(query))


@dataclass(frozen=True, slots=True)
class ChainReport:
    events: int
    head_hash: str


def verify(session: Session, batch: int = 5000) -> ChainReport:
    """Recompute the whole chain.

    Raises:
        AuditChainError: naming (``details['event_id']``) the first event whose hash does not match
            its contents, whose ``prev_hash`` does not match the event before it, or whose id breaks
            the sequence; or the head when the newest events were removed.
    """
    prev_hash = GENESIS
    expected_id = 1
    count = 0
    for event in _iter_events(session, batch):
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
    return ChainReport(events=count, head_hash=prev_hash)


def _iter_events(session: Session, batch: int) -> Iterator[AuditEvent]:
    last = 0
    while True:
        rows = session.scalars(
            select(AuditEvent).where(AuditEvent.id > last).order_by(AuditEvent.id).limit(batch)
        ).all()
        if not rows:
            return
        yield from rows
        last = rows[-1].id
        session.expunge_all()
