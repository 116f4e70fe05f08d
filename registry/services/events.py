"""The event stream: catalogue events (:mod:`registry.domain.events`) read from the audit log by cursor
(``docs/events.md``).

A consumer holds the id of the last audit event it has seen and asks for what came after. Audit ids are
given out under the chain head's row lock, which the appending transaction holds until it commits, so
events become visible in id order: a reader that has seen id ``n`` never later finds a committed event
below ``n``, and a cursor never skips one.

Who sees what: a tenant's events are seen by anyone holding a role in that tenant (a serving node needs
revocations and alias moves as much as an approver needs arrivals), the registry's own events (trust
root rotations) by every principal, and everything by administrators.
"""

from __future__ import annotations

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from registry.auth import AuthenticatedPrincipal
from registry.db.models import AuditEvent
from registry.domain import events as catalogue
from registry.domain.errors import InvalidInputError, PermissionDeniedError

MAX_LIMIT = 1000
"""The most audit events one read looks at (the events it returns may be fewer, or twice as many)."""


def row_of(event: AuditEvent) -> catalogue.AuditRow:
    return catalogue.AuditRow(id=event.id, at=event.at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), actor=event.actor,
                              action=event.action, subject=event.subject, tenant=event.tenant,
                              details=event.details or {})


def visible_tenants(principal: AuthenticatedPrincipal, tenant: str | None) -> frozenset[str] | None:
    """The tenants whose events ``principal`` reads (None: every tenant), narrowed to ``tenant`` if given.

    Raises:
        PermissionDeniedError: ``tenant`` is one the principal holds no role in.
    """
    if tenant is not None:
        if not principal.is_admin and tenant not in principal.roles:
            raise PermissionDeniedError(f"{principal.name!r} holds no role in tenant {tenant!r}",
                                        principal=principal.name, tenant=tenant, permission="read")
        return frozenset({tenant})
    return None if principal.is_admin else frozenset(principal.roles)


def read(session: Session, principal: AuthenticatedPrincipal, *, after: int, limit: int = 100,
         types: frozenset[str] = frozenset(), tenant: str | None = None) -> tuple[list[catalogue.Event], int]:
    """Events after the audit id ``after`` that ``principal`` may see, of ``types`` (short names; all if empty).

    Returns:
        The events, oldest first, and the cursor to read on from: the last audit id looked at, which may
        be past the last event returned (rows the caller may not see, or of other types, are passed over).

    Raises:
        InvalidInputError: ``limit`` out of range, ``after`` negative.
        PermissionDeniedError: see :func:`visible_tenants`.
    """
    if not 1 <= limit <= MAX_LIMIT or after < 0:
        raise InvalidInputError(f"after must be >= 0 and limit within 1..{MAX_LIMIT}", after=after, limit=limit)
    tenants = visible_tenants(principal, tenant)
    actions = {t.action for t in catalogue.CATALOGUE if not types or t.name in types}
    query = (select(AuditEvent).where(AuditEvent.id > after, AuditEvent.action.in_(sorted(actions)))
             .order_by(AuditEvent.id).limit(limit))
    if tenants is not None:
        global_too = tenant is None
        scope = AuditEvent.tenant.in_(sorted(tenants))
        query = query.where(or_(scope, AuditEvent.tenant.is_(None)) if global_too else scope)
    # Read before the query: every event up to it is committed, so the query sees them all.
    newest = head(session)
    rows = list(session.scalars(query))
    found = [e for row in rows for e in catalogue.events_of(row_of(row)) if not types or
             e.type.removeprefix(catalogue.TYPE_PREFIX) in types]
    if len(rows) == limit:
        return found, rows[-1].id
    # Nothing more matched up to ``newest``: the cursor moves there, past rows of no interest.
    return found, max(after, newest, rows[-1].id if rows else 0)


def head(session: Session) -> int:
    """The newest audit event's id (0 for an empty log)."""
    return int(session.scalar(select(func.coalesce(func.max(AuditEvent.id), 0))) or 0)
