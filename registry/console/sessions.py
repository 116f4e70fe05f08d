"""Console sessions: an API token exchanged for a sealed cookie, and the CSRF tokens of its forms.

The cookie carries no secret and needs no table: ``<token id>.<expiry>.<nonce>.<mac>``, sealed with
HMAC-SHA256 under the console key (``settings.console_key``, else ``<data_dir>/console-key``). Opening
it checks the seal and the expiry, then authenticates the API token it names again, by id: a token
revoked or expired since, or a principal disabled since, ends the session on its next request. A
session never outlives its token (its expiry is the earlier of the two).

A node token cannot sign in: the console is for people who read, approve or audit, and a node's
token only fetches.

CSRF tokens are HMACs too: of the session cookie for a signed-in form, and of a random pre-session
cookie for the sign-in form (login CSRF), so a form from another site carries none that checks.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy.orm import Session

from registry.auth import (
    AuthenticatedPrincipal,
    Permission,
    authenticate,
    authenticate_token_id,
    token_expiry,
    token_id_of,
)
from registry.domain.errors import AuthenticationError, PermissionDeniedError

SESSION_LIFETIME = dt.timedelta(hours=8)
"""Longest a console session lasts (a shorter-lived token shortens it)."""
MAX_COOKIE_LENGTH = 200


class CsrfError(PermissionDeniedError):
    """A form arrived without the CSRF token of this session (or of this sign-in page)."""

    code = "csrf"


class ConsoleRefusedError(PermissionDeniedError):
    """A valid token whose principal may not use the console (a serving node's)."""

    code = "console-refused"


class SessionKey:
    """The console's HMAC key; every seal and CSRF token is a MAC under it, domain-separated by purpose."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("the console key must be at least 32 bytes")
        self._key = key

    def mac(self, purpose: str, value: str) -> str:
        return hmac.new(self._key, f"{purpose}\n{value}".encode(), hashlib.sha256).hexdigest()

    def matches(self, purpose: str, value: str, mac: str) -> bool:
        return hmac.compare_digest(self.mac(purpose, value), mac)


@dataclass(frozen=True)
class OpenedSession:
    """A session opened from its cookie: who, until when, and the CSRF token of its forms."""

    principal: AuthenticatedPrincipal
    cookie: str
    expires_at: dt.datetime
    csrf: str


def may_use_console(principal: AuthenticatedPrincipal) -> bool:
    """Administrators, and principals holding any permission besides ``fetch`` in some tenant."""
    return principal.is_admin or any(principal.permissions(t) - {Permission.FETCH} for t in principal.roles)


def sign_in(session: Session, key: SessionKey, token: str, *, now: dt.datetime) -> tuple[str, dt.datetime]:
    """Exchange an API token for a session cookie value and its expiry.

    Raises:
        AuthenticationError: an unknown, expired or revoked token, or a disabled principal.
        ConsoleRefusedError: the token's principal may not use the console (a node).
    """
    principal = authenticate(session, token.strip())
    if not may_use_console(principal):
        raise ConsoleRefusedError(f"{principal.name!r} may not sign in: the console is for readers, approvers and "
                                  "auditors, and a node cannot sign in", principal=principal.name)
    token_id = token_id_of(session, token.strip())
    assert token_id is not None  # authenticate found it
    expires = now + SESSION_LIFETIME
    token_expires = token_expiry(session, token_id)
    if token_expires is not None:
        expires = min(expires, token_expires.replace(tzinfo=dt.timezone.utc)
                      if token_expires.tzinfo is None else token_expires)
    body = f"{token_id}.{int(expires.timestamp())}.{secrets.token_hex(8)}"
    return f"{body}.{key.mac('session', body)}", expires


def open_session(session: Session, key: SessionKey, cookie: str | None, *, now: dt.datetime) -> OpenedSession:
    """The session a cookie value holds, if it is sealed by ``key``, unexpired, and its token still valid.

    Raises:
        AuthenticationError: no cookie, a broken or expired seal, or a token no longer valid.
    """
    if not cookie or len(cookie) > MAX_COOKIE_LENGTH:
        raise AuthenticationError("not signed in")
    body, _, mac = cookie.rpartition(".")
    parts = body.split(".")
    if len(parts) != 3 or not key.matches("session", body, mac):
        raise AuthenticationError("not signed in")
    token_id, expiry = int(parts[0]), int(parts[1])
    expires_at = dt.datetime.fromtimestamp(expiry, dt.timezone.utc)
    if expires_at <= now:
        raise AuthenticationError("the session has expired: sign in again")
    principal = authenticate_token_id(session, token_id)
    if not may_use_console(principal):
        raise AuthenticationError("not signed in")
    return OpenedSession(principal, cookie, expires_at, key.mac("csrf", cookie))


def check_csrf(key: SessionKey, bound_to: str | None, submitted: str | None, *, purpose: str = "csrf") -> None:
    """Raise CsrfError unless ``submitted`` is the CSRF token bound to ``bound_to`` (a cookie value).

    Raises:
        CsrfError: a missing or wrong token.
    """
    if not bound_to or not submitted or not key.matches(purpose, bound_to, submitted):
        raise CsrfError("this form has expired or did not come from this console: reload the page and try again")


def new_sign_in_nonce() -> str:
    return secrets.token_hex(16)
