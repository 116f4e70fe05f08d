"""The version state machine.

``submitted → mirroring → sealed → scanning → evaluating → awaiting_approval → approved``, or
``failed`` (with a reason) from any state before approval, ``rejected`` from awaiting approval, and
``revoked`` from any state after sealing. Every transition is checked here and nowhere else.
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
_PRE_APPROVAL = {S.SUBMITTED, S.MIRRORING, S.SEALED, S.SCANNING, S.EVALUATING, S.AWAITING_APPROVAL}
TRANSITIONS: dict[VersionState, frozenset[VersionState]] = {
    S.SUBMITTED: frozenset({S.MIRRORING, S.FAILED}),
    S.MIRRORING: frozenset({S.SEALED, S.FAILED}),
    S.SEALED: frozenset({S.SCANNING, S.FAILED, S.REVOKED}),
    S.SCANNING: frozenset({S.EVALUATING, S.AWAITING_APPROVAL, S.FAILED, S.REVOKED}),
    S.EVALUATING: frozenset({S.AWAITING_APPROVAL, S.FAILED, S.REVOKED}),
    S.AWAITING_APPROVAL: frozenset({S.APPROVED, S.REJECTED, S.FAILED, S.REVOKED}),
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
