"""The one way a version changes state: :func:`advance`.

``advance`` checks the move against the state machine (:mod:`registry.domain.states`), appends the
audit event the move is named by, and starts the work the new state needs, all in the caller's
transaction: when the caller commits, the state, its event and its jobs exist together, and when it
does not, none of them do. ``STAGES`` is the one table from a state to the work entering it starts;
a stage is added by adding a row (and its job kind in :class:`registry.jobs.JobKind`).

Example:
    >>> advance(session, version, VersionState.SEALED, "system", {"files": 3})  # doctest: +SKIP
    >>> complete(session, version, "system", {"verdicts": {...}})  # to the next stage that applies
    >>> session.commit()  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from sqlalchemy.orm import Session

from registry import audit, jobs
from registry.db.models import Version
from registry.domain.states import VersionState, event_for, next_stage

S = VersionState
Work = Callable[[Session, Version], None]


def _always(session: Session, version: Version) -> bool:
    return True


def _no_work(session: Session, version: Version) -> None:
    return None


def tenant_of(version: Version) -> str:
    """Whose work the jobs of ``version`` are: claims are fair between tenants (:mod:`registry.jobs`)."""
    return version.model.tenant.name


def _queue_mirroring(session: Session, version: Version) -> None:
    """A job per file not stored yet; with every file stored already, sealing at once."""
    pending = [f for f in version.files if f.sha256 is None]
    for f in pending:
        jobs.enqueue_job(session, jobs.JobKind.MIRROR_FILE, {"file_id": f.id}, f.id, tenant=tenant_of(version))
    if not pending:
        queue_sealing(session, version)


def queue_sealing(session: Session, version: Version) -> None:
    """The work that ends mirroring: one ``seal_version`` job (queued once, however often asked)."""
    jobs.enqueue_job(session, jobs.JobKind.SEAL_VERSION, {"version_id": version.id}, version.id,
                     tenant=tenant_of(version))


def queue_resolving(session: Session, version: Version) -> None:
    """Retry resolving a submitted version whose upstream was unreachable (a ``resolve_version`` job)."""
    jobs.enqueue_job(session, jobs.JobKind.RESOLVE_VERSION, {"version_id": version.id}, version.id,
                     tenant=tenant_of(version))


def _start_scanning(session: Session, version: Version) -> None:
    advance(session, version, S.SCANNING, "system", {"files": len(version.files)})


def _queue_scans(session: Session, version: Version) -> None:
    """A ``scan_blob`` job per file without a cached result; with none to scan, decide at once."""
    from registry.services import scans

    if scans.queue_scans(session, version) == 0:
        scans.decide(session, version)


@dataclass(frozen=True, slots=True)
class Stage:
    """What entering a state means for a version.

    Attributes:
        start: queues the state's work, in the transaction that enters it.
        applies: whether a version passes through the state at all (skipped when not).
    """

    start: Work = _no_work
    applies: Callable[[Session, Version], bool] = _always


def _has_evals(session: Session, version: Version) -> bool:
    from registry.services import evals

    return evals.has_evals(session, version)


def _queue_evals(session: Session, version: Version) -> None:
    """A ``run_eval`` job per applicable suite (``registry.services.evals``); with none left pending, move on."""
    from registry.services import evals

    evals.queue_evals(session, version)


def _judge(session: Session, version: Version) -> None:
    """Judge a version awaiting approval at once, so what it still needs is known (and approve it if nothing)."""
    from registry.services import approvals

    approvals.judge_on_arrival(session, version)


STAGES: dict[VersionState, Stage] = {
    S.MIRRORING: Stage(start=_queue_mirroring),
    S.SEALED: Stage(start=_start_scanning),
    S.SCANNING: Stage(start=_queue_scans),
    # A version no suite applies to goes straight to approval.
    S.EVALUATING: Stage(start=_queue_evals, applies=_has_evals),
    S.AWAITING_APPROVAL: Stage(start=_judge),
}
"""State -> the work entering it starts. States without a row start no work."""


def advance(session: Session, version: Version, target: VersionState, actor: str,
            details: dict[str, Any]) -> None:
    """Move ``version`` to ``target``: check the move, append its audit event, start the new state's work.

    Everything happens in the caller's transaction; the caller commits (or rolls back, and then
    none of it happened). Set what the new state records (a failure's reason, a seal's manifest)
    before calling, so the work it starts sees it.

    Args:
        actor: who moves it (a principal's name, or ``system`` for the pipeline).
        details: the audit event's details.

    Raises:
        InvalidStateError: the state machine has no such move.
    """
    current = VersionState(version.state)
    action = event_for(current, target)
    version.state = target.value
    tenant = version.model.tenant.name
    # The state entered is part of every move's event: the event stream tells "scanned, now awaiting
    # approval" from "scanned, now evaluating" by it (registry.domain.events).
    audit.append(session, actor=actor, action=action,
                 subject=f"{tenant}/{version.model.name}@{version.number}", tenant=tenant,
                 details={**details, "state": target.value})
    STAGES.get(target, Stage()).start(session, version)


def next_state(session: Session, version: Version) -> VersionState:
    """Where ``version`` goes when its current stage's work is done (stages that do not apply skipped)."""
    return next_stage(VersionState(version.state),
                      lambda state: STAGES.get(state, Stage()).applies(session, version))


def complete(session: Session, version: Version, actor: str, details: dict[str, Any]) -> VersionState:
    """The current stage's work is done: advance to the next stage that applies.

    Returns:
        The state the version moved to.
    """
    target = next_state(session, version)
    advance(session, version, target, actor, details)
    return target
