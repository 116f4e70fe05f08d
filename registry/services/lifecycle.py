"""The one module that moves a version between states, and the one that knows the order of stages.

A stage's work (``registry/services/stages/``) returns an outcome (:mod:`registry.domain.outcomes`)
and never moves the version; :func:`conclude` turns the outcome into the move: ``Passed`` to the next
stage that applies (:func:`registry.domain.stages.next_stage`, skipping an optional stage whose work
does not apply), ``Failed`` to ``failed``, ``Pending`` nowhere. Entering a stage (:func:`advance`)
checks the move against the state machine, appends the audit event the move is named by, starts the
stage's work from ``_WORK`` and concludes with what the work returned, all in the caller's
transaction: when the caller commits, the state, its event and its jobs exist together, and when it
does not, none of them do. People's decisions and terminal moves have their own functions
(:func:`approve`, :func:`reject`, :func:`revoke`, :func:`fail`); a dead job fails its version through
:func:`fail_version`, from the stages the table says may fail.

The ports (clock, policy engine, blob store, signer, queue) come in as one object, built by bootstrap,
and with them what approval sets off (``Ports.on_approved``: each distribution channel's reaction, registered
by bootstrap), so this module names no channel.

Usage (a sketch, not run as a doctest)::

    lifecycle.conclude(session, version, scanning.judge(session, version), ports)
    session.commit()
"""

from __future__ import annotations

from typing import Any, Callable

from sqlalchemy.orm import Session, sessionmaker

from registry import audit
from registry.db.models import Version
from registry.db.session import begin_write
from registry.domain.errors import InvalidStateError, RegistryError
from registry.domain.outcomes import Failed, Outcome, Passed, Pending
from registry.domain.stages import FAILABLE, Work, next_stage, stage_of
from registry.domain.states import VersionState, event_for
from registry.services.loaders import lock_version_unchecked, version_ref
from registry.services.ports import Ports
from registry.services.stages import approval, evaluating, mirroring, scanning, sealed

S = VersionState
Start = Callable[[Session, Version, Ports], Outcome]

_WORK: dict[Work, Start] = {
    Work.MIRROR: mirroring.start,
    Work.MOVE_ON: sealed.start,
    Work.SCAN: scanning.start,
    Work.EVALUATE: evaluating.start,
    Work.JUDGE: approval.start,
}
"""Each kind of stage work (``registry.domain.stages.Work``) -> the function that starts it."""

_APPLIES: dict[Work, Callable[[Session, Version, Ports], bool]] = {
    Work.EVALUATE: evaluating.applies,
}
"""Whether an optional stage's work applies to a version."""


def _move(session: Session, version: Version, target: VersionState, actor: str, details: dict[str, Any]) -> None:
    """Check the move, write the state and append the move's audit event (in the caller's transaction).

    Raises:
        InvalidStateError: the state machine has no such move.
    """
    action = event_for(VersionState(version.state), target)
    version.state = target.value
    tenant = version.model.tenant.name
    # The state entered is part of every move's event: the event stream tells "scanned, now awaiting
    # approval" from "scanned, now evaluating" by it (registry.domain.events).
    audit.append(session, actor=actor, action=action, subject=version_ref(version), tenant=tenant,
                 details={**details, "state": target.value})


def advance(session: Session, version: Version, target: VersionState, actor: str, details: dict[str, Any],
            ports: Ports) -> None:
    """Move ``version`` to ``target``: check the move, append its audit event, start the new stage's work
    and conclude with its outcome.

    Everything happens in the caller's transaction; the caller commits (or rolls back, and then
    none of it happened). Set what the new state records (a seal's manifest) before calling, so the
    work it starts sees it.

    Args:
        actor: who moves it (a principal's name, or ``system`` for the pipeline).
        details: the audit event's details.

    Raises:
        InvalidStateError: the state machine has no such move.
    """
    _move(session, version, target, actor, details)
    if target == S.APPROVED:
        _react_to_approval(session, version, ports)
    stage = stage_of(target)
    if stage is not None and stage.work is not None:
        conclude(session, version, _WORK[stage.work](session, version, ports), ports)


def next_state(session: Session, version: Version, ports: Ports) -> VersionState:
    """Where ``version`` goes when its current stage passes it (optional stages that do not apply skipped)."""

    def applies(state: VersionState) -> bool:
        stage = stage_of(state)
        check = _APPLIES.get(stage.work) if stage is not None and stage.work is not None else None
        return check(session, version, ports) if check is not None else True

    return next_stage(VersionState(version.state), applies)


def conclude(session: Session, version: Version, outcome: Outcome, ports: Ports, *,
             actor: str = "system") -> VersionState:
    """What the current stage's work ended in, turned into the move: passed to the next stage that
    applies, failed to ``failed``, pending nowhere.

    Returns:
        The state the version is in afterwards.

    Raises:
        InvalidStateError: the version is in no stage (it was decided on, failed or revoked).
    """
    if isinstance(outcome, Pending):
        return VersionState(version.state)
    if isinstance(outcome, Failed):
        fail(session, version, outcome, actor=actor)
        return S.FAILED
    assert isinstance(outcome, Passed), outcome
    target = next_state(session, version, ports)
    advance(session, version, target, actor, dict(outcome.details), ports)
    return target


def fail(session: Session, version: Version, failure: Failed, *, actor: str = "system") -> None:
    """Fail ``version`` with ``failure``'s reason and detail recorded (event ``version.failed``).

    Raises:
        InvalidStateError: the version is past the stages that may fail.
    """
    if VersionState(version.state) not in FAILABLE:
        raise InvalidStateError(f"a {version.state} version cannot become failed", state=version.state,
                                target=S.FAILED.value)
    version.failure_reason, version.failure_detail = failure.reason, failure.detail
    _move(session, version, S.FAILED, actor, failure.audit_details)


def fail_version(session_factory: sessionmaker[Session], version_id: int, error: RegistryError) -> bool:
    """The one way a dead job, or a job's lasting error, fails its version: unless it left the stages
    that may fail (``FAILABLE``), in its own transaction.

    Returns:
        Whether the version failed.
    """
    with session_factory() as session:
        begin_write(session)
        version = lock_version_unchecked(session, version_id)
        if version is None or VersionState(version.state) not in FAILABLE:
            return False
        fail(session, version, Failed.from_error(error))
        session.commit()
        return True


def approve(session: Session, version: Version, actor: str, details: dict[str, Any], ports: Ports) -> None:
    """A version awaiting approval becomes ``approved`` (the judgement that allows it is in ``details``), and
    what approval sets off (``ports.on_approved``) happens in the same transaction."""
    _move(session, version, S.APPROVED, actor, details)
    _react_to_approval(session, version, ports)


def _react_to_approval(session: Session, version: Version, ports: Ports) -> None:
    # Each channel's reaction (an OCI build queued, say) commits with the approval or not at all.
    for react in ports.on_approved:
        react(session, version, ports)


def reject(session: Session, version: Version, actor: str, details: dict[str, Any]) -> None:
    """A person rejects a version awaiting approval: it becomes ``rejected``."""
    _move(session, version, S.REJECTED, actor, details)


def revoke(session: Session, version: Version, actor: str, details: dict[str, Any]) -> None:
    """A sealed or later version becomes ``revoked`` (set ``revoked_at``/``_by``/``revoke_reason`` first)."""
    _move(session, version, S.REVOKED, actor, details)
