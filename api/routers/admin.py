"""Tenants, principals, roles and tokens. Administrators only (checked in the services)."""

from __future__ import annotations

from fastapi import APIRouter, status

from api.deps import ContainerDep, PrincipalDep, SessionDep
from api.params import AnyPrincipalName, PrincipalName, RowId, TenantName
from api.problems import AUTHENTICATED, responses
from api.schemas import (
    PrincipalCreate,
    PrincipalPublic,
    RoleBindingPublic,
    RoleGrant,
    TenantAnonymousPullUpdate,
    TenantCreate,
    TenantPublic,
    TokenCreate,
    TokenIssued,
    TokenPublic,
    WhoAmI,
)
from registry.db.models import Principal, Tenant
from registry.domain.errors import AlreadyExistsError, AuthenticationError, InvalidInputError, NotFoundError
from registry.services import identity

router = APIRouter(prefix="/v1", tags=["identity"])


def _principal_public(p: Principal) -> PrincipalPublic:
    return PrincipalPublic(
        name=p.name, is_admin=p.is_admin, disabled=p.disabled,
        roles=[RoleBindingPublic(tenant=b.tenant.name, role=b.role, capacity=b.capacity) for b in p.roles],
    )


@router.get("/whoami", response_model=WhoAmI, responses=responses(AuthenticationError))
def whoami(principal: PrincipalDep) -> WhoAmI:
    return WhoAmI(
        name=principal.name, is_admin=principal.is_admin,
        roles={t: [{"role": r.value, "capacity": c} for r, c in sorted(rs)] for t, rs in principal.roles.items()},
    )


@router.post("/tenants", response_model=TenantPublic, status_code=status.HTTP_201_CREATED,
             responses=responses(*AUTHENTICATED, AlreadyExistsError))
def create_tenant(body: TenantCreate, session: SessionDep, principal: PrincipalDep) -> TenantPublic:
    return _tenant_public(identity.create_tenant(session, principal, body.name))


@router.get("/tenants", response_model=list[TenantPublic], responses=responses(*AUTHENTICATED))
def list_tenants(session: SessionDep, principal: PrincipalDep) -> list[TenantPublic]:
    return [_tenant_public(t) for t in identity.list_tenants(session, principal)]


@router.put("/tenants/{tenant}/oci-anonymous-pull", response_model=TenantPublic,
            responses=responses(*AUTHENTICATED, NotFoundError))
def put_oci_anonymous_pull(tenant: TenantName, body: TenantAnonymousPullUpdate, session: SessionDep,
                           principal: PrincipalDep) -> TenantPublic:
    """Let callers without credentials pull the tenant's released versions through ``/v2`` (administrators)."""
    return _tenant_public(identity.set_oci_anonymous_pull(session, principal, tenant, body.enabled))


def _tenant_public(t: Tenant) -> TenantPublic:
    return TenantPublic(name=t.name, created_at=t.created_at, oci_anonymous_pull=t.oci_anonymous_pull)


@router.post("/principals", response_model=PrincipalPublic, status_code=status.HTTP_201_CREATED,
             responses=responses(*AUTHENTICATED, AlreadyExistsError))
def create_principal(body: PrincipalCreate, session: SessionDep, principal: PrincipalDep) -> PrincipalPublic:
    created = identity.create_principal(session, principal, body.name, is_admin=body.is_admin)
    return _principal_public(created)


@router.get("/principals/{name}", response_model=PrincipalPublic,
            responses=responses(*AUTHENTICATED, NotFoundError))
def get_principal(name: PrincipalName, session: SessionDep, principal: PrincipalDep) -> PrincipalPublic:
    return _principal_public(identity.read_principal(session, principal, name))


# The role a grant gave is revoked with the same body (the principal's roles have no path of their own).
_REVOKE_THE_GRANT = {"RevokeRole": {"operationRef": "#/paths/~1v1~1principals~1{name}~1roles/delete",
                                    "parameters": {"name": "$request.path.name"}, "requestBody": "$request.body"}}


@router.post("/principals/{name}/roles", response_model=PrincipalPublic, status_code=status.HTTP_201_CREATED,
             responses={201: {"description": "the principal, with the role", "links": _REVOKE_THE_GRANT},
                        **responses(*AUTHENTICATED, NotFoundError)})
def grant_role(name: PrincipalName, body: RoleGrant, session: SessionDep,
               principal: PrincipalDep) -> PrincipalPublic:
    identity.grant_role(session, principal, name, body.tenant, body.role.value, body.capacity)
    session.expire_all()
    return _principal_public(identity.read_principal(session, principal, name))


@router.delete("/principals/{name}/roles", status_code=status.HTTP_204_NO_CONTENT,
               responses=responses(*AUTHENTICATED, NotFoundError))
def revoke_role(name: PrincipalName, body: RoleGrant, session: SessionDep, principal: PrincipalDep) -> None:
    identity.revoke_role(session, principal, name, body.tenant, body.role.value, body.capacity)


@router.post("/principals/{name}/tokens", response_model=TokenIssued, status_code=status.HTTP_201_CREATED,
             responses=responses(*AUTHENTICATED, NotFoundError))
def create_token(name: PrincipalName, body: TokenCreate, session: SessionDep,
                 principal: PrincipalDep) -> TokenIssued:
    issued = identity.create_token(
        session, principal, name, description=body.description, expires_in_days=body.expires_in_days
    )
    return TokenIssued(id=issued.id, token=issued.token, prefix=issued.prefix, expires_at=issued.expires_at)


@router.delete("/tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT,
               responses=responses(*AUTHENTICATED, NotFoundError))
def revoke_token(token_id: RowId, session: SessionDep, principal: PrincipalDep, container: ContainerDep) -> None:
    identity.revoke_token(session, principal, token_id, clock=container.clock)


@router.get("/principals/{name}/tokens", response_model=list[TokenPublic],
            responses=responses(*AUTHENTICATED, NotFoundError))
def list_tokens(name: PrincipalName, session: SessionDep, principal: PrincipalDep) -> list[TokenPublic]:
    return [TokenPublic(id=t.id, prefix=t.prefix, description=t.description, created_at=t.created_at,
                        expires_at=t.expires_at, revoked_at=t.revoked_at)
            for t in identity.list_tokens(session, principal, name)]


@router.post("/principals/{name:path}/disable", response_model=PrincipalPublic,
             responses=responses(*AUTHENTICATED, NotFoundError, InvalidInputError))
def disable_principal(name: AnyPrincipalName, session: SessionDep, principal: PrincipalDep,
                      container: ContainerDep) -> PrincipalPublic:
    """Refuse every token of the principal from the next request on, and end their console sessions.

    A bound service account's principal (``sa:NS/SA@issuer``, slashes and all) is named as it is.
    """
    return _principal_public(identity.set_disabled(session, principal, name, True, clock=container.clock))


@router.post("/principals/{name:path}/enable", response_model=PrincipalPublic,
             responses=responses(*AUTHENTICATED, NotFoundError))
def enable_principal(name: AnyPrincipalName, session: SessionDep, principal: PrincipalDep,
                     container: ContainerDep) -> PrincipalPublic:
    return _principal_public(identity.set_disabled(session, principal, name, False, clock=container.clock))
