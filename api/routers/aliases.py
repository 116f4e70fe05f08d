"""Aliases: promote, roll back, list and resolve a model's named pointers at versions (``prod``, ``staging``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query

from api.deps import ContainerDep, PrincipalDep, SessionDep
from api.params import AliasName, ModelName, TenantName
from api.problems import AUTHENTICATED, responses
from api.schemas import (
    AliasMovePublic,
    AliasPublic,
    AliasUpdate,
    CanaryPublic,
    ResolutionPublic,
    RollbackCreate,
)
from registry.db.models import Alias
from registry.domain import aliases as alias_rules
from registry.domain.errors import ConflictError, NotFoundError, PolicyViolationError
from registry.services import aliases

router = APIRouter(prefix="/v1/models", tags=["aliases"],
                   responses=responses(*AUTHENTICATED, NotFoundError))
MOVE_ERRORS = responses(*AUTHENTICATED, PolicyViolationError, ConflictError)


def alias_public(row: Alias) -> AliasPublic:
    def canary(doc: dict | None) -> CanaryPublic | None:
        return CanaryPublic(**doc) if doc else None

    return AliasPublic(
        model=f"{row.model.tenant.name}/{row.model.name}", name=row.name, version=row.version.number,
        canary=canary(aliases.canary_doc(aliases.target_of(row))), updated_by=row.updated_by,
        updated_at=row.updated_at,
        history=[AliasMovePublic(action=m.action, at=m.at, by=m.actor, from_version=m.from_version,
                                 from_canary=canary(m.from_canary), to_version=m.to_version,
                                 to_canary=canary(m.to_canary), comment=m.comment,
                                 bundle_digest=m.bundle_digest, input_digest=m.input_digest)
                 for m in reversed(row.history)],
    )


@router.put("/{tenant}/{name}/aliases/{alias}", response_model=AliasPublic, responses=MOVE_ERRORS)
def put_alias(tenant: TenantName, name: ModelName, alias: AliasName, body: AliasUpdate, session: SessionDep,
              principal: PrincipalDep, container: ContainerDep) -> AliasPublic:
    """Point an alias at an approved version (and maybe a canary), if the promotion policy allows."""
    target = alias_rules.make_target(body.version, body.canary.version if body.canary else None,
                                     body.canary.tenants if body.canary else ())
    row = aliases.promote(session, principal, tenant, name, alias, target, comment=body.comment,
                          policy=container.policy, clock=container.clock)
    return alias_public(row)


@router.get("/{tenant}/{name}/aliases", response_model=list[AliasPublic])
def list_aliases(tenant: TenantName, name: ModelName, session: SessionDep,
                 principal: PrincipalDep) -> list[AliasPublic]:
    """Every alias of the model with its history: who moved it, when, from what, to what, why."""
    return [alias_public(row) for row in aliases.list_aliases(session, principal, tenant, name)]


@router.post("/{tenant}/{name}/aliases/{alias}/rollback", response_model=AliasPublic, responses=MOVE_ERRORS)
def rollback_alias(tenant: TenantName, name: ModelName, alias: AliasName, session: SessionDep,
                   principal: PrincipalDep, container: ContainerDep,
                   body: Annotated[RollbackCreate | None, Body()] = None) -> AliasPublic:
    """Move the alias back to what it pointed at before its newest move (policy-checked)."""
    row = aliases.rollback(session, principal, tenant, name, alias, comment=body.comment if body else "",
                           policy=container.policy, clock=container.clock)
    return alias_public(row)


@router.get("/{tenant}/{name}/aliases/{alias}/resolve", response_model=ResolutionPublic,
            responses=responses(*AUTHENTICATED, ConflictError))
def resolve_alias(tenant: TenantName, name: ModelName, alias: AliasName, session: SessionDep,
                  principal: PrincipalDep,
                  for_tenant: Annotated[TenantName | None, Query(
                      description="the tenant the request is served for (default: the model's tenant)",
                  )] = None) -> ResolutionPublic:
    """The version the alias gives this tenant: the canary's if the tenant is in it, else the main one.

    A revoked version does not resolve: 409 with the problem type ``revoked``, naming it and why.
    """
    found = aliases.resolve(session, principal, tenant, name, alias, for_tenant)
    return ResolutionPublic(model=f"{tenant}/{name}", alias=alias, for_tenant=found.for_tenant,
                            version=found.version.number, canary=found.canary,
                            manifest_digest=found.version.manifest_digest)
