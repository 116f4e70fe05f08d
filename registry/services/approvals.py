"""Approvals: people decide on a version, the approval policy says what their decisions add up to.

A version that reaches ``awaiting_approval`` is judged at once (that stage's work,
:mod:`registry.services.stages.approval`), so what it still needs is known before anyone looks. Each decision
(:func:`decide`) is checked by the rules of :mod:`registry.domain.approvals`, recorded, audited
and judged again in one transaction: the version becomes ``approved`` in the transaction in which
the policy is satisfied, and one ``reject`` rejects it (denying is always safe, so a reject needs no
policy to agree). Every judgement is stored with its policy bundle and input digests
(:func:`registry.services.policy.decide_approval`); :func:`evaluate` judges without storing anything,
and :func:`preview` judges a decision not made yet, so an approver learns what it would leave unmet
before making it. An approver may add file reviews to their own approval later (:func:`add_files`,
audited as ``version.approval.files-added``), which judges the version again.

The policy input is built from the database by the stage's ``approval_input_for``.

Usage (a sketch, not run as a doctest)::

    status = decide(session, principal, "acme", "tiny", 1, ApprovalRequest("approve", "security"),
                    ports=container.ports)
    status.state, [u["code"] for u in status.unmet]
    # ('awaiting_approval', ['approval.missing'])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError as SAIntegrityError
from sqlalchemy.orm import Session

from registry import audit
from registry.auth import AuthenticatedPrincipal, Permission, require
from registry.clock import Clock
from registry.db.models import Approval, Model, PolicyDecision, Tenant, Version
from registry.db.session import begin_write, is_postgres
from registry.domain import policy_input as pi
from registry.domain.approvals import check_approver, check_decision
from registry.domain.errors import (
    AlreadyDecidedError,
    CapacityNotHeldError,
    InvalidInputError,
    NoApprovalToAmendError,
    NotAwaitingApprovalError,
)
from registry.domain.files import MAX_PATH_LENGTH
from registry.domain.states import VersionState
from registry.domain.text import MAX_COMMENT_LENGTH, validate_text
from registry.policy import Decision, PolicyEngine
from registry.services import lifecycle
from registry.services.loaders import find_version_unchecked, version_ref
from registry.services.ports import Ports

# approval_input_for is read as approvals.approval_input_for too (what a decision is judged on).
from registry.services.stages.approval import (  # noqa: F401
    approval_input_for,
    approvals_of,
    digests,
    judge,
    policy_approvals,
    submitter_of,
)

MAX_NAMED_FILES = 1000
"""Most files one approval may name."""


@dataclass(frozen=True)
class ApprovalRequest:
    """A decision as a person makes it.

    Attributes:
        decision: ``approve`` or ``reject``.
        capacity: The capacity decided in (``security``, ``legal``, ``ml``...).
        comment: Why, for the record.
        files: Paths of the version the decision vouches for (suspicious files a security approval names).
    """

    decision: str
    capacity: str
    comment: str = ""
    files: tuple[str, ...] = ()

    def validate(self) -> None:
        """Raises: InvalidTextError (the comment), InvalidInputError (too many files named)."""
        validate_text(self.comment, field="comment", max_length=MAX_COMMENT_LENGTH)
        if len(self.files) > MAX_NAMED_FILES:
            raise InvalidInputError(f"an approval names at most {MAX_NAMED_FILES} files", field="files")
        for path in self.files:
            validate_text(path, field="files", max_length=MAX_PATH_LENGTH)


@dataclass(frozen=True)
class ApprovalStatus:
    """Where a version stands: its state, the latest stored judgement, the decisions so far.

    Attributes:
        met: Requirements unmet in an earlier judgement of the version and not in the latest.
    """

    ref: str
    state: str
    submitter: str | None
    decision: PolicyDecision | None
    unmet: list[dict[str, Any]]
    met: list[dict[str, Any]]
    approvals: list[Approval] = field(default_factory=list)


# --- judging ---------------------------------------------------------------------------------------


def _approve_if_allowed(session: Session, version: Version, decision: Decision, actor: str, ports: Ports) -> None:
    """The version becomes approved in the transaction whose judgement allows it."""
    if decision.allowed:
        lifecycle.approve(session, version, actor, digests(decision), ports)


def _lock_version(session: Session, tenant: str, name: str, number: int) -> Version:
    version = find_version_unchecked(session, tenant, name, number)
    if is_postgres(session):
        # Decisions on one version are judged one after the other: two approvals at once each see the other.
        session.refresh(version, with_for_update=True)
    return version


def decide(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, number: int,
           request: ApprovalRequest, *, ports: Ports) -> ApprovalStatus:
    """Record ``principal``'s decision on a version, judge it, and approve or reject it if that is the
    outcome.

    Args:
        ports: the policy engine that judges, the clock of the decision, and what approval sets off.

    Raises:
        PermissionDeniedError: the principal may not approve in ``tenant``.
        CapacityNotHeldError: they are no approver in ``request.capacity`` there.
        SeparationOfDutiesError: they submitted the version.
        NotAwaitingApprovalError: the version is not awaiting approval.
        AlreadyDecidedError: they decided on it before.
        InvalidInputError: a bad decision, comment, or a file the version does not hold.
    """
    require(principal, tenant, Permission.APPROVE)
    check_approver(principal=principal.name, capacity=request.capacity, held=principal.capacities(tenant),
                   decision=request.decision)
    request.validate()
    begin_write(session)
    version = _lock_version(session, tenant, name, number)
    ref = version_ref(version)
    check_decision(principal=principal.name, submitter=submitter_of(session, version), state=version.state,
                   decided={a.principal.name for a in approvals_of(session, version)})
    paths = {f.path for f in version.files}
    unknown = sorted(set(request.files) - paths)
    if unknown:
        raise InvalidInputError(f"{ref} has no file {unknown[0]!r}", field="files", files=unknown[:20])
    now = ports.clock.now()
    session.add(Approval(version_id=version.id, principal_id=principal.id, capacity=request.capacity,
                         decision=request.decision, comment=request.comment, files=sorted(set(request.files)),
                         at=now))
    session.flush()
    judged = judge(session, version, ports.policy, now)
    audit.append(session, actor=principal.name, action=f"version.approval.{request.decision}", subject=ref,
                 tenant=tenant, details={"capacity": request.capacity, "files": sorted(set(request.files)),
                                         "comment": request.comment, "outcome": judged.outcome,
                                         "unmet": [u["code"] for u in judged.unmet], **digests(judged)})
    if request.decision == "reject":
        lifecycle.reject(session, version, principal.name, {"capacity": request.capacity, **digests(judged)})
    else:
        _approve_if_allowed(session, version, judged, principal.name, ports)
    try:
        session.commit()
    except SAIntegrityError:
        # The same person's other decision committed first (the unique constraint).
        session.rollback()
        raise AlreadyDecidedError(
            f"{principal.name} has decided on this version already: one person counts once",
            principal=principal.name) from None
    return _status(session, version)


@dataclass(frozen=True)
class Preview:
    """What the policy would say once a decision were recorded (:func:`preview`).

    Attributes:
        decision: The policy's judgement of the version with the decision added (nothing is stored).
        yours: The unmet requirements naming the decision's capacity: what this decision could still
            satisfy (a suspicious file a security approval does not name) but would leave unmet.
    """

    ref: str
    state: str
    decision: Decision
    yours: list[dict[str, Any]]


def _check_files(ref: str, version: Version, files: tuple[str, ...]) -> None:
    unknown = sorted(set(files) - {f.path for f in version.files})
    if unknown:
        raise InvalidInputError(f"{ref} has no file {unknown[0]!r}", field="files", files=unknown[:20])


def _own_approval(session: Session, principal: AuthenticatedPrincipal, version: Version) -> Approval:
    """The principal's approval of ``version`` (the one decision they may add file reviews to)."""
    mine = [a for a in approvals_of(session, version) if a.principal_id == principal.id]
    if not mine or mine[0].decision != "approve":
        raise NoApprovalToAmendError(
            f"{principal.name} has not approved {version_ref(version)}: "
            "only your own approval takes file reviews",
            principal=principal.name)
    return mine[0]


