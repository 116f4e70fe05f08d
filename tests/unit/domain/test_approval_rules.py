"""The pure rules of a decision on a version: no fixtures, no database."""

from __future__ import annotations

import pytest

from registry.domain.approvals import check_approver, check_decision
from registry.domain.errors import (
    AlreadyDecidedError,
    CapacityNotHeldError,
    InvalidInputError,
    NotAwaitingApprovalError,
    SeparationOfDutiesError,
)

APPROVER = dict(principal="sec", capacity="security", held={"security"}, decision="approve")
DECISION = dict(principal="sec", submitter="sam", state="awaiting_approval", decided=set())


def test_an_approver_in_the_capacity_decides_once_on_a_version_awaiting_approval():
    assert check_approver(**APPROVER) is None
    assert check_approver(**{**APPROVER, "decision": "reject"}) is None
    assert check_decision(**DECISION) is None
    assert check_decision(**{**DECISION, "submitter": None}) is None


def test_the_submitter_never_decides_on_their_own_version():
    with pytest.raises(SeparationOfDutiesError) as err:
        check_decision(**{**DECISION, "principal": "sam"})
    assert err.value.code == "separation-of-duties" and err.value.details["principal"] == "sam"


def test_separation_of_duties_is_told_before_the_state():
    with pytest.raises(SeparationOfDutiesError):
        check_decision(**{**DECISION, "principal": "sam", "state": "approved"})


def test_the_capacity_must_be_held():
    with pytest.raises(CapacityNotHeldError) as err:
        check_approver(**{**APPROVER, "capacity": "legal"})
    assert err.value.details["held"] == ["security"] and err.value.code == "capacity-not-held"
    with pytest.raises(CapacityNotHeldError):
        check_approver(**{**APPROVER, "held": set()})


@pytest.mark.parametrize("state", ["submitted", "mirroring", "sealed", "scanning", "evaluating", "approved",
                                   "failed", "rejected", "revoked"])
def test_only_a_version_awaiting_approval_is_decided_on(state):
    with pytest.raises(NotAwaitingApprovalError) as err:
        check_decision(**{**DECISION, "state": state})
    assert err.value.details["state"] == state and err.value.code == "not-awaiting-approval"


def test_one_person_counts_once():
    with pytest.raises(AlreadyDecidedError):
        check_decision(**{**DECISION, "decided": {"sec"}})
    assert check_decision(**{**DECISION, "decided": {"mia"}}) is None


def test_a_decision_is_approve_or_reject():
    with pytest.raises(InvalidInputError):
        check_approver(**{**APPROVER, "decision": "maybe"})
