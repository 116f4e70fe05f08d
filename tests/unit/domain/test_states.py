"""The version state machine and its audit actions: pure rules, no fixtures (the stage table: test_stages.py)."""

from __future__ import annotations

import pytest

from registry.domain.errors import InvalidStateError
from registry.domain.states import TERMINAL, TRANSITIONS, VersionState, check_transition, event_for

S = VersionState


def test_every_transition_has_one_audit_action() -> None:
    for current, targets in TRANSITIONS.items():
        for target in targets:
            assert event_for(current, target).startswith("version.")


def test_the_audit_actions_of_the_pipeline_are_the_shipped_ones() -> None:
    assert event_for(S.SUBMITTED, S.MIRRORING) == "version.resolved"
    assert event_for(S.MIRRORING, S.SEALED) == "version.sealed"
    assert event_for(S.SCANNING, S.AWAITING_APPROVAL) == "version.scanned"
    assert event_for(S.SCANNING, S.FAILED) == "version.failed"


@pytest.mark.parametrize("current,target", [(S.SUBMITTED, S.SEALED), (S.FAILED, S.MIRRORING),
                                            (S.APPROVED, S.FAILED), (S.SEALED, S.AWAITING_APPROVAL)])
def test_a_move_outside_the_machine_is_refused(current, target) -> None:
    with pytest.raises(InvalidStateError) as caught:
        check_transition(current.value, target)
    assert caught.value.details == {"state": current.value, "target": target.value}
    with pytest.raises(InvalidStateError):
        event_for(current, target)


def test_terminal_states_go_nowhere() -> None:
    assert TERMINAL == {S.FAILED, S.REJECTED, S.REVOKED}
