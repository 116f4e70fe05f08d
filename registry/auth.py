"""Principals, roles, tenants and tokens; permission checks as plain functions.

Roles are held per tenant: ``submitter``, ``approver`` (with a capacity such as ``security``,
``legal`` or ``ml``), ``auditor``, ``node`` (fetch only) and ``admin``; ``admission`` (an admission
webhook's) is held in a tenant but asks for reviews of every namespace. A principal flagged
``is_admin`` administers every tenant. Tokens are random strings shown once; only their sha256 is
stored. The API and the CLI call the same ``require`` checks.

Usage (a sketch, not run as a doctest)::

    principal = authenticate(session, "mr_...")
    require(principal, "default", Permission.SUBMIT)
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import re
import secrets
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from registry.db.models import ApiToken, Principal, RoleBinding, Tenant, utcnow
from registry.domain.errors import (
    AuthenticationError,
    InvalidInputError,
    PermissionDeniedError,
    WorkloadTokenRejectedError,
)
from registry.domain.refs import NAME_RE

TOKEN_PREFIX = "mr_"
MAX_JWT_LENGTH = 16 * 1024
_JWT_RE = re.compile(r"\A[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\Z")


def looks_like_jwt(token: str) -> bool:
    """Whether a bearer token has the compact JWT form (and so is no ``mr_`` registry token)."""
    return len(token) <= MAX_JWT_LENGTH and _JWT_RE.match(token) is not None


class WorkloadAuthenticator(Protocol):
    """What verifies a projected service-account token and maps it to its node principal
    (:class:`registry.workload_identity.WorkloadVerifier`)."""

    def authenticate(self, session: Session, token: str) -> "AuthenticatedPrincipal": ...


class Role(str, enum.Enum):
    SUBMITTER = "submitter"
    APPROVER = "approver"
    AUDITOR = "auditor"
    NODE = "node"
    ADMIN = "admin"
    ADMISSION = "admission"
    """System-wide: held in any tenant, it lets an admission webhook ask for reviews
    (``registry/services/admission.py``); it grants no permission in the tenant itself."""


class Permission(str, enum.Enum):
    READ = "read"  # see models, versions, scans
    SUBMIT = "submit"
    APPROVE = "approve"
    AUDIT = "audit"  # read the audit log and provenance
    FETCH = "fetch"  # download manifests and blobs
    ADMIN = "admin"  # tenants, principals, tokens, rescans


ROLE_PERMISSIONS: dict[Role, frozenset[Permission]] = {
    Role.SUBMITTER: frozenset({Permission.READ, Permission.SUBMIT}),
    Role.APPROVER: frozenset({Permission.READ, Permission.APPROVE}),
    Role.AUDITOR: frozenset({Permission.READ, Permission.AUDIT}),
    Role.NODE: frozenset({Permission.FETCH}),
    Role.ADMIN: frozenset(Permission),
    Role.ADMISSION: frozenset(),
}


@dataclass(frozen=True)
class AuthenticatedPrincipal:
    """Who is calling, with their roles per tenant (``tenant -> {(role, capacity)}``)."""

    id: int
    name: str
    is_admin: bool
    roles: dict[str, frozenset[tuple[Role, str]]] = field(default_factory=dict)

    def permissions(self, tenant: str) -> frozenset[Permission]:
        if self.is_admin:
            return frozenset(Permission)
        granted: set[Permission] = set()
        for role, _capacity in self.roles.get(tenant, frozenset()):
            granted |= ROLE_PERMISSIONS[role]
        return frozenset(granted)

    def capacities(self, tenant: str, role: Role = Role.APPROVER) -> frozenset[str]:
        return frozenset(c for r, c in self.roles.get(tenant, frozenset()) if r == role)


def require(principal: AuthenticatedPrincipal, tenant: str, permission: Permission) -> None:
    """Raise PermissionDeniedError unless ``principal`` holds ``permission`` in ``tenant``."""
    if permission not in principal.permissions(tenant):
        raise PermissionDeniedError(
            f"{principal.name!r} may not {permission.value} in tenant {tenant!r}",
            principal=principal.name, tenant=tenant, permission=permission.value,
        )


def require_admin(principal: AuthenticatedPrincipal) -> None:
    if not principal.is_admin:
        raise PermissionDeniedError(
            f"{principal.name!r} is not an administrator", principal=principal.name, permission="admin"
        )


def validate_name(kind: str, name: str) -> str:
    """Tenant, model and principal names: lower-case letters, digits, ``.``, ``_``, ``-``; 1-63 chars."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidInputError(
            f"invalid {kind} name {name!r}: use 1-63 lower-case letters, digits, '.', '_' or '-'",
            field=kind, value=str(name),
        )
    return name


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class IssuedToken:
    token: str
    """The secret, shown once."""
    id: int
    prefix: str
    expires_at: dt.datetime | None


