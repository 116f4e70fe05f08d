"""OpenID Connect single sign-on: the console's and the CLI's sign-in through an identity provider.

The flow is the authorization code flow with PKCE (S256), a ``state`` and a ``nonce``
(:func:`begin_sign_in`). The three secrets travel in a short-lived cookie sealed (AES-GCM, so the
browser can neither read nor change it) under a key derived from the console key; the callback
(:func:`finish_sign_in`) checks ``state`` against it, exchanges the code with Authlib's OAuth 2 client,
and verifies the ID token (:func:`verify_id_token`): its signature against the provider's JWKS, then
``iss``, ``aud`` (our client id), ``exp`` (with a configured leeway), ``nonce`` and ``at_hash`` with
Authlib's :class:`~authlib.oidc.core.CodeIDToken`.

The verified claims become a principal (:func:`provision_principal`): named by a configured claim,
linked to ``<issuer> <sub>`` (``principals.oidc_identity``), holding exactly the roles its groups map
to (``oidc_group_roles``); a user in no mapped group is refused. A principal an administrator made
with a token is never taken over by an identity-provider user of the same name unless
``oidc_adopt_existing_principals`` says so, and never, whatever it says, when that principal is an
administrator; a reserved name (``system``, the audit log's own actor) is never provisioned. A user the
provider no longer puts in any mapped group loses the roles a sign-in gave, and the SSO sessions and tokens
it opened end (:func:`withdraw_identity`), at the refused sign-in. Every refusal raises
:class:`SignInRefusedError`, whose ``reason`` names what failed.

Only refusals after the provider redeemed a code are audited (not :data:`UNAUDITED_REASONS`): a wrong
``state``, an ``error=`` or a made-up code reach the callback from anyone, and are counted
(``modelreg_oidc_refusals_total``, ``api/metrics.py``), not written to the log.

Usage (a sketch, not run as a doctest)::

    start = begin_sign_in(config, key, redirect_uri=".../ui/sign-in/oidc/callback", next_path="/ui")
    # the browser goes to start.url with start.cookie set; the provider sends it back with code and state
    claims = finish_sign_in(config, key, start.cookie, code=code, state=state, redirect_uri=..., now=now)
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from authlib.integrations.httpx_client import OAuth2Client
from authlib.oidc.core import CodeIDToken
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from sqlalchemy import select
from sqlalchemy.orm import Session

from registry import audit
from registry.auth import IssuedToken, Role, get_tenant, issue_token, validate_name
from registry.db.models import ApiToken, Principal, RoleBinding
from registry.db.session import begin_write
from registry.domain.errors import AuthenticationError, InvalidInputError, RegistryError
from registry.domain.text import printable
from registry.services.identity import RESERVED_PRINCIPAL_NAMES, end_sessions

FLOW_LIFETIME = dt.timedelta(minutes=10)
"""How long a started sign-in waits for the provider to send the browser back."""
MAX_PROVIDER_DOCUMENT = 256 * 1024
"""Largest discovery document, JWKS or token response read from the provider."""
METADATA_CACHE_SECONDS = 300.0
ID_TOKEN_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"]
CONSOLE_TOKEN_DESCRIPTION = "console single sign-on"
CLI_TOKEN_DESCRIPTION = "modelreg login (single sign-on)"
SSO_TOKEN_DESCRIPTIONS = (CONSOLE_TOKEN_DESCRIPTION, CLI_TOKEN_DESCRIPTION)
"""The descriptions of the tokens a single sign-on issues (a console session's, ``modelreg login``'s)."""
UNAUDITED_REASONS = frozenset({"no-flow", "flow-expired", "state", "provider", "code"})
"""Refusals before the provider redeemed a code: anyone can cause them, so they are counted, never audited."""


class SignInRefusedError(AuthenticationError):
    """A sign-in through the identity provider was refused; ``details['reason']`` says at which check."""

    code = "sign-in-refused"

    def __init__(self, message: str, *, reason: str, **details: Any) -> None:
        super().__init__(message, reason=reason, **details)
        self.reason = reason


@dataclass(frozen=True)
class MappedRole:
    tenant: str
    role: str
    capacity: str = ""


@dataclass(frozen=True)
class OidcConfig:
    """What the registry knows of its identity provider (built from settings by :func:`config_from_settings`)."""

    issuer: str
    client_id: str
    client_secret: str | None = None
    cli_client_id: str | None = None
    provider_name: str = "your identity provider"
    scopes: tuple[str, ...] = ("openid", "profile", "groups")
    groups_claim: str = "groups"
    username_claim: str = "preferred_username"
    principal_prefix: str = ""
    group_roles: dict[str, tuple[MappedRole, ...]] = field(default_factory=dict)
    adopt_existing_principals: bool = False
    leeway_seconds: int = 60
    cli_token_minutes: int = 60


def config_from_settings(settings: Any) -> OidcConfig | None:
    """The OIDC configuration ``settings`` holds, or None when single sign-on is not configured.

    Raises:
        InvalidInputError: a group mapping that names an unknown role or lacks a tenant.
    """
    if not settings.oidc_issuer or not settings.oidc_client_id:
        return None
    mapping: dict[str, tuple[MappedRole, ...]] = {}
    for group, grants in settings.oidc_group_roles.items():
        grants = [grants] if isinstance(grants, dict) else grants
        parsed = []
        for grant in grants:
            if not isinstance(grant, dict) or "tenant" not in grant or "role" not in grant:
                raise InvalidInputError(f"oidc_group_roles[{group!r}]: each grant needs a tenant and a role")
            role = Role(grant["role"]) if grant["role"] in {r.value for r in Role} else None
            if role is None or role in (Role.ADMIN, Role.NODE):
                raise InvalidInputError(f"oidc_group_roles[{group!r}]: role {grant['role']!r} cannot be mapped "
                                        "(submitter, approver or auditor)")
            parsed.append(MappedRole(grant["tenant"], role.value, grant.get("capacity", "") or ""))
        mapping[group] = tuple(parsed)
    secret = settings.oidc_client_secret.get_secret_value() if settings.oidc_client_secret else None
    return OidcConfig(
        issuer=settings.oidc_issuer.rstrip("/"), client_id=settings.oidc_client_id, client_secret=secret,
        cli_client_id=settings.oidc_cli_client_id, provider_name=settings.oidc_provider_name,
        scopes=tuple(settings.oidc_scopes), groups_claim=settings.oidc_groups_claim,
        username_claim=settings.oidc_username_claim, principal_prefix=settings.oidc_principal_prefix,
        group_roles=mapping, adopt_existing_principals=settings.oidc_adopt_existing_principals,
        leeway_seconds=settings.oidc_leeway_seconds, cli_token_minutes=settings.oidc_cli_token_minutes)


# --- the provider's metadata and keys ------------------------------------------------------------------

_cache: dict[str, tuple[float, dict[str, Any], KeySet]] = {}
_cache_lock = threading.Lock()


def _get_json(url: str) -> dict[str, Any]:
    try:
        with httpx.Client(timeout=10.0, follow_redirects=False) as client, client.stream("GET", url) as response:
            body = b""
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_PROVIDER_DOCUMENT:
                    raise SignInRefusedError("the identity provider's answer is too large", reason="provider")
            if response.status_code != 200:
                raise SignInRefusedError(f"the identity provider answered {response.status_code} for {url}",
                                         reason="provider")
        document = json.loads(body)
    except (httpx.HTTPError, ValueError) as exc:
        raise SignInRefusedError(f"the identity provider cannot be reached or read: {exc}", reason="provider") from None
    if not isinstance(document, dict):
        raise SignInRefusedError("the identity provider's answer is not a JSON object", reason="provider")
    return document


def provider_metadata(config: OidcConfig, *, refresh_keys: bool = False) -> tuple[dict[str, Any], KeySet]:
    """The provider's discovery document and signing keys, fetched at most every few minutes.

    Raises:
        SignInRefusedError: the provider is unreachable, or its document names another issuer.
    """
    with _cache_lock:
        cached = _cache.get(config.issuer)
        if cached and not refresh_keys and time.monotonic() - cached[0] < METADATA_CACHE_SECONDS:
            return cached[1], cached[2]
    metadata = _get_json(f"{config.issuer}/.well-known/openid-configuration")
    if metadata.get("issuer") != config.issuer:
        raise SignInRefusedError("the identity provider's discovery document names another issuer",
                                 reason="provider", issuer=str(metadata.get("issuer"))[:200])
    for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        if not isinstance(metadata.get(name), str):
            raise SignInRefusedError(f"the identity provider's discovery document lacks {name}", reason="provider")
    try:
        keys = KeySet.import_key_set(_get_json(metadata["jwks_uri"]))
    except (JoseError, ValueError, TypeError) as exc:
        raise SignInRefusedError(f"the identity provider's JWKS cannot be read: {exc}", reason="provider") from None
    with _cache_lock:
        _cache[config.issuer] = (time.monotonic(), metadata, keys)
    return metadata, keys


# --- the flow ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StartedSignIn:
    url: str
    """Where to send the browser: the provider's authorization endpoint with our parameters."""
    cookie: str
    """The sealed flow (state, nonce, PKCE verifier, where to go after), for a short-lived cookie."""


