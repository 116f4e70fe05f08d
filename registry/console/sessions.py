"""Console sessions: an API token exchanged for a sealed cookie, and the CSRF tokens of its forms.

A session is a row of ``console_sessions``; its cookie, ``<session id>.<expiry>.<secret>.<mac>``, names the
row and is sealed with HMAC-SHA256 under the console key (``settings.console_key``, else
``<data_dir>/console-key``); the row keeps only the secret's sha256. Opening a cookie checks the seal,
then the row (not ended, not expired, the secret), then authenticates the API token it was opened with
again, by id: sign-out ends the row, and so do revoking that token and disabling the principal
(:func:`end_sessions`), so a replayed cookie opens nothing afterwards. A session never outlives its token
(its expiry is the earlier of the two). Signing in and out are audited (``console.signed_in``,
``console.signed_out``).

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

from sqlalchemy import delete, or_
from sqlalchemy.orm import Session

from registry import audit
from registry.auth import (
    AuthenticatedPrincipal,
    Permission,
    authenticate,
    authenticate_token_id,
    token_expiry,
    token_id_of,
)
from registry.db.models import ConsoleSession
from registry.db.session import begin_write
from registry.domain.errors import AuthenticationError, PermissionDeniedError
from registry.services.identity import end_sessions

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
        # surrogatepass: a value decoded from hostile bytes may hold lone surrogates, and must still MAC.
        return hmac.new(self._key, f"{purpose}\n{value}".encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()

    def matches(self, purpose: str, value: str, mac: str) -> bool:
        # As bytes: compare_digest raises TypeError on a str holding a non-ASCII character (a cookie or form field).
        return hmac.compare_digest(self.mac(purpose, value).encode(), mac.encode("utf-8", "replace"))


@dataclass(frozen=True)
class OpenedSession:
    """A session opened from its cookie: who, until when, and the CSRF token of its forms."""

    principal: AuthenticatedPrincipal
    cookie: str
    expires_at: dt.datetime
    csrf: str
    session_id: int


def may_use_console(principal: AuthenticatedPrincipal) -> bool:
    """Administrators, and principals holding any permission besides ``fetch`` in some tenant."""
    return principal.is_admin or any(principal.permissions(t) - {Permission.FETCH} for t in principal.roles)


def sign_in(session: Session, key: SessionKey, token: str, *, now: dt.datetime) -> tuple[str, dt.datetime]:
    """Exchange an API token for a new session: record and audit it, commit, return its cookie value and expiry.

    Raises:
        AuthenticationError: an unknown, expired or revoked token, or a disabled principal.
        ConsoleRefusedError: the token's principal may not use the console (a node).
    """
    begin_write(session)
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
    return start_session(session, key, principal, token_id, expires, now=now, method="token")


def start_session(session: Session, key: SessionKey, principal: AuthenticatedPrincipal, token_id: int,
                  expires: dt.datetime, *, now: dt.datetime, method: str) -> tuple[str, dt.datetime]:
    """Record and audit a new session of ``principal`` opened with token ``token_id``, commit, return its cookie
    value and expiry. ``method`` says how the person proved who they are (``token``, ``oidc``)."""
    prune(session, now=now)
    secret = secrets.token_hex(16)
    row = ConsoleSession(token_id=token_id, principal_id=principal.id, secret_hash=_digest(secret), created_at=now,
                         expires_at=expires)
    session.add(row)
    session.flush()
    audit.append(session, actor=principal.name, action="console.signed_in", subject=f"principal/{principal.name}",
                 details={"session_id": row.id, "token_id": token_id, "expires_at": expires.isoformat(),
                          "method": method})
    session.commit()
    body = f"{row.id}.{int(expires.timestamp())}.{secret}"
    return f"{body}.{key.mac('session', body)}", expires


def open_session(session: Session, key: SessionKey, cookie: str | None, *, now: dt.datetime) -> OpenedSession:
    """The session a cookie value holds, if it is sealed by ``key``, not ended nor expired, and its token valid.

    Raises:
        AuthenticationError: no cookie, a broken seal, an ended or expired session, or a token no longer valid.
    """
    if not cookie or len(cookie) > MAX_COOKIE_LENGTH:
        raise AuthenticationError("not signed in")
    body, _, mac = cookie.rpartition(".")
    parts = body.split(".")
    if len(parts) != 3 or not key.matches("session", body, mac):
        raise AuthenticationError("not signed in")
    row = session.get(ConsoleSession, int(parts[0]))
    if row is None or not hmac.compare_digest(row.secret_hash, _digest(parts[2])):
        raise AuthenticationError("not signed in")
    if row.ended_at is not None:
        raise AuthenticationError("this session has ended: sign in again", session_id=row.id, why=row.ended_why)
    if row.expires_at <= now:
        raise AuthenticationError("the session has expired: sign in again")
    principal = authenticate_token_id(session, row.token_id)
    if not may_use_console(principal):
        raise AuthenticationError("not signed in")
    return OpenedSession(principal, cookie, row.expires_at, key.mac("csrf", cookie), row.id)


def close_session(session: Session, opened: OpenedSession, *, now: dt.datetime) -> None:
    """End ``opened`` server-side and audit it, then commit: its cookie, replayed, opens nothing."""
    begin_write(session)
    if end_sessions(session, why="signed-out", now=now, session_id=opened.session_id):
        audit.append(session, actor=opened.principal.name, action="console.signed_out",
                     subject=f"principal/{opened.principal.name}", details={"session_id": opened.session_id})
    session.commit()


KEPT_AFTER_END = dt.timedelta(days=1)
"""How long a session's row outlives its end or expiry (what ended it stays readable for a day)."""


def prune(session: Session, *, now: dt.datetime) -> int:
    """Delete the rows of sessions that ended or expired over :data:`KEPT_AFTER_END` ago, in the caller's
    transaction; return how many. Every sign-in prunes, so the table holds the sessions of about a day
    of sign-ins plus the live ones, however long the registry runs."""
    cutoff = now - KEPT_AFTER_END
    return session.execute(delete(ConsoleSession).where(
        or_(ConsoleSession.ended_at < cutoff, ConsoleSession.expires_at < cutoff))).rowcount


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def check_csrf(key: SessionKey, bound_to: str | None, submitted: str | None, *, purpose: str = "csrf") -> None:
    """Raise CsrfError unless ``submitted`` is the CSRF token bound to ``bound_to`` (a cookie value).

    Raises:
        CsrfError: a missing or wrong token.
    """
    if not bound_to or not submitted or not key.matches(purpose, bound_to, submitted):
        raise CsrfError("this form has expired or did not come from this console: reload the page and try again")


def new_sign_in_nonce() -> str:
    return secrets.token_hex(16)
