"""Who may decide on a version: the pure rules of an approval, checked before any is recorded.

One function, :func:`check_decision`, holds them all, in the order a caller is told: the capacity
must be one the principal approves in (in the version's tenant), the submitter never decides on their
own version (separation of duties), the version must be awaiting approval, and one person decides
once per version. The policy (``policies/approval.rego``) then says what the decisions add up to.

Example:
    >>> check_decision(principal="sam", capacity="security", held={"security"}, submitter="alice",
    ...                state="awaiting_approval", decided=set(), decision="approve")
    >>> check_decision(principal="alice", capacity="ml", held={"ml"}, submitter="alice",
    ...                state="awaiting_approval", decided=set(), decision="approve")
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


def check_decision(*, principal: str, capacity: str, held: AbstractSet[str], submitter: str | None, state: str,
                   decided: AbstractSet[str], decision: str) -> None:
    """Raise unless ``principal`` may record ``decision`` in ``capacity`` on a version.

    Args:
        principal: Name of who decides.
        capacity: The capacity they decide in (``security``, ``legal``, ``ml``...).
        held: The capacities they are an approver in, in the version's tenant.
        submitter: Name of who submitted the version (None if unknown).
        state: The version's state.
        decided: Names of the principals who decided on the version before.
        decision: ``approve`` or ``reject``.

    Raises:
        InvalidInputError: ``decision`` is neither ``approve`` nor ``reject``.
        CapacityNotHeldError: ``principal`` is not an approver in ``capacity``.
        SeparationOfDutiesError: ``principal`` submitted the version.
        NotAwaitingApprovalError: the version is not awaiting approval.
        AlreadyDecidedError: ``principal`` decided on it before.
    """
    if decision not in DECISIONS:
        raise InvalidInputError(f"decision must be approve or reject, not {decision!r}", field="decision")
    if capacity not in held:
        raise CapacityNotHeldError(f"{principal} is not an approver in capacity {capacity!r} in this tenant",
                                   principal=principal, capacity=capacity, held=sorted(held))
    if submitter is not None and principal == submitter:
        raise SeparationOfDutiesError(f"{principal} submitted this version and may not decide on it",
                                      principal=principal)
    if state != VersionState.AWAITING_APPROVAL.value:
        raise NotAwaitingApprovalError(f"the version is {state}, not awaiting approval", state=state)
    if principal in decided:
        raise AlreadyDecidedError(f"{principal} has decided on this version already: one person counts once",
                                  principal=principal)