def _aead(key: Any) -> AESGCM:
    # The console key's MAC under a purpose of its own: a seal key never used for anything else.
    return AESGCM(bytes.fromhex(key.mac("oidc-flow-seal", "v1")))


def seal_flow(key: Any, flow: dict[str, Any]) -> str:
    nonce = secrets.token_bytes(12)
    sealed = _aead(key).encrypt(nonce, json.dumps(flow).encode(), b"modelreg-oidc-flow")
    return base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")


def open_flow(key: Any, cookie: str | None, *, now: dt.datetime) -> dict[str, Any]:
    """The flow a sealed cookie holds.

    Raises:
        SignInRefusedError: no cookie, a broken seal, or a flow older than :data:`FLOW_LIFETIME`.
    """
    if not cookie or len(cookie) > 2048:
        raise SignInRefusedError("no sign-in was started in this browser (or it was finished): start again",
                                 reason="no-flow")
    try:
        raw = base64.urlsafe_b64decode(cookie + "=" * (-len(cookie) % 4))
        flow = json.loads(_aead(key).decrypt(raw[:12], raw[12:], b"modelreg-oidc-flow"))
    except Exception:  # any tampering: a wrong length, a broken tag, bad JSON
        raise SignInRefusedError("the sign-in's cookie is not one this registry sealed: start again",
                                 reason="no-flow") from None
    if not isinstance(flow, dict) or flow.get("expires", 0) < now.timestamp():
        raise SignInRefusedError("the sign-in took too long: start again", reason="flow-expired")
    return flow


