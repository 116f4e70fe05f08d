"""Retention rules per model: which versions to keep, and deleting the others.

A rule keeps, of a model's versions not deleted yet: the newest ``keep_last``; every version an alias
points at (its main version or its canary); every version approved within ``approved_within_days``
(when set); and every version still in the pipeline (submitted to awaiting approval), which is
decided first. ``apply`` deletes the rest.

Deleting a version keeps its record: the row stays with its files, signature, scans, evals and
approvals, marked ``deleted_at``/``deleted_by``, and the audit event ``version.deleted`` is appended
to the chain (the earlier events of the version are never touched), so provenance questions about it
are still answered. It is shown in state ``deleted``, never released again (``VersionDeletedError``
for a manifest, ``RevisionNotFound`` on ``/hf``), an alias cannot be moved to it, its source may be submitted again, and
its blobs no longer count as referenced: garbage collection deletes those no other version, eval set or eval log uses,
after the grace period.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from registry import audit
from registry.auth import AuthenticatedPrincipal, Permission, require
from registry.clock import Clock
from registry.db.models import Alias, AuditEvent, RetentionRule, Version
from registry.db.session import begin_write, is_postgres
from registry.domain.errors import InvalidInputError
from registry.domain.stages import PIPELINE
from registry.domain.states import VersionState, event_for
from registry.services import loaders

APPROVED_EVENT = event_for(VersionState.AWAITING_APPROVAL, VersionState.APPROVED)
MAX_KEEP_LAST = 100_000
MAX_WINDOW_DAYS = 36_500


@dataclass(frozen=True)
class Plan:
    """What a rule does to a model now: the version numbers it keeps (and why) and deletes."""

    model: str
    keep: dict[int, str]
    delete: list[int]

    def as_dict(self) -> dict[str, object]:
        return {"model": self.model, "kept": [{"version": n, "reason": r} for n, r in sorted(self.keep.items())],
                "deleted": self.delete}


def rule_dict(model: str, rule: RetentionRule) -> dict[str, object]:
    return {"model": model, "keep_last": rule.keep_last, "approved_within_days": rule.approved_within_days,
            "updated_by": rule.updated_by, "updated_at": rule.updated_at.isoformat()}


def set_rule(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, *, keep_last: int,
             approved_within_days: int | None, clock: Clock) -> RetentionRule:
    """Set the model's rule (administrators of the tenant); audited as ``retention.set``. Nothing is
    deleted until ``apply``.

    Raises:
        PermissionDeniedError, TenantNotFoundError, ModelNotFoundError.
        InvalidInputError: ``keep_last`` below 1, or a window out of range.
    """
    require(principal, tenant, Permission.ADMIN)
    if not 1 <= keep_last <= MAX_KEEP_LAST:
        raise InvalidInputError(f"keep_last is between 1 and {MAX_KEEP_LAST}", field="keep_last")
    if approved_within_days is not None and not 0 <= approved_within_days <= MAX_WINDOW_DAYS:
        raise InvalidInputError(f"approved_within_days is between 0 and {MAX_WINDOW_DAYS}",
                                field="approved_within_days")
    begin_write(session)
    model = loaders.load_model_unchecked(session, tenant, name)
    rule = session.get(RetentionRule, model.id)
    if rule is None:
        rule = RetentionRule(model_id=model.id)
        session.add(rule)
    rule.keep_last, rule.approved_within_days = keep_last, approved_within_days
    rule.updated_by, rule.updated_at = principal.name, clock.now()
    audit.append(session, actor=principal.name, action="retention.set", subject=f"{tenant}/{name}",
                 tenant=tenant, details={"keep_last": keep_last, "approved_within_days": approved_within_days})
    session.commit()
    return rule


def show(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, *,
         clock: Clock) -> tuple[Plan, RetentionRule | None]:
    """The model's rule (None if it has none) and what ``apply`` would do now, for its readers.

    Raises:
        PermissionDeniedError, TenantNotFoundError, ModelNotFoundError.
    """
    require(principal, tenant, Permission.READ)
    model = loaders.load_model_unchecked(session, tenant, name)
    rule = session.get(RetentionRule, model.id)
    ref = f"{tenant}/{name}"
    if rule is None:
        return Plan(ref, {}, []), None
    live = list(session.scalars(select(Version).where(Version.model_id == model.id, Version.deleted_at.is_(None))
                                .order_by(Version.number.desc())))
    return _plan(session, ref, rule, live, clock.now()), rule


def rule_of(session: Session, tenant: str, name: str) -> RetentionRule | None:
    """The model's rule, unchecked (for a caller that has checked the principal)."""
    return session.get(RetentionRule, loaders.load_model_unchecked(session, tenant, name).id)


