"""Who may read the audit log: its events, its verification and its signed checkpoints.

Events are read by the auditors of their tenant, and all of them by administrators; recomputing the
whole chain is for administrators. Checkpoints sign the whole chain and carry only event ids and hashes, so an auditor of any tenant
may read them: an auditor needs them to hold the registry to its chain later (``modelreg audit
verify --checkpoints``).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy.orm import Session

from registry import audit
from registry.auth import AuthenticatedPrincipal, Permission, require, require_admin
from registry.db.models import AuditCheckpoint, AuditEvent
from registry.domain.errors import PermissionDeniedError


def list_checkpoints(
    session: Session, actor: AuthenticatedPrincipal, *, after: int, limit: int,
) -> list[AuditCheckpoint]:
    """Signed checkpoints after a checkpoint id, for administrators and the auditors of any tenant.

    Raises:
        PermissionDeniedError: the caller audits no tenant.
    """
    # An administrator holds every permission in any tenant, "" included.
    if not any(Permission.AUDIT in actor.permissions(t) for t in (*actor.roles, "")):
        raise PermissionDeniedError(
            f"{actor.name!r} is not an auditor of any tenant", principal=actor.name, permission="audit",
        )
    return audit.checkpoints(session, after=after, limit=limit)



def list_events(
    session: Session, actor: AuthenticatedPrincipal, *, tenant: str | None, after: int, limit: int,
    by: str | None = None, action: str | None = None, since: dt.datetime | None = None,
    until: dt.datetime | None = None,
) -> list[AuditEvent]:
    """Events after an id: of one tenant for its auditors, of every tenant for administrators.

    ``by`` (an actor's name), ``action``, ``since`` and ``until`` narrow them (see :func:`registry.audit.events`).

    Raises:
        PermissionDeniedError: ``actor`` audits no such tenant (or, with no tenant, is no administrator).
    """
    if tenant is None:
        require_admin(actor)
    else:
        require(actor, tenant, Permission.AUDIT)
    return audit.events(session, tenant=tenant, after=after, limit=limit, actor=by, action=action, since=since,
                        until=until)


def verify_chain(session: Session, actor: AuthenticatedPrincipal) -> audit.ChainReport:
    """Recompute the whole chain (administrators).

    Raises:
        PermissionDeniedError: ``actor`` is no administrator.
        AuditChainError: naming the first altered, removed or reordered event.
    """
    require_admin(actor)
    return audit.verify(session)