def begin_sign_in(config: OidcConfig, key: Any, *, redirect_uri: str, next_path: str,
                  now: dt.datetime) -> StartedSignIn:
    """Start a console sign-in: the provider's URL to send the browser to, and the sealed cookie to set."""
    metadata, _ = provider_metadata(config)
    state, nonce, verifier = secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(48)
    with OAuth2Client(config.client_id, scope=" ".join(config.scopes), redirect_uri=redirect_uri,
                      code_challenge_method="S256") as client:
        url, _ = client.create_authorization_url(metadata["authorization_endpoint"], state=state, nonce=nonce,
                                                 code_verifier=verifier)
    cookie = seal_flow(key, {"state": state, "nonce": nonce, "verifier": verifier, "next": next_path,
                             "expires": int((now + FLOW_LIFETIME).timestamp())})
    return StartedSignIn(url, cookie)


def finish_sign_in(config: OidcConfig, key: Any, cookie: str | None, *, code: str, state: str, redirect_uri: str,
                   now: dt.datetime) -> tuple[dict[str, Any], str]:
    """Finish a console sign-in: check ``state``, exchange ``code``, verify the ID token; return its claims and
    where the browser goes next.

    Raises:
        SignInRefusedError: any check failed (``reason``: no-flow, flow-expired, state, code, id-token).
    """
    flow = open_flow(key, cookie, now=now)
    if not state or not secrets.compare_digest(state.encode(), str(flow["state"]).encode()):
        raise SignInRefusedError("the provider's answer does not belong to the sign-in this browser started "
                                 "(wrong state)", reason="state")
    id_token = exchange_code(config, config.client_id, config.client_secret, code=code,
                             code_verifier=flow["verifier"], redirect_uri=redirect_uri)
    claims = verify_id_token(config, id_token, client_id=config.client_id, nonce=flow["nonce"], now=now)
    return claims, str(flow.get("next") or "/ui")


def exchange_code(config: OidcConfig, client_id: str, client_secret: str | None, *, code: str, code_verifier: str,
                  redirect_uri: str) -> str:
    """Exchange an authorization code at the provider's token endpoint (Authlib); return the ID token.

    Raises:
        SignInRefusedError: the provider refused the code (used before, expired, another client's).
    """
    if not code or len(code) > 2048:
        raise SignInRefusedError("the provider sent no authorization code", reason="code")
    metadata, _ = provider_metadata(config)
    auth_method = "client_secret_basic" if client_secret else "none"
    try:
        with OAuth2Client(client_id, client_secret, token_endpoint_auth_method=auth_method,
                          redirect_uri=redirect_uri, timeout=10.0) as client:
            token = client.fetch_token(metadata["token_endpoint"], grant_type="authorization_code", code=code,
                                       code_verifier=code_verifier)
    except Exception as exc:  # Authlib's OAuthError for a refusal, httpx's for the network
        raise SignInRefusedError(f"the identity provider refused the authorization code: {exc}",
                                 reason="code") from None
    id_token = token.get("id_token")
    if not isinstance(id_token, str):
        raise SignInRefusedError("the identity provider answered without an ID token", reason="id-token")
    return id_token


