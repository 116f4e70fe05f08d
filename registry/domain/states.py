"""The version state machine.

``submitted → mirroring → sealed → scanning → evaluating → awaiting_approval → approved``, or
``failed`` (with a reason) from any state before approval, ``rejected`` from awaiting approval, and
``revoked`` from any state after sealing. Every transition is checked here and nowhere else, and each
has one audit action (:func:`event_for`). The order of the stages, the work each starts and what may
fail are the stage table's (:mod:`registry.domain.stages`).
"""

from __future__ import annotations

import enum

from registry.domain.errors import InvalidStateError


class VersionState(str, enum.Enum):
    SUBMITTED = "submitted"
    MIRRORING = "mirroring"
    SEALED = "sealed"
    SCANNING = "scanning"
    EVALUATING = "evaluating"
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    FAILED = "failed"
    REJECTED = "rejected"
    REVOKED = "revoked"


S = VersionState
TRANSITIONS: dict[VersionState, frozenset[VersionState]] = {
    S.SUBMITTED: frozenset({S.MIRRORING, S.FAILED}),
    S.MIRRORING: frozenset({S.SEALED, S.FAILED}),
    S.SEALED: frozenset({S.SCANNING, S.FAILED, S.REVOKED}),
    S.SCANNING: frozenset({S.EVALUATING, S.AWAITING_APPROVAL, S.FAILED, S.REVOKED}),
    S.EVALUATING: frozenset({S.AWAITING_APPROVAL, S.FAILED, S.REVOKED}),
    # A person's decision: rejected, never failed.
    S.AWAITING_APPROVAL: frozenset({S.APPROVED, S.REJECTED, S.REVOKED}),
    S.APPROVED: frozenset({S.REVOKED}),
    S.FAILED: frozenset(),
    S.REJECTED: frozenset(),
    S.REVOKED: frozenset(),
}
TERMINAL = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)
# A live version holds its source: submitting the same source and revision again returns it.
LIVE = frozenset(set(VersionState) - {S.FAILED, S.REJECTED, S.REVOKED})


def check_transition(current: str, target: VersionState) -> VersionState:
    """Return ``target`` if a version in ``current`` may move there, else raise InvalidStateError."""
    state = VersionState(current)
    if target not in TRANSITIONS[state]:
        raise InvalidStateError(
            f"a {state.value} version cannot become {target.value}", state=state.value, target=target.value
        )
    return target


# The audit action of a forward move names the work just finished (resolving, sealing, scanning).
_FORWARD_EVENTS = {
    (S.SUBMITTED, S.MIRRORING): "version.resolved",
    (S.MIRRORING, S.SEALED): "version.sealed",
    (S.SEALED, S.SCANNING): "version.scanning",
    (S.SCANNING, S.EVALUATING): "version.scanned",
    (S.SCANNING, S.AWAITING_APPROVAL): "version.scanned",
    (S.EVALUATING, S.AWAITING_APPROVAL): "version.evaluated",
}
# A move to an outcome is named after the outcome.
_OUTCOMES = frozenset({S.APPROVED, S.FAILED, S.REJECTED, S.REVOKED})


def event_for(current: VersionState, target: VersionState) -> str:
    """The audit action recorded when a version moves from ``current`` to ``target``.

    Raises:
        InvalidStateError: the move is not a transition of the state machine.

    Example:
        >>> event_for(VersionState.MIRRORING, VersionState.SEALED)
        'version.sealed'
    """
    check_transition(current.value, target)
    if target in _OUTCOMES:
        return f"version.{target.value}"
    return _FORWARD_EVENTS[(current, target)]


DELETED = "deleted"
"""What a version retention deleted is shown as, whatever state it had; its ``state`` column keeps that one."""


def shown_state(state: str, deleted: bool) -> str:
    """The state a version is shown in: ``deleted`` once retention deleted it, else its state."""
    return DELETED if deleted else state
