"""The two attacks on the audit log that the hash chain alone cannot see (issue 7).

Both need only write access to the database: cut the newest events and move the head back, or edit
an event and recompute every hash after it and the head. Signed checkpoints saved earlier expose
both.
"""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from registry import audit
from registry.db.models import AuditEvent, AuditHead


def cut_after(session: Session, last_kept: int) -> None:
    """Delete the events after ``last_kept`` and move the head back to it."""
    kept = session.get(AuditEvent, last_kept)
    session.execute(delete(AuditEvent).where(AuditEvent.id > last_kept))
    head = session.get(AuditHead, 1)
    head.last_event_id, head.last_hash = last_kept, kept.hash
    session.commit()


def rewrite(session: Session, event_id: int, **changes: object) -> None:
    """Edit one event, then recompute its hash, every later link and hash, and the head."""
    prev_hash = session.get(AuditEvent, event_id).prev_hash
    for event in session.scalars(select(AuditEvent).where(AuditEvent.id >= event_id).order_by(AuditEvent.id)):
        if event.id == event_id:
            for column, value in changes.items():
                setattr(event, column, value)
        event.prev_hash = prev_hash
        event.hash = audit.event_hash(id=event.id, at=event.at, actor=event.actor, action=event.action,
                                      subject=event.subject, tenant=event.tenant, details=event.details,
                                      prev_hash=event.prev_hash)
        prev_hash = event.hash
    session.get(AuditHead, 1).last_hash = prev_hash
    session.commit()