def verify_id_token(config: OidcConfig, id_token: str, *, client_id: str, nonce: str,
                    now: dt.datetime) -> dict[str, Any]:
    """Verify an ID token: signature (the provider's JWKS), ``iss``, ``aud`` = ``client_id``, ``exp``, ``iat``,
    ``nonce`` (and ``azp``/``at_hash`` when present); return its claims.

    Raises:
        SignInRefusedError: ``reason`` ``id-token`` with what failed.
    """
    if not nonce:
        raise SignInRefusedError("no nonce to check the ID token against", reason="id-token")
    _, keys = provider_metadata(config)
    try:
        try:
            token = jwt.decode(id_token, keys, algorithms=ID_TOKEN_ALGORITHMS)
        except JoseError:
            # The provider may have rotated its keys since we cached them.
            _, keys = provider_metadata(config, refresh_keys=True)
            token = jwt.decode(id_token, keys, algorithms=ID_TOKEN_ALGORITHMS)
        claims = CodeIDToken(dict(token.claims), dict(token.header),
                             options={"iss": {"essential": True, "value": config.issuer},
                                      "aud": {"essential": True, "value": client_id},
                                      "sub": {"essential": True}, "exp": {"essential": True}},
                             params={"nonce": nonce, "client_id": client_id})
        claims.validate(now=int(now.timestamp()), leeway=config.leeway_seconds)
    except Exception as exc:  # joserfc's and Authlib's errors: every one a refusal
        raise SignInRefusedError(f"the ID token is not valid for this registry: {exc}", reason="id-token") from None
    return dict(claims)


# --- the principal -------------------------------------------------------------------------------------


def mapped_grants(config: OidcConfig, claims: dict[str, Any]) -> set[MappedRole]:
    """The roles the claims' groups map to (an empty set: a user in no mapped group)."""
    groups = claims.get(config.groups_claim, [])
    if isinstance(groups, str):
        groups = [groups]
    if not isinstance(groups, list):
        return set()
    return {grant for group in groups[:1000] if isinstance(group, str) for grant in config.group_roles.get(group, ())}


def provision_principal(session: Session, config: OidcConfig, claims: dict[str, Any], *,
                        now: dt.datetime) -> Principal:
    """The principal of a verified identity, created or updated in the caller's transaction to hold exactly
    the roles its groups map to.

    A user in no mapped group is refused; if a sign-in made its principal before, that principal's roles,
    SSO sessions and SSO tokens are withdrawn first (:func:`withdraw_identity`) and committed, so the
    refusal's rollback keeps them withdrawn.

    Raises:
        SignInRefusedError: no mapped group (``no-mapped-group``), an unusable name (``name``), a reserved
            name (``reserved-name``), a principal of that name made otherwise (``name-taken``) or an
            administrator (``adopt-admin``), or a disabled one (``disabled``).
    """
    grants = mapped_grants(config, claims)
    identity = f"{config.issuer} {claims['sub']}"[:512]
    raw_name = claims.get(config.username_claim)
    if not isinstance(raw_name, str) or not raw_name:
        raise SignInRefusedError(f"the ID token carries no {config.username_claim!r} claim to name you by",
                                 reason="name")
    name = f"{config.principal_prefix}{raw_name}".lower()
    try:
        validate_name("principal", name)
    except InvalidInputError:
        raise SignInRefusedError(f"{name!r} cannot be a principal's name", reason="name") from None
    if name.casefold() in RESERVED_PRINCIPAL_NAMES:
        raise SignInRefusedError(f"{name!r} is reserved for the registry itself and cannot sign in",
                                 reason="reserved-name", principal=name)
    if not grants:
        withdraw_identity(session, identity, now=now)
        raise SignInRefusedError(f"{name!r} is in no group this registry maps to a role: ask an administrator",
                                 reason="no-mapped-group", principal=name)
    principal = session.scalar(select(Principal).where(Principal.oidc_identity == identity))
    if principal is None:
        principal = session.scalar(select(Principal).where(Principal.name == name))
        if principal is not None and (principal.oidc_identity is not None or not config.adopt_existing_principals):
            raise SignInRefusedError(f"a principal named {name!r} exists and is not linked to this identity",
                                     reason="name-taken", principal=name)
        if principal is not None and principal.is_admin:
            # Adoption is for principals an administrator made for people; an administrator's own is never
            # handed to whoever the provider calls by that name.
            raise SignInRefusedError(f"a principal named {name!r} is an administrator, which single sign-on "
                                     "never adopts: ask an administrator", reason="adopt-admin", principal=name)
        if principal is None:
            principal = Principal(name=name, is_admin=False, disabled=False)
            session.add(principal)
        principal.oidc_identity = identity
    if principal.disabled:
        raise SignInRefusedError(f"{principal.name!r} is disabled", reason="disabled", principal=principal.name)
    wanted = set()
    for grant in grants:
        try:
            tenant = get_tenant(session, grant.tenant)
        except RegistryError:
            raise SignInRefusedError(f"the group mapping names tenant {grant.tenant!r}, which does not exist",
                                     reason="mapping", tenant=grant.tenant) from None
        wanted.add((tenant.id, grant.role, grant.capacity))
    for binding in list(principal.roles):
        key = (binding.tenant_id, binding.role, binding.capacity)
        if key in wanted:
            wanted.discard(key)
        else:
            principal.roles.remove(binding)
    for tenant_id, role, capacity in sorted(wanted):
        principal.roles.append(RoleBinding(tenant_id=tenant_id, role=role, capacity=capacity))
    session.flush()
    session.expire(principal, ["roles"])
    return principal


