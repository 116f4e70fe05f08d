"""Use cases for tenants, principals, role bindings and tokens (administrators only).

Each use case that writes starts its transaction with ``begin_write``: it reads (does the tenant
exist?) before it writes, which on SQLite fails at once when another writer committed in between.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError as SAIntegrityError
from sqlalchemy.orm import Session

from registry import audit
from registry.auth import (
    AuthenticatedPrincipal,
    IssuedToken,
    Role,
    get_tenant,
    issue_token,
    require_admin,
    validate_name,
)
from registry.clock import Clock
from registry.db.models import ApiToken, ConsoleSession, Principal, RoleBinding, Tenant
from registry.db.session import begin_write
from registry.domain.errors import AlreadyExistsError, InvalidInputError, NotFoundError, ReservedNameError
from registry.domain.text import MAX_DESCRIPTION_LENGTH, validate_text

CAPACITY_REQUIRED = {Role.APPROVER}
# A principal named like the audit log's actor of the registry's own actions could pass its acts off as those.
RESERVED_PRINCIPAL_NAMES = frozenset({audit.SYSTEM_ACTOR})


def create_tenant(session: Session, actor: AuthenticatedPrincipal, name: str) -> Tenant:
    require_admin(actor)
    validate_name("tenant", name)
    begin_write(session)
    if session.scalar(select(Tenant).where(Tenant.name == name)) is not None:
        raise AlreadyExistsError(f"tenant {name!r} already exists", tenant=name)
    tenant = Tenant(name=name)
    session.add(tenant)
    _flush_unique(session, AlreadyExistsError(f"tenant {name!r} already exists", tenant=name))
    audit.append(session, actor=actor.name, action="tenant.created", subject=f"tenant/{name}", tenant=name)
    session.commit()
    return tenant


def _flush_unique(session: Session, conflict: AlreadyExistsError) -> None:
    """Flush; a unique violation (a concurrent creation of the same name won) becomes ``conflict``."""
    try:
        session.flush()
    except SAIntegrityError:
        session.rollback()
        raise conflict from None


def list_tenants(session: Session, actor: AuthenticatedPrincipal) -> list[Tenant]:
    require_admin(actor)
    return list(session.scalars(select(Tenant).order_by(Tenant.name)))


def set_oci_anonymous_pull(session: Session, actor: AuthenticatedPrincipal, name: str, enabled: bool) -> Tenant:
    """Let callers without credentials pull the tenant's released versions through ``/v2`` (or stop them);
    audited as ``tenant.oci_anonymous_pull``.

    Raises:
        PermissionDeniedError: only administrators change it.
        TenantNotFoundError: no such tenant.
    """
    require_admin(actor)
    begin_write(session)
    tenant = get_tenant(session, name)
    previous, tenant.oci_anonymous_pull = tenant.oci_anonymous_pull, bool(enabled)
    audit.append(session, actor=actor.name, action="tenant.oci_anonymous_pull", subject=f"tenant/{name}",
                 tenant=name, details={"enabled": bool(enabled), "previous": previous})
    session.commit()
    return tenant


def create_principal(
    session: Session, actor: AuthenticatedPrincipal, name: str, *, is_admin: bool = False
) -> Principal:
    require_admin(actor)
    validate_name("principal", name)
    if name.casefold() in RESERVED_PRINCIPAL_NAMES:
        raise ReservedNameError("principal", name)
    begin_write(session)
    if session.scalar(select(Principal).where(Principal.name == name)) is not None:
        raise AlreadyExistsError(f"principal {name!r} already exists", principal=name)
    principal = Principal(name=name, is_admin=is_admin)
    session.add(principal)
    _flush_unique(session, AlreadyExistsError(f"principal {name!r} already exists", principal=name))
    audit.append(session, actor=actor.name, action="principal.created", subject=f"principal/{name}",
                 details={"is_admin": is_admin})
    session.commit()
    return principal


def read_principal(session: Session, actor: AuthenticatedPrincipal, name: str) -> Principal:
    """A principal with its roles, for administrators.

    Raises:
        PermissionDeniedError: ``actor`` is no administrator.
        NotFoundError: no such principal.
    """
    require_admin(actor)
    return _get_principal(session, name)


def _get_principal(session: Session, name: str) -> Principal:
    # Unchecked: callers have checked the actor.
    principal = session.scalar(select(Principal).where(Principal.name == name))
    if principal is None:
        raise NotFoundError(f"principal {name!r} does not exist", principal=name)
    return principal


def grant_role(
    session: Session,
    actor: AuthenticatedPrincipal,
    principal_name: str,
    tenant_name: str,
    role: str,
    capacity: str = "",
) -> RoleBinding:
    """Give ``principal_name`` a role in a tenant; approvers need a capacity (security, legal, ml...)."""
    require_admin(actor)
    try:
        parsed = Role(role)
    except ValueError:
        raise InvalidInputError(
            f"unknown role {role!r}; use one of {', '.join(r.value for r in Role)}", field="role"
        ) from None
    if parsed in CAPACITY_REQUIRED and not capacity:
        raise InvalidInputError("an approver needs a capacity (e.g. security, legal, ml)", field="capacity")
    if capacity:
        validate_name("capacity", capacity)
    begin_write(session)
    principal = _get_principal(session, principal_name)
    tenant = get_tenant(session, tenant_name)
    existing = session.scalar(
        select(RoleBinding).where(
            RoleBinding.principal_id == principal.id, RoleBinding.tenant_id == tenant.id,
            RoleBinding.role == parsed.value, RoleBinding.capacity == capacity,
        )
    )
    if existing is not None:
        return existing
    binding = RoleBinding(principal_id=principal.id, tenant_id=tenant.id, role=parsed.value, capacity=capacity)
    session.add(binding)
    audit.append(session, actor=actor.name, action="role.granted", subject=f"principal/{principal_name}",
                 tenant=tenant_name, details={"role": parsed.value, "capacity": capacity})
    session.commit()
    return binding


def revoke_role(
    session: Session, actor: AuthenticatedPrincipal, principal_name: str, tenant_name: str, role: str,
    capacity: str = "",
) -> None:
    require_admin(actor)
    begin_write(session)
    principal = _get_principal(session, principal_name)
    tenant = get_tenant(session, tenant_name)
    binding = session.scalar(
        select(RoleBinding).where(
            RoleBinding.principal_id == principal.id, RoleBinding.tenant_id == tenant.id,
            RoleBinding.role == role, RoleBinding.capacity == capacity,
        )
    )
    if binding is None:
        raise NotFoundError(f"{principal_name!r} has no role {role!r} in {tenant_name!r}")
    session.delete(binding)
    audit.append(session, actor=actor.name, action="role.revoked", subject=f"principal/{principal_name}",
                 tenant=tenant_name, details={"role": role, "capacity": capacity})
    session.commit()


def create_token(
    session: Session,
    actor: AuthenticatedPrincipal,
    principal_name: str,
    *,
    description: str = "",
    expires_in_days: int | None = 90,
) -> IssuedToken:
    require_admin(actor)
    validate_text(description, field="description", max_length=MAX_DESCRIPTION_LENGTH)
    if expires_in_days is not None and not 0 < expires_in_days <= 3650:
        raise InvalidInputError("expires_in_days must be between 1 and 3650", field="expires_in_days")
    begin_write(session)
    principal = _get_principal(session, principal_name)
    issued = issue_token(
        session, principal, description=description,
        expires_in=dt.timedelta(days=expires_in_days) if expires_in_days is not None else None,
    )
    audit.append(session, actor=actor.name, action="token.issued", subject=f"principal/{principal_name}",
                 details={"token_id": issued.id, "prefix": issued.prefix,
                          "expires_at": issued.expires_at.isoformat() if issued.expires_at else None})
    session.commit()
    return issued


def revoke_token(session: Session, actor: AuthenticatedPrincipal, token_id: int, *, clock: Clock) -> None:
    require_admin(actor)
    begin_write(session)
    token = session.get(ApiToken, token_id)
    if token is None:
        raise NotFoundError(f"token {token_id} does not exist", token_id=token_id)
    if token.revoked_at is None:
        token.revoked_at = clock.now()
        ended = end_sessions(session, why="token-revoked", now=clock.now(), token_id=token_id)
        audit.append(session, actor=actor.name, action="token.revoked",
                     subject=f"principal/{token.principal.name}",
                     details={"token_id": token_id, "console_sessions_ended": ended})
    session.commit()


def list_tokens(session: Session, actor: AuthenticatedPrincipal, principal_name: str) -> list[ApiToken]:
    """The tokens of ``principal_name``, oldest first, revoked and expired ones included (never their secrets).

    Raises:
        PermissionDeniedError: ``actor`` is no administrator.
        NotFoundError: no such principal.
    """
    require_admin(actor)
    principal = _get_principal(session, principal_name)
    return list(session.scalars(select(ApiToken).where(ApiToken.principal_id == principal.id).order_by(ApiToken.id)))


def set_disabled(session: Session, actor: AuthenticatedPrincipal, principal_name: str, disabled: bool, *,
                 clock: Clock) -> Principal:
    """Disable a principal (every token of theirs is refused from the next request, and their console sessions
    end for good), or enable them again (their unrevoked tokens work again; ended sessions stay ended).

    Raises:
        PermissionDeniedError: ``actor`` is no administrator.
        NotFoundError: no such principal.
        InvalidInputError: an administrator disabling themselves (which would leave no one to undo it).
    """
    require_admin(actor)
    if disabled and principal_name == actor.name:
        raise InvalidInputError("you cannot disable yourself: ask another administrator", field="principal")
    begin_write(session)
    principal = _get_principal(session, principal_name)
    if principal.disabled != disabled:
        principal.disabled = disabled
        details: dict[str, object] = {}
        if disabled:
            details["console_sessions_ended"] = end_sessions(session, why="principal-disabled", now=clock.now(),
                                                             principal_id=principal.id)
        audit.append(session, actor=actor.name, action="principal.disabled" if disabled else "principal.enabled",
                     subject=f"principal/{principal_name}", details=details)
    session.commit()
    return principal


def end_sessions(session: Session, *, why: str, now: dt.datetime, session_id: int | None = None,
                 token_id: int | None = None, principal_id: int | None = None) -> int:
    """End the live sessions opened with ``token_id``, or of ``principal_id`` (or the one ``session_id``), in the
    caller's transaction; return how many ended.

    Args:
        why: what ended them, kept on each row (``signed-out``, ``token-revoked``, ``principal-disabled``).
    """
    query = update(ConsoleSession).where(ConsoleSession.ended_at.is_(None))
    if session_id is not None:
        query = query.where(ConsoleSession.id == session_id)
    elif token_id is not None:
        query = query.where(ConsoleSession.token_id == token_id)
    elif principal_id is not None:
        query = query.where(ConsoleSession.principal_id == principal_id)
    else:
        raise ValueError("name the sessions to end")
    return session.execute(query.values(ended_at=now, ended_why=why)).rowcount
