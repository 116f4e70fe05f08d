"""Who may read the audit log's signed checkpoints.

Checkpoints sign the whole chain and carry only event ids and hashes, so an auditor of any tenant
may read them: an auditor needs them to hold the registry to its chain later (``modelreg audit
verify --checkpoints``).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry import audit
from registry.auth import AuthenticatedPrincipal, Permission
from registry.db.models import AuditCheckpoint
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

