from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from api.deps import PrincipalDep, SessionDep
from api.params import AfterId, TenantName
from api.problems import AUTHENTICATED, responses
from registry.domain.errors import AuditChainError
from registry.services import audit as audit_service

router = APIRouter(prefix="/v1/audit", tags=["audit"], responses=responses(*AUTHENTICATED))


@router.get("/events")
def list_events(
    session: SessionDep,
    principal: PrincipalDep,
    tenant: TenantName | None = None,
    after: AfterId = 0,
    limit: int = Query(100, ge=1, le=1000),
) -> list[dict[str, Any]]:
    """Events after an id; auditors see their tenant's events, administrators all."""
    events = audit_service.list_events(session, principal, tenant=tenant, after=after, limit=limit)
    return [e.as_dict() for e in events]


@router.get("/checkpoints")
def list_checkpoints(
    session: SessionDep,
    principal: PrincipalDep,
    after: AfterId = 0,
    limit: int = Query(100, ge=1, le=1000),
) -> list[dict[str, Any]]:
    """Signed audit checkpoints after a checkpoint id, oldest first (auditors and administrators).

    Save them: ``modelreg audit verify --checkpoints FILE`` holds the chain to them later.
    """
    return [c.as_dict() for c in audit_service.list_checkpoints(session, principal, after=after, limit=limit)]


@router.get("/verify", responses=responses(*AUTHENTICATED, AuditChainError))
def verify(session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    """Recompute the chain; a broken chain is a 422 problem naming the first bad event."""
    report = audit_service.verify_chain(session, principal)
    return {"ok": True, "events": report.events, "head_hash": report.head_hash}
