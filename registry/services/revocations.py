"""Revocation: a version that is never released again.

A revoked version keeps its rows (what it was, who revoked it, when, why), moves to ``revoked`` through
:func:`registry.services.lifecycle.revoke` (event ``version.revoked``), and from then on the
promotion policy refuses any alias move to it, and an alias still pointing at it does not resolve
(:class:`registry.domain.errors.RevokedError`, naming the version and the reason) until it is moved.
The approved adapter versions bound to it are no longer served either (revocation follows the binding):
the event names those of its tenant, and each gets an ``adapter.unservable`` event in its own tenant
(:mod:`registry.services.adapter_serving`). Every place still holding it gets a ``version.still_running`` event
(:mod:`registry.services.receipts`).

Who may revoke: administrators of the tenant, and its ``security`` approvers. A rescan that turns a
file unsafe revokes the approved versions holding it as the system (:func:`revoke_as_system`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from registry.auth import AuthenticatedPrincipal, Permission
from registry.clock import Clock
from registry.db.models import Alias, Version
from registry.db.session import begin_write
from registry.domain.errors import InvalidInputError, PermissionDeniedError
from registry.domain.text import MAX_COMMENT_LENGTH, validate_text
from registry.services import adapter_serving, lifecycle, receipts
from registry.services.loaders import load_model_unchecked, load_version_unchecked

REVOKING_CAPACITY = "security"
"""Approvers with this capacity in a tenant may revoke its versions (beside its administrators)."""


def may_revoke(principal: AuthenticatedPrincipal, tenant: str) -> bool:
    """Whether ``principal`` may revoke versions of ``tenant`` (its administrators and security approvers)."""
    return Permission.ADMIN in principal.permissions(tenant) or REVOKING_CAPACITY in principal.capacities(tenant)


def revoke(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, number: int,
           reason: str, *, clock: Clock) -> Version:
    """Revoke version ``number`` of ``tenant/name``, with a reason, in one transaction.

    Raises:
        PermissionDeniedError: the principal is neither an administrator nor a ``security`` approver
            of ``tenant``.
        InvalidInputError: an empty or bad reason.
        VersionNotFoundError: no such version.
        InvalidStateError: the version cannot be revoked (not sealed yet, failed, rejected, revoked).
    """
    if not may_revoke(principal, tenant):
        raise PermissionDeniedError(
            f"{principal.name!r} may not revoke in tenant {tenant!r}: administrators and "
            f"{REVOKING_CAPACITY} approvers may",
            principal=principal.name, tenant=tenant, permission="revoke")
    validate_text(reason, field="reason", max_length=MAX_COMMENT_LENGTH)
    if not reason.strip():
        raise InvalidInputError("a revocation needs a reason", field="reason")
    begin_write(session)
    model = load_model_unchecked(session, tenant, name)
    version = load_version_unchecked(session, model, number, lock=True)
    _revoke(session, version, principal.name, reason, clock, {})
    session.commit()
    session.refresh(version)
    return version


def revoke_as_system(session: Session, version: Version, reason: str, *, clock: Clock,
                     details: dict[str, Any]) -> None:
    """Revoke ``version`` as the registry itself (a rescan found it unsafe), in the caller's transaction.

    No principal is checked: the caller is a job acting for the system.
    """
    _revoke(session, version, "system", reason, clock, details)


def _revoke(session: Session, version: Version, actor: str, reason: str, clock: Clock,
            details: dict[str, Any]) -> None:
    pointing = sorted(session.scalars(select(Alias.name).where(
        or_(Alias.version_id == version.id, Alias.canary_version_id == version.id))))
    adapters = adapter_serving.bound_adapters(session, version)
    version.revoked_at, version.revoked_by, version.revoke_reason = clock.now(), actor, reason
    # The aliases still pointing at it are named: they stop resolving until someone moves them. So are the
    # adapters bound to it: revocation follows the binding, and nodes drop them with it.
    lifecycle.revoke(session, version, actor, {"reason": reason, "aliases": pointing,
                                               **adapter_serving.listed_in_revocation(version, adapters), **details})
    adapter_serving.after_base_revoked(session, version, adapters, actor, reason)
    # Every place still holding it is named at once, after the revocation in the stream (issue 36).
    receipts.alert_still_running(session, version, now=clock.now())