def apply(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, *, clock: Clock,
          dry_run: bool = False) -> Plan:
    """Delete the versions the model's rule does not keep (administrators of the tenant), in one
    transaction; with ``dry_run``, only say which. A model without a rule keeps every version.

    Raises:
        PermissionDeniedError, TenantNotFoundError, ModelNotFoundError.
    """
    require(principal, tenant, Permission.ADMIN)
    begin_write(session)
    model = loaders.load_model_unchecked(session, tenant, name)
    ref = f"{tenant}/{name}"
    rule = session.get(RetentionRule, model.id)
    if rule is None:
        session.rollback()
        return Plan(ref, {}, [])
    # Locked like a promotion locks its versions, so an alias cannot move to one being deleted.
    query = select(Version).where(Version.model_id == model.id, Version.deleted_at.is_(None)) \
        .order_by(Version.number.desc())
    if is_postgres(session):
        query = query.with_for_update()
    live = list(session.scalars(query))
    plan = _plan(session, ref, rule, live, clock.now())
    if dry_run or not plan.delete:
        session.rollback()
        return plan
    now = clock.now()
    by_number = {v.number: v for v in live}
    for number in plan.delete:
        version = by_number[number]
        version.deleted_at, version.deleted_by = now, principal.name
        audit.append(session, actor=principal.name, action="version.deleted", subject=f"{ref}@{number}",
                     tenant=tenant, details={"reason": "retention", "state": version.state,
                                             "manifest_digest": version.manifest_digest,
                                             "keep_last": rule.keep_last,
                                             "approved_within_days": rule.approved_within_days})
    session.commit()
    return plan


def _plan(session: Session, ref: str, rule: RetentionRule, live: list[Version], now: dt.datetime) -> Plan:
    keep: dict[int, str] = {}
    for version in live[: rule.keep_last]:
        keep[version.number] = "last"
    ids = [v.id for v in live]
    aliased = set()
    if ids:
        for main, canary in session.execute(
            select(Alias.version_id, Alias.canary_version_id)
            .where(or_(Alias.version_id.in_(ids), Alias.canary_version_id.in_(ids)))
        ):
            aliased.update({main, canary})
    approved_at: dict[int, dt.datetime] = {}
    if ids and rule.approved_within_days is not None:
        # When the version became approved: the audit event of that move, the record that cannot change.
        subjects = {f"{ref}@{v.number}": v.id for v in live if v.state == VersionState.APPROVED.value}
        if subjects:
            approved_at = {subjects[subject]: at for subject, at in session.execute(
                select(AuditEvent.subject, func.max(AuditEvent.at))
                .where(AuditEvent.action == APPROVED_EVENT, AuditEvent.subject.in_(list(subjects)))
                .group_by(AuditEvent.subject)
            ).tuples()}
    pipeline = {s.value for s in PIPELINE}
    for version in live:
        if version.number in keep:
            continue
        if version.id in aliased:
            keep[version.number] = "alias"
        elif version.state in pipeline:
            keep[version.number] = "in-pipeline"
        elif (rule.approved_within_days is not None and version.state == VersionState.APPROVED.value
              and version.id in approved_at
              and approved_at[version.id] >= now - dt.timedelta(days=rule.approved_within_days)):
            keep[version.number] = "approved-recently"
    delete = sorted(v.number for v in live if v.number not in keep)
    return Plan(ref, keep, delete)