def _preview(session: Session, version: Version, engine: PolicyEngine, capacity: str,
             decisions: list[pi.Approval]) -> Preview:
    judged = engine.approval(dict(approval_input_for(session, version, engine, approvals=decisions)))
    return Preview(version_ref(version), version.state, judged,
                   [u for u in judged.unmet if u.get("capacity") == capacity])


def preview(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, number: int,
            request: ApprovalRequest, *, engine: PolicyEngine, clock: Clock) -> Preview:
    """What would remain unmet if ``principal`` made ``request`` now; stores and changes nothing.

    The same checks as :func:`decide` come first, so a preview that answers is a decision that may be made.

    Raises:
        The errors of :func:`decide`.
    """
    require(principal, tenant, Permission.APPROVE)
    check_approver(principal=principal.name, capacity=request.capacity, held=principal.capacities(tenant),
                   decision=request.decision)
    request.validate()
    version = find_version_unchecked(session, tenant, name, number)
    check_decision(principal=principal.name, submitter=submitter_of(session, version), state=version.state,
                   decided={a.principal.name for a in approvals_of(session, version)})
    _check_files(version_ref(version), version, request.files)
    extra = pi.Approval(principal.name, request.capacity, request.decision, clock.now(),
                        tuple(sorted(set(request.files))))
    return _preview(session, version, engine, request.capacity, [*policy_approvals(session, version), extra])