def issue_token(
    session: Session,
    principal: Principal,
    *,
    description: str = "",
    expires_in: dt.timedelta | None = dt.timedelta(days=90),
) -> IssuedToken:
    """Create a token for ``principal`` in the caller's transaction; return the secret once."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    expires_at = utcnow() + expires_in if expires_in is not None else None
    row = ApiToken(
        principal_id=principal.id,
        token_hash=hash_token(secret),
        prefix=secret[:10],
        description=description,
        expires_at=expires_at,
    )
    session.add(row)
    session.flush()
    return IssuedToken(token=secret, id=row.id, prefix=row.prefix, expires_at=expires_at)


def authenticate(session: Session, token: str | None, *, workload: WorkloadAuthenticator | None = None
                 ) -> AuthenticatedPrincipal:
    """Resolve a bearer token to its principal and roles: a registry token (``mr_...``), or a Kubernetes
    projected service-account token (a JWT), verified by ``workload`` and mapped through the node bindings.

    Raises:
        AuthenticationError: no token, an unknown, expired or revoked token, or a disabled principal
            (WorkloadTokenRejectedError for a service-account token that fails a check).
    """
    if not token:
        raise AuthenticationError("missing bearer token")
    if not token.startswith(TOKEN_PREFIX) and looks_like_jwt(token):
        if workload is None:
            raise WorkloadTokenRejectedError("service-account token refused: this registry trusts no "
                                             "service-account token issuer", reason="issuer")
        return workload.authenticate(session, token)
    return _check_token(_token_row(session, ApiToken.token_hash == hash_token(token)))


def authenticate_token_id(session: Session, token_id: int) -> AuthenticatedPrincipal:
    """Resolve a token by its id, with the checks of :func:`authenticate` (the console's sessions hold an
    id, sealed, and re-check the token's state on every request).

    Raises:
        AuthenticationError: an unknown, expired or revoked token, or a disabled principal.
    """
    return _check_token(_token_row(session, ApiToken.id == token_id))


def token_expiry(session: Session, token_id: int) -> dt.datetime | None:
    """When the token ``token_id`` expires (None: never, or no such token)."""
    return session.scalar(select(ApiToken.expires_at).where(ApiToken.id == token_id))


def token_id_of(session: Session, token: str) -> int | None:
    """The id of the token ``token`` (None when unknown); authenticate it first."""
    return session.scalar(select(ApiToken.id).where(ApiToken.token_hash == hash_token(token)))


def _token_row(session: Session, where) -> ApiToken | None:
    # One query (every request authenticates; a principal holds a handful of roles).
    return session.execute(
        select(ApiToken).where(where)
        .options(joinedload(ApiToken.principal).joinedload(Principal.roles).joinedload(RoleBinding.tenant))
    ).unique().scalar_one_or_none()


def _check_token(row: ApiToken | None) -> AuthenticatedPrincipal:
    now = utcnow()
    if row is None:
        raise AuthenticationError("unknown token")
    if row.revoked_at is not None:
        raise AuthenticationError("token revoked", token_prefix=row.prefix)
    if row.expires_at is not None and row.expires_at <= now:
        raise AuthenticationError("token expired", token_prefix=row.prefix)
    principal = row.principal
    if principal.disabled:
        raise AuthenticationError("principal disabled", principal=principal.name)
    return load_principal(principal)


def load_principal(principal: Principal) -> AuthenticatedPrincipal:
    roles: dict[str, set[tuple[Role, str]]] = {}
    for binding in principal.roles:
        roles.setdefault(binding.tenant.name, set()).add((Role(binding.role), binding.capacity))
    return AuthenticatedPrincipal(
        id=principal.id,
        name=principal.name,
        is_admin=principal.is_admin,
        roles={t: frozenset(r) for t, r in roles.items()},
    )


def get_tenant(session: Session, name: str) -> Tenant:
    from registry.domain.errors import TenantNotFoundError

    tenant = session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        raise TenantNotFoundError(name)
    return tenant
