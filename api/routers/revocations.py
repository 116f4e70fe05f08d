"""Revocation: withdraw a version for good (it is never released again, aliases on it stop resolving)."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import ContainerDep, PrincipalDep, SessionDep
from api.params import ModelName, TenantName, VersionNumber
from api.problems import AUTHENTICATED, responses
from api.routers.models import version_public
from api.schemas import RevocationCreate, VersionPublic
from registry.domain.errors import ConflictError, NotFoundError
from registry.services import revocations

router = APIRouter(prefix="/v1/models", tags=["revocations"],
                   responses=responses(*AUTHENTICATED, NotFoundError))


@router.post("/{tenant}/{name}/versions/{number}/revoke", response_model=VersionPublic,
             responses=responses(*AUTHENTICATED, ConflictError))
def revoke_version(tenant: TenantName, name: ModelName, number: VersionNumber, body: RevocationCreate,
                   session: SessionDep, principal: PrincipalDep, container: ContainerDep) -> VersionPublic:
    """Revoke a version (administrators and ``security`` approvers): it is never released again."""
    version = revocations.revoke(session, principal, tenant, name, number, body.reason, clock=container.clock)
    return version_public(version)
