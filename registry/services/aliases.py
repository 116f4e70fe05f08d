"""Aliases: point a name of a model at an approved version (with a canary), roll it back, resolve it.

Every move (promote or rollback) is judged by the promotion policy (``policies/promotion.rego``,
through :func:`registry.services.policy.decide_promotion`, which stores the decision with its bundle
and input digests) and, when allowed, changes the alias, appends its history row and its audit event
in one transaction (with an ``adapter.unservable`` event for each adapter alias of the same name the
move leaves unservable, :mod:`registry.services.adapter_serving`). A denied move stores only the
decision. The rules themselves (alias values, resolution, which move a rollback undoes) are pure, in
:mod:`registry.domain.aliases`.

Who may move an alias is the policy's to say; the service first requires the ``approve`` permission
in the tenant (admins hold it), because only approvers carry the capacities the policy reads, so a
caller with no say in the tenant learns nothing about its models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry import audit
from registry.auth import AuthenticatedPrincipal, Permission, require
from registry.clock import Clock
from registry.db.models import Alias, AliasMove, Model, Tenant, Version
from registry.db.session import begin_write, is_postgres
from registry.domain import aliases as rules
from registry.domain.errors import (
    AliasNotFoundError,
    PermissionDeniedError,
    PromotionDeniedError,
    TenantNotFoundError,
    VersionDeletedError,
)
from registry.domain.policy_input import promotion_input
from registry.domain.states import VersionState
from registry.domain.text import MAX_COMMENT_LENGTH, validate_text
from registry.policy import PolicyEngine
from registry.services import adapter_serving, loaders, units
from registry.services import policy as policy_service
from registry.services.stages import evaluating


@dataclass(frozen=True)
class Resolved:
    """What an alias resolves to for a tenant: the version row, and whether through the canary."""

    version: Version
    canary: bool
    for_tenant: str


def promote(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, alias: str,
            target: rules.AliasTarget, *, comment: str = "", policy: PolicyEngine, clock: Clock) -> Alias:
    """Point ``alias`` of ``tenant/name`` at ``target`` (created if need be), if policy allows.

    Pointing it at what it points at already changes nothing and records no move.

    Raises:
        PermissionDeniedError: the principal holds no ``approve`` permission in ``tenant``.
        InvalidInputError: a bad alias name or comment.
        VersionNotFoundError: a version of the target does not exist.
        PromotionDeniedError: the policy refused (a version not approved, a principal without the
            capacity the alias needs); the decision is stored.
    """
    require(principal, tenant, Permission.APPROVE)
    rules.validate_alias_name(alias)
    validate_text(comment, field="comment", max_length=MAX_COMMENT_LENGTH)
    begin_write(session)
    model = loaders.load_model_unchecked(session, tenant, name)
    row = _alias_row(session, model, alias, lock=True)
    return _move(session, principal, model, alias, row, target, rules.Action.PROMOTE, comment, policy, clock)


def rollback(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, alias: str, *,
             comment: str = "", policy: PolicyEngine, clock: Clock) -> Alias:
    """Move ``alias`` back to what it pointed at before its newest move not undone yet, in one call.

    Judged by the promotion policy like a promote (the target must still be approved).

    Raises:
        PermissionDeniedError: the principal holds no ``approve`` permission in ``tenant``.
        AliasNotFoundError: no such alias.
        NothingToRollBackError: nothing before (see :func:`registry.domain.aliases.rollback_target`).
        PromotionDeniedError: the policy refused; the decision is stored.
    """
    require(principal, tenant, Permission.APPROVE)
    rules.validate_alias_name(alias)
    validate_text(comment, field="comment", max_length=MAX_COMMENT_LENGTH)
    begin_write(session)
    model = loaders.load_model_unchecked(session, tenant, name)
    row = _alias_row(session, model, alias, lock=True)
    if row is None:
        raise AliasNotFoundError(f"{tenant}/{name}", alias)
    target = rules.rollback_target(f"{tenant}/{name}", alias, [_move_of(m) for m in row.history])
    return _move(session, principal, model, alias, row, target, rules.Action.ROLLBACK, comment, policy, clock)


def list_aliases(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str) -> list[Alias]:
    """Every alias of ``tenant/name``, by name, each with its history (oldest first)."""
    require(principal, tenant, Permission.READ)
    model = loaders.load_model_unchecked(session, tenant, name)
    return list(session.scalars(select(Alias).where(Alias.model_id == model.id).order_by(Alias.name)))


def resolve(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, alias: str,
            for_tenant: str | None = None) -> Resolved:
    """The version ``alias`` gives a request served for ``for_tenant`` (default: the model's tenant).

    Readers and serving nodes (``fetch``) of the tenant may resolve.

    Raises:
        PermissionDeniedError: neither ``read`` nor ``fetch`` in ``tenant``.
        AliasNotFoundError: no such alias.
        RevokedError: the version this tenant gets is revoked (naming it and the reason).
        TenantNotFoundError: ``for_tenant`` names no tenant.
    """
    if not {Permission.READ, Permission.FETCH} & principal.permissions(tenant):
        raise PermissionDeniedError(f"{principal.name!r} may neither read nor fetch in tenant {tenant!r}",
                                    principal=principal.name, tenant=tenant, permission="fetch")
    rules.validate_alias_name(alias)
    for_tenant = for_tenant or tenant
    if for_tenant != tenant and session.scalar(select(Tenant.id).where(Tenant.name == for_tenant)) is None:
        # As for manifests: an answer for a tenant nobody holds would tell which canary it would get.
        raise TenantNotFoundError(for_tenant)
    model = loaders.load_model_unchecked(session, tenant, name)
    row = _alias_row(session, model, alias)
    if row is None:
        raise AliasNotFoundError(f"{tenant}/{name}", alias)
    versions_by_number = {v.number: v for v in (row.version, row.canary_version) if v is not None}
    revoked = {n: v.revoke_reason or "revoked" for n, v in versions_by_number.items()
               if v.state == VersionState.REVOKED.value}
    found = rules.resolve(f"{tenant}/{name}", alias, target_of(row), for_tenant, revoked)
    return Resolved(versions_by_number[found.version], found.canary, for_tenant)


def target_of(row: Alias) -> rules.AliasTarget:
    """An alias row's value as the domain sees it."""
    canary = None
    if row.canary_version is not None:
        canary = rules.Canary(row.canary_version.number, frozenset(row.canary_tenants))
    return rules.AliasTarget(row.version.number, canary)


def canary_doc(target: rules.AliasTarget | None) -> dict[str, Any] | None:
    """A target's canary as stored in history and shown: ``{"version", "tenants"}`` (tenants sorted)."""
    if target is None or target.canary is None:
        return None
    return {"version": target.canary.version, "tenants": sorted(target.canary.tenants)}


# --- inside -------------------------------------------------------------------------------------


def _alias_row(session: Session, model: Model, alias: str, *, lock: bool = False) -> Alias | None:
    query = select(Alias).where(Alias.model_id == model.id, Alias.name == alias)
    if lock and is_postgres(session):
        query = query.with_for_update()
    return session.scalar(query)


def _target_from(doc: dict[str, Any] | None, version: int | None) -> rules.AliasTarget | None:
    if version is None:
        return None
    canary = rules.Canary(doc["version"], frozenset(doc["tenants"])) if doc else None
    return rules.AliasTarget(version, canary)


def _move_of(row: AliasMove) -> rules.Move:
    after = _target_from(row.to_canary, row.to_version)
    assert after is not None
    return rules.Move(rules.Action(row.action), _target_from(row.from_canary, row.from_version), after)


def _move(session: Session, principal: AuthenticatedPrincipal, model: Model, alias: str, row: Alias | None,
          target: rules.AliasTarget, action: rules.Action, comment: str, policy: PolicyEngine,
          clock: Clock) -> Alias:
    """Judge the move by policy; if allowed, move, record history and audit, and commit."""
    tenant = model.tenant.name
    ref = f"{tenant}/{model.name}"
    main = loaders.load_version_unchecked(session, model, target.version, lock=True)
    canary = (loaders.load_version_unchecked(session, model, target.canary.version, lock=True)
              if target.canary else None)
    for version in (main, canary):
        if version is not None and version.deleted_at is not None:
            raise VersionDeletedError(ref, version.number)
    current = row.version if row is not None else None
    doc = promotion_input(
        principal=principal.name,
        # An administrator of the tenant (its admin role) administers its aliases too.
        is_admin=Permission.ADMIN in principal.permissions(tenant),
        capacities=principal.capacities(tenant), alias=alias,
        target=(main.number, main.state),
        canary=(canary.number, canary.state) if canary else None,
        current=(current.number, current.state) if current else None,
        evals=evaluating.policy_evals(session, main),
        baseline=evaluating.policy_baseline(session, main, alias),
        unit=units.policy_unit(session, main, current, f"alias:{alias}", evaluating.suite_prompts(
            session, evaluating.applicable_suites(session, main, policy)[0])),
        adapter_of=loaders.statement_binding(main),
    )
    decision = policy_service.decide_promotion(session, main, dict(doc), policy, clock.now())
    if not decision.allowed:
        # The refusal is a decision too: it is kept, and nothing else is written.
        session.commit()
        raise PromotionDeniedError(ref, alias, decision.unmet, bundle_digest=decision.bundle_digest,
                                   input_digest=decision.input_digest)
    before = target_of(row) if row is not None else None
    if before == target:
        session.commit()
        return row  # type: ignore[return-value]
    now = clock.now()
    if row is None:
        row = Alias(model_id=model.id, name=alias, version_id=main.id, canary_tenants=[], updated_by="",
                    updated_at=now)
        session.add(row)
    row.version_id, row.version = main.id, main
    row.canary_version_id = canary.id if canary else None
    row.canary_version = canary
    row.canary_tenants = sorted(target.canary.tenants) if target.canary else []
    row.updated_by, row.updated_at = principal.name, now
    session.flush()
    move = AliasMove(
        alias_id=row.id, action=action.value, at=now, actor=principal.name,
        from_version=before.version if before else None, from_canary=canary_doc(before),
        to_version=target.version, to_canary=canary_doc(target), comment=comment,
        bundle_digest=decision.bundle_digest, input_digest=decision.input_digest,
    )
    session.add(move)
    audit.append(session, actor=principal.name,
                 action="alias.promoted" if action is rules.Action.PROMOTE else "alias.rolled_back",
                 subject=f"{ref}@{alias}", tenant=tenant,
                 details={"from": before.version if before else None, "from_canary": canary_doc(before),
                          "to": target.version, "to_canary": canary_doc(target), "comment": comment,
                          "bundle_digest": decision.bundle_digest, "input_digest": decision.input_digest})
    # In the same transaction: an adapter alias this move leaves unservable is told on the event stream.
    adapter_serving.after_alias_move(session, model, alias, principal.name)
    session.commit()
    session.refresh(row)
    return row
