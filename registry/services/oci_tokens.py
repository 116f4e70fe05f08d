"""OCI pull tokens: who a ``/v2`` caller is (:class:`OciCaller`), and the Docker token protocol that makes one.

Callers come in two kinds: a modelreg token presented directly (any repository its principal may read), and a
pull token from :func:`issue_pull_token`, which also names the repositories it was issued for. A pull token is
a JWT (HS256) under a key derived from the registry's console key, short lived (``settings.oci_token_seconds``),
carrying the principal's id and the id of the modelreg token it was exchanged for; each use checks that token
again (revoked, expired, disabled principal) and the principal's current roles, so the pull token never
outlives the rights it was issued under. The OAuth2 form (``POST /v2/token``) is :func:`grant_of_form`; a
tenant may open anonymous pulls to its serving nodes (:func:`anonymous_caller`). What a caller may pull is
``registry/services/oci_serving.py``'s to decide.

Usage (a sketch, not run as a doctest)::

    issued = issue_pull_token(principal, token_id, ["repository:acme/llm:pull"], service="registry.example",
                              key=container.oci_token_key, clock=container.clock, ttl_seconds=300)
    caller = caller_of_pull_token(session, issued.token, key=container.oci_token_key, clock=container.clock)
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
from dataclasses import dataclass
from typing import Any

import jwt
from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.auth import (
    AuthenticatedPrincipal,
    Role,
    WorkloadAuthenticator,
    authenticate,
    authenticate_token_id,
    token_expiry,
    token_id_of,
)
from registry.clock import Clock
from registry.db.models import Principal, Tenant
from registry.domain import serving
from registry.domain.errors import AuthenticationError, InvalidInputError, OAuthGrantError, PullTokenRejectedError
from registry.workload_identity import bound_node_principal

SCOPE_RE = re.compile(r"\Arepository:([a-z0-9._-]+/[a-z0-9._-]+):([a-z*,]+)\Z")
CATALOG_SCOPE = "registry:catalog:*"
MAX_SCOPES = 32
TOKEN_KID = "modelreg-oci-pull"
TOKEN_ISSUER = "modelreg"
ANONYMOUS = "(anonymous)"
"""Who a caller without credentials is, where a tenant lets one pull (no principal's name can be this)."""
ANONYMOUS_ID = 0
"""The principal id of an anonymous pull token (no principal row has it: ids start at 1)."""


@dataclass(frozen=True, slots=True)
class OciCaller:
    """Who pulls, and which repositories their credential covers (None: any their principal may read)."""

    principal: AuthenticatedPrincipal
    repositories: frozenset[str] | None = None
    catalog: bool = True
    """Whether the credential may list the catalog (a pull token only with the ``registry:catalog:*`` scope)."""


@dataclass(frozen=True, slots=True)
class PullToken:
    token: str
    issued_at: dt.datetime
    expires_in: int
    repositories: tuple[str, ...]
    """The repositories granted: those of the scope the caller may read."""


# --- issuing --------------------------------------------------------------------------------------


def issue_pull_token(principal: AuthenticatedPrincipal, token_id: int | None, scopes: list[str], *, service: str,
                     key: bytes, clock: Clock, ttl_seconds: int) -> PullToken:
    """A pull token for the repositories of ``scopes`` that ``principal`` may read (or fetch); others are
    left out, as the Docker token protocol does, so a refused repository answers ``DENIED`` on use.

    Args:
        token_id: The modelreg token the caller presented (checked again on every use); None for a
            service-account token, whose principal is checked again instead.
        scopes: ``repository:<tenant>/<name>:pull`` (actions comma-separated: only ``pull`` is granted)
            or ``registry:catalog:*``.

    Raises:
        InvalidInputError: a malformed scope, or too many.
    """
    # A client may send several scope parameters, or several scopes in one, separated by spaces.
    parts = [part for scope in scopes for part in scope.split(" ")[:MAX_SCOPES + 1]]
    if len(parts) > MAX_SCOPES:
        raise InvalidInputError(f"at most {MAX_SCOPES} scopes a token", field="scope")
    granted: set[str] = set()
    catalog = False
    for part in parts:
        if part == CATALOG_SCOPE:
            catalog = True
            continue
        m = SCOPE_RE.match(part)
        if m is None:
            raise InvalidInputError(f"scope {part[:200]!r} is not repository:<tenant>/<name>:pull", field="scope")
        tenant = m[1].split("/")[0]
        if "pull" in m[2].split(",") and serving.may_be_served(principal.permissions(tenant)):
            granted.add(m[1])
    now = clock.now()
    claims = {"iss": TOKEN_ISSUER, "aud": service, "sub": principal.name, "pid": principal.id, "tid": token_id,
              "access": [{"type": "repository", "name": r, "actions": ["pull"]} for r in sorted(granted)],
              "catalog": catalog, "iat": int(now.timestamp()), "exp": int(now.timestamp()) + ttl_seconds,
              "jti": secrets.token_hex(8)}
    token = jwt.encode(claims, key, algorithm="HS256", headers={"kid": TOKEN_KID})
    return PullToken(token, now, ttl_seconds, tuple(sorted(granted)))


REFRESH_KID = "modelreg-oci-refresh"
REFRESH_SECONDS = 86400
"""The most a refresh token lives (less when the credential it was issued for expires sooner)."""


def issue_refresh_token(principal: AuthenticatedPrincipal, token_id: int | None, *, service: str, key: bytes,
                        clock: Clock, not_after: dt.datetime | None) -> str:
    """A refresh token (the token protocol's ``offline_token``/``access_type=offline``): the OAuth2 form's
    ``grant_type=refresh_token`` exchanges it for pull tokens until ``not_after`` (the credential's own
    expiry) or :data:`REFRESH_SECONDS`, whichever comes first. It names what a pull token names, no
    repositories: each exchange checks the credential behind it again, as each pull token use does."""
    now = clock.now()
    exp = int(now.timestamp()) + REFRESH_SECONDS
    if not_after is not None:
        at = not_after if not_after.tzinfo is not None else not_after.replace(tzinfo=dt.timezone.utc)
        exp = min(exp, int(at.timestamp()))
    claims = {"iss": TOKEN_ISSUER, "aud": service, "sub": principal.name, "pid": principal.id, "tid": token_id,
              "typ": "refresh", "iat": int(now.timestamp()), "exp": exp, "jti": secrets.token_hex(8)}
    return jwt.encode(claims, key, algorithm="HS256", headers={"kid": REFRESH_KID})


def principal_of_refresh_token(session: Session, token: str, *, key: bytes,
                               clock: Clock) -> tuple[AuthenticatedPrincipal, int | None]:
    """The principal a refresh token stands for now, and the modelreg token it was issued for (None: a
    service-account token's).

    Raises:
        PullTokenRejectedError: not a refresh token of this registry, or expired; or the credential behind
            it is no longer valid.
    """
    try:
        if jwt.get_unverified_header(token).get("kid") != REFRESH_KID:
            raise PullTokenRejectedError("refresh token refused: not a refresh token of this registry")
        claims = jwt.decode(token, key, algorithms=["HS256"], issuer=TOKEN_ISSUER,
                            options={"verify_exp": False, "verify_aud": False, "verify_iat": False,
                                     "require": ["exp", "pid", "typ"]})
    except jwt.PyJWTError as e:
        raise PullTokenRejectedError(f"refresh token refused: {e}") from None
    if claims["typ"] != "refresh" or not isinstance(claims.get("pid"), int) or claims["pid"] == ANONYMOUS_ID:
        raise PullTokenRejectedError("refresh token refused: malformed")
    if not isinstance(claims["exp"], int) or claims["exp"] <= clock.now().timestamp():
        raise PullTokenRejectedError("refresh token expired: log in again")
    principal = _principal_behind(session, claims)
    session.rollback()
    return principal, claims["tid"] if isinstance(claims.get("tid"), int) else None


def credential_expiry(session: Session, secret: str, token_id: int | None) -> dt.datetime | None:
    """When the credential ``secret`` (authenticated already) expires: a modelreg token's expiry, or a
    service-account token's ``exp``; None for a token that never expires."""
    if token_id is not None:
        return token_expiry(session, token_id)
    try:
        exp = jwt.decode(secret, options={"verify_signature": False}).get("exp")
    except jwt.PyJWTError:
        return None
    return dt.datetime.fromtimestamp(exp, dt.timezone.utc) if isinstance(exp, int) else None


def is_pull_token(token: str) -> bool:
    """Whether a bearer token is one of this registry's pull tokens (else: a modelreg or workload token)."""
    try:
        return jwt.get_unverified_header(token).get("kid") == TOKEN_KID
    except jwt.PyJWTError:
        return False


def caller_of_pull_token(session: Session, token: str, *, key: bytes, clock: Clock) -> OciCaller:
    """The caller a pull token stands for, with its principal's current roles.

    Raises:
        PullTokenRejectedError: not signed by this registry, malformed or expired; or the modelreg token it
            was issued for is revoked or expired, or its principal disabled.
    """
    try:
        claims = jwt.decode(token, key, algorithms=["HS256"], issuer=TOKEN_ISSUER,
                            options={"verify_exp": False, "verify_aud": False, "verify_iat": False,
                                     "require": ["exp", "pid", "access"]})
    except jwt.PyJWTError as e:
        raise PullTokenRejectedError(f"pull token refused: {e}") from None
    if not isinstance(claims.get("exp"), int) or claims["exp"] <= clock.now().timestamp():
        raise PullTokenRejectedError("pull token expired: ask /v2/token for a new one")
    access = claims["access"]
    if not isinstance(access, list) or not all(isinstance(a, dict) and isinstance(a.get("name"), str) for a in access):
        raise PullTokenRejectedError("pull token refused: malformed access")
    if claims["pid"] == ANONYMOUS_ID and claims.get("sub") == ANONYMOUS:
        return _anonymous_caller_of(session, [a["name"] for a in access])
    principal = _principal_behind(session, claims)
    session.rollback()
    return OciCaller(principal, frozenset(a["name"] for a in access), catalog=claims.get("catalog") is True)


def _principal_behind(session: Session, claims: dict[str, Any]) -> AuthenticatedPrincipal:
    """The principal a pull token was issued to, as it stands now."""
    if isinstance(claims.get("tid"), int):
        try:
            principal = authenticate_token_id(session, claims["tid"])
        except AuthenticationError as e:
            # The modelreg token it was exchanged for is revoked or expired, or its principal disabled.
            raise PullTokenRejectedError(f"pull token refused: {e.message}") from None
    else:
        # Exchanged for a service-account token: the node principal it maps to is checked again, with its
        # roles from the node bindings as they are now (a node principal holds no role bindings).
        row = session.get(Principal, claims["pid"]) if isinstance(claims["pid"], int) else None
        principal = bound_node_principal(session, row) if row is not None else None
        if principal is None:
            raise PullTokenRejectedError("pull token refused: its principal is disabled, gone or bound to no "
                                         "tenant")
    if principal.id != claims["pid"]:
        raise PullTokenRejectedError("pull token refused: principal mismatch")
    return principal


@dataclass(frozen=True, slots=True)
class Grant:
    """What an OAuth2 token form grants: the principal pull tokens are issued to, and its credential."""

    principal: AuthenticatedPrincipal
    token_id: int | None
    """The modelreg token behind it; None for a service-account token."""
    not_after: dt.datetime | None
    """When that credential expires (a refresh token lives no longer); None: never."""


def grant_of_secret(session: Session, secret: str, *, workload: WorkloadAuthenticator | None) -> Grant:
    """What a modelreg or service-account token (a Basic password, a Bearer token) grants.

    Raises:
        AuthenticationError: the token is unknown, expired or revoked, or its principal disabled.
    """
    principal = authenticate(session, secret, workload=workload)
    token_id = token_id_of(session, secret)
    not_after = credential_expiry(session, secret, token_id)
    session.rollback()
    return Grant(principal, token_id, not_after)


def grant_of_form(session: Session, grant_type: str | None, *, password: str | None, refresh_token: str | None,
                  key: bytes, clock: Clock, workload: WorkloadAuthenticator | None) -> Grant:
    """The token protocol's OAuth2 form: ``grant_type=password`` (a modelreg or service-account token as the
    password) or ``grant_type=refresh_token`` (one from :func:`issue_refresh_token`).

    Raises:
        OAuthGrantError: a grant type other than those, a missing field (``invalid_request``), or a
            credential refused (``invalid_grant``).
    """
    if grant_type == "password":
        if not password:
            raise OAuthGrantError("invalid_request", "grant_type=password needs a password (a modelreg token)")
        try:
            return grant_of_secret(session, password, workload=workload)
        except AuthenticationError as exc:
            raise OAuthGrantError("invalid_grant", exc.message) from None
    if grant_type != "refresh_token":
        raise OAuthGrantError("unsupported_grant_type" if grant_type else "invalid_request",
                              "grant_type is password or refresh_token")
    if not refresh_token:
        raise OAuthGrantError("invalid_request", "grant_type=refresh_token needs a refresh_token")
    try:
        principal, token_id = principal_of_refresh_token(session, refresh_token, key=key, clock=clock)
    except AuthenticationError as exc:
        raise OAuthGrantError("invalid_grant", exc.message) from None
    not_after = credential_expiry(session, refresh_token, None) if token_id is None \
        else credential_expiry(session, "", token_id)
    session.rollback()
    return Grant(principal, token_id, not_after)


# --- anonymous pull -------------------------------------------------------------------------------


def anonymous_caller(session: Session, tenant: str | None) -> OciCaller:
    """A caller without credentials on a request naming ``tenant``: a serving node of that tenant alone,
    where an administrator turned anonymous pull on for it (``tenants.oci_anonymous_pull``); never the
    catalog, and nothing of any other tenant.

    Raises:
        AuthenticationError: the request names no repository, or its tenant (if it exists) keeps pulls to
            callers with credentials: the answer that sends a client to ``/v2/token``.
    """
    opened = _anonymous_tenants(session, [tenant] if tenant is not None else [])
    session.rollback()
    if not opened:
        raise AuthenticationError("authentication required: get a pull token from /v2/token")
    return OciCaller(_anonymous_principal(opened), catalog=False)


def issue_anonymous_pull_token(session: Session, scopes: list[str], *, service: str, key: bytes, clock: Clock,
                               ttl_seconds: int) -> PullToken | None:
    """A pull token without credentials, for the repositories of ``scopes`` whose tenant lets anyone pull;
    None when none of them does (the caller answers 401). Each use checks the tenants again.

    Raises:
        InvalidInputError: a malformed scope, or too many.
    """
    parts = [part for scope in scopes for part in scope.split(" ")[:MAX_SCOPES + 1]][:MAX_SCOPES + 1]
    named = [m[1].split("/")[0] for m in map(SCOPE_RE.match, parts) if m is not None]
    opened = _anonymous_tenants(session, named)
    session.rollback()
    if not opened:
        return None
    return issue_pull_token(_anonymous_principal(opened), None, scopes, service=service, key=key, clock=clock,
                            ttl_seconds=ttl_seconds)


def _anonymous_caller_of(session: Session, repositories: list[str]) -> OciCaller:
    """The caller an anonymous pull token stands for now: its repositories whose tenant is still open."""
    opened = _anonymous_tenants(session, [r.split("/")[0] for r in repositories])
    session.rollback()
    granted = frozenset(r for r in repositories if r.split("/")[0] in opened)
    return OciCaller(_anonymous_principal(opened), granted, catalog=False)


def _anonymous_tenants(session: Session, tenants: list[str]) -> frozenset[str]:
    """Those of ``tenants`` whose administrator turned anonymous pull on."""
    names = sorted(set(tenants))[:MAX_SCOPES]
    if not names:
        return frozenset()
    return frozenset(session.scalars(select(Tenant.name).where(Tenant.name.in_(names),
                                                               Tenant.oci_anonymous_pull.is_(True))))


def _anonymous_principal(tenants: frozenset[str]) -> AuthenticatedPrincipal:
    # A node (fetch) in each open tenant and no other: every check of a pull then holds as for a node.
    return AuthenticatedPrincipal(ANONYMOUS_ID, ANONYMOUS, False, {t: frozenset({(Role.NODE, "")}) for t in tenants})