def withdraw_identity(session: Session, identity: str, *, now: dt.datetime) -> None:
    """A linked identity the provider puts in no mapped group any more: remove its principal's roles, revoke
    the tokens single sign-on issued it and end the sessions they opened, audit it
    (``auth.oidc_roles_withdrawn``) and commit. Nothing when no principal is linked to ``identity``."""
    principal = session.scalar(select(Principal).where(Principal.oidc_identity == identity))
    if principal is None:
        return
    removed = sorted(f"{b.tenant_id}:{b.role}:{b.capacity}" for b in principal.roles)
    principal.roles.clear()
    tokens = session.scalars(select(ApiToken).where(ApiToken.principal_id == principal.id,
                                                    ApiToken.description.in_(SSO_TOKEN_DESCRIPTIONS))).all()
    ended = 0
    for token in tokens:
        if token.revoked_at is None:
            token.revoked_at = now
        ended += end_sessions(session, why="sso-groups-withdrawn", now=now, token_id=token.id)
    audit.append(session, actor=principal.name, action="auth.oidc_roles_withdrawn",
                 subject=f"principal/{principal.name}",
                 details={"roles": removed, "sessions_ended": ended, "tokens": sorted(t.id for t in tokens)})
    session.commit()


def token_for_identity(session: Session, config: OidcConfig, claims: dict[str, Any], *, lifetime: dt.timedelta,
                       description: str, now: dt.datetime) -> tuple[Principal, IssuedToken]:
    """Provision the principal of verified ``claims`` and issue it a token of ``lifetime``, in the caller's
    transaction (audited as ``auth.oidc_signed_in``).

    Raises:
        SignInRefusedError: as :func:`provision_principal`.
    """
    principal = provision_principal(session, config, claims, now=now)
    issued = issue_token(session, principal, description=description, expires_in=lifetime)
    audit.append(session, actor=principal.name, action="auth.oidc_signed_in", subject=f"principal/{principal.name}",
                 details={"issuer": config.issuer, "sub": str(claims.get("sub"))[:255], "token_id": issued.id,
                          "via": description, "roles": sorted(f"{g.tenant}:{g.role}:{g.capacity}"
                                                              for g in mapped_grants(config, claims))})
    return principal, issued


def record_refusal(session: Session, err: SignInRefusedError, *, via: str) -> None:
    """Audit a sign-in refused after the provider redeemed a code (``auth.oidc_refused``), in a transaction of
    its own; a refusal before that (:data:`UNAUDITED_REASONS`) is left out, as anyone can cause one."""
    session.rollback()
    if err.reason in UNAUDITED_REASONS:
        return
    begin_write(session)
    audit.append(session, actor=str(err.details.get("principal") or "anonymous"), action="auth.oidc_refused",
                 subject="oidc", details={"reason": err.reason, "via": via, "message": printable(err.message[:500])})
    session.commit()