def _amendable(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, number: int,
               files: tuple[str, ...]) -> tuple[Version, Approval]:
    """The version (locked) and the principal's approval of it that ``files`` may be added to."""
    require(principal, tenant, Permission.APPROVE)
    if not principal.capacities(tenant):
        # Before the version is read, as for a decision: the refusal says nothing of what exists.
        raise CapacityNotHeldError(f"{principal.name} is an approver in no capacity in this tenant",
                                   principal=principal.name, held=[])
    ApprovalRequest("approve", "", files=files).validate()
    if not files:
        raise InvalidInputError("name at least one file to add to your approval", field="files")
    version = _lock_version(session, tenant, name, number)
    if version.state != VersionState.AWAITING_APPROVAL.value:
        raise NotAwaitingApprovalError(f"the version is {version.state}, not awaiting approval",
                                       state=version.state)
    approval = _own_approval(session, principal, version)
    # Whoever no longer holds the capacity they approved in may not add to what it vouches for.
    check_approver(principal=principal.name, capacity=approval.capacity, held=principal.capacities(tenant),
                   decision="approve")
    _check_files(version_ref(version), version, files)
    return version, approval


def add_files(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, number: int,
              files: tuple[str, ...], *, ports: Ports) -> ApprovalStatus:
    """Add file reviews (paths the approval vouches for) to ``principal``'s own earlier approval, audit it as
    ``version.approval.files-added``, and judge the version again (it may become approved).

    Args:
        files: Paths of the version; those the approval names already are kept once.

    Raises:
        PermissionDeniedError: the principal may not approve in ``tenant``.
        NotAwaitingApprovalError: the version is not awaiting approval.
        NoApprovalToAmendError: the principal has no approval of the version (none, or a reject).
        CapacityNotHeldError: they no longer hold the capacity they approved in.
        InvalidInputError: no file, too many, or a file the version does not hold.
    """
    begin_write(session)
    version, approval = _amendable(session, principal, tenant, name, number, files)
    ref = version_ref(version)
    added = sorted(set(files) - set(approval.files))
    # A new list: the JSON column does not see changes made in place.
    approval.files = sorted(set(approval.files) | set(files))
    session.flush()
    now = ports.clock.now()
    judged = judge(session, version, ports.policy, now)
    audit.append(session, actor=principal.name, action="version.approval.files-added", subject=ref,
                 tenant=tenant, details={"capacity": approval.capacity, "added": added,
                                         "files": approval.files, "outcome": judged.outcome,
                                         "unmet": [u["code"] for u in judged.unmet], **digests(judged)})
    _approve_if_allowed(session, version, judged, principal.name, ports)
    session.commit()
    return _status(session, version)


def status(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str,
           number: int) -> ApprovalStatus:
    """The version's state, what the latest stored judgement left unmet and met, and the decisions so far.

    Raises:
        PermissionDeniedError: the principal may not read in ``tenant``.
    """
    require(principal, tenant, Permission.READ)
    return _status(session, find_version_unchecked(session, tenant, name, number))


def evaluate(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, number: int, *,
             engine: PolicyEngine) -> tuple[Version, Decision]:
    """Judge the version as it stands now with the current policy, storing and changing nothing.

    Raises:
        PermissionDeniedError: the principal may not read in ``tenant``.
        InvalidStateError: the version's files are not all stored yet.
    """
    require(principal, tenant, Permission.READ)
    version = find_version_unchecked(session, tenant, name, number)
    return version, engine.approval(dict(approval_input_for(session, version, engine)))


MAX_QUEUE = 200
"""Most versions one look at the approval queue lists."""


@dataclass(frozen=True)
class Awaiting:
    """A version in someone's approval queue, and what it still needs of them."""

    version: Version
    status: ApprovalStatus
    yours: list[dict[str, Any]]
    """The unmet requirements naming a capacity the person holds (all of them, for an administrator)."""


