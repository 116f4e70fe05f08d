"""Who may decide on a version: the pure rules of an approval, checked before any is recorded.

In the order a caller is told: :func:`check_approver` (before the version is read, so a refusal says
nothing of what exists) wants the capacity to be one the principal approves in, in the version's
tenant; :func:`check_decision` keeps the submitter from deciding on their own version (separation of
duties), wants the version awaiting approval, and lets one person decide once per version. The policy
(``policies/approval.rego``) then says what the decisions add up to.

Example:
    >>> check_approver(principal="sam", capacity="security", held={"security"}, decision="approve")
    >>> check_decision(principal="sam", submitter="alice", state="awaiting_approval", decided=set())
    >>> check_decision(principal="alice", submitter="alice", state="awaiting_approval", decided=set())
    Traceback (most recent call last):
    ...
    registry.domain.errors.SeparationOfDutiesError: alice submitted this version and may not decide on it
"""

from __future__ import annotations

from typing import AbstractSet

from registry.domain.errors import (
    AlreadyDecidedError,
    CapacityNotHeldError,
    InvalidInputError,
    NotAwaitingApprovalError,
    SeparationOfDutiesError,
)
from registry.domain.policy_input import DECISIONS
from registry.domain.states import VersionState


def check_approver(*, principal: str, capacity: str, held: AbstractSet[str], decision: str) -> None:
    """Raise unless ``principal`` may decide in ``capacity`` at all (checked before any version is read).

    Args:
        principal: Name of who decides.
        capacity: The capacity they decide in (``security``, ``legal``, ``ml``...).
        held: The capacities they are an approver in, in the version's tenant.
        decision: ``approve`` or ``reject``.

    Raises:
        InvalidInputError: ``decision`` is neither ``approve`` nor ``reject``.
        CapacityNotHeldError: ``principal`` is not an approver in ``capacity``.
    """
    if decision not in DECISIONS:
        raise InvalidInputError(f"decision must be approve or reject, not {decision!r}", field="decision")
    if capacity not in held:
        raise CapacityNotHeldError(f"{principal} is not an approver in capacity {capacity!r} in this tenant",
                                   principal=principal, capacity=capacity, held=sorted(held))


def check_decision(*, principal: str, submitter: str | None, state: str, decided: AbstractSet[str]) -> None:
    """Raise unless ``principal`` may decide on this version now.

    Args:
        principal: Name of who decides.
        submitter: Name of who submitted the version (None if unknown).
        state: The version's state.
        decided: Names of the principals who decided on the version before.

    Raises:
        SeparationOfDutiesError: ``principal`` submitted the version.
        NotAwaitingApprovalError: the version is not awaiting approval.
        AlreadyDecidedError: ``principal`` decided on it before.
    """
    if submitter is not None and principal == submitter:
        raise SeparationOfDutiesError(f"{principal} submitted this version and may not decide on it",
                                      principal=principal)
    if state != VersionState.AWAITING_APPROVAL.value:
        raise NotAwaitingApprovalError(f"the version is {state}, not awaiting approval", state=state)
    if principal in decided:
        raise AlreadyDecidedError(f"{principal} has decided on this version already: one person counts once",
                                  principal=principal)