def awaiting(session: Session, principal: AuthenticatedPrincipal, *, limit: int = 100) -> list[Awaiting]:
    """Versions awaiting approval, oldest first, in the tenants where ``principal`` approves, that still need
    a capacity they hold (an administrator sees every one); each with its unmet requirements.

    Raises:
        InvalidInputError: ``limit`` outside 1..MAX_QUEUE.
    """
    if not 1 <= limit <= MAX_QUEUE:
        raise InvalidInputError(f"limit must be 1 to {MAX_QUEUE}", field="limit", value=str(limit))
    query = (select(Version).join(Model, Model.id == Version.model_id).join(Tenant, Tenant.id == Model.tenant_id)
             .where(Version.state == VersionState.AWAITING_APPROVAL.value))
    if not principal.is_admin:
        tenants = [t for t in principal.roles if Permission.APPROVE in principal.permissions(t)]
        query = query.where(Tenant.name.in_(tenants))
    out = []
    # Bounded: at most MAX_QUEUE * 4 versions are judged per look, however long the queue.
    for version in session.scalars(query.order_by(Version.created_at, Version.id).limit(limit * 4)):
        s = _status(session, version)
        held = principal.capacities(version.model.tenant.name)
        yours = s.unmet if principal.is_admin else [u for u in s.unmet if u.get("capacity") in held]
        if yours:
            out.append(Awaiting(version, s, yours))
        if len(out) == limit:
            break
    return out


def _key(requirement: dict[str, Any]) -> tuple[str, str, str]:
    return requirement["code"], str(requirement.get("capacity")), str(requirement.get("path", ""))


def _status(session: Session, version: Version) -> ApprovalStatus:
    decisions = list(session.scalars(select(PolicyDecision).where(
        PolicyDecision.version_id == version.id, PolicyDecision.kind == "approval",
    ).order_by(PolicyDecision.id)))
    latest = decisions[-1] if decisions else None
    unmet = list(latest.unmet) if latest else []
    now_unmet = {_key(u) for u in unmet}
    met: dict[tuple[str, str, str], dict[str, Any]] = {}
    for d in decisions[:-1]:
        for u in d.unmet:
            if _key(u) not in now_unmet and u["code"] != "policy.error":
                met.setdefault(_key(u), u)
    return ApprovalStatus(ref=version_ref(version), state=version.state,
                          submitter=submitter_of(session, version), decision=latest, unmet=unmet,
                          met=list(met.values()),
                          approvals=approvals_of(session, version))


MAX_REJUDGED = 500
"""Most versions one pass of :func:`rejudge_awaiting` judges again (the next pass takes the rest)."""


def rejudge_awaiting(session: Session, *, ports: Ports) -> list[str]:
    """Judge again every version awaiting approval whose latest judgement used another policy bundle.

    A version blocked by an eval threshold (or any rule of the policy data) waits with the approvals it
    has; when the policy data changes, this judges it under the new bundle, so the approvals already
    given apply and a too-strict threshold is mended by policy, not by resubmitting. Workers call it
    when they start and then every few minutes; it stores each judgement like any other.

    Returns:
        The versions judged again (``tenant/model@number``).
    """
    engine = ports.policy
    latest = (select(PolicyDecision.version_id, func.max(PolicyDecision.id).label("id"))
              .where(PolicyDecision.kind == "approval").group_by(PolicyDecision.version_id).subquery())
    stale = (select(Version.id).join(latest, latest.c.version_id == Version.id, isouter=True)
             .join(PolicyDecision, PolicyDecision.id == latest.c.id, isouter=True)
             .where(Version.state == VersionState.AWAITING_APPROVAL.value,
                    (PolicyDecision.bundle_digest.is_(None)) | (PolicyDecision.bundle_digest != engine.bundle_digest))
             .order_by(Version.id).limit(MAX_REJUDGED))
    judged = []
    for version_id in list(session.scalars(stale)):
        begin_write(session)
        version = session.get(Version, version_id)
        if is_postgres(session):
            session.refresh(version, with_for_update=True)
        if version.state != VersionState.AWAITING_APPROVAL.value:
            session.rollback()
            continue
        decision = judge(session, version, engine, ports.clock.now())
        audit.append(session, actor="system", action="version.rejudged", subject=version_ref(version),
                     tenant=version.model.tenant.name,
                     details={"outcome": decision.outcome, "unmet": [u["code"] for u in decision.unmet],
                              **digests(decision)})
        _approve_if_allowed(session, version, decision, "system", ports)
        session.commit()
        judged.append(version_ref(version))
    return judged
