"""The version state machine, its audit actions and the pipeline order: pure rules, no fixtures."""

from __future__ import annotations

import pytest

from registry.domain.errors import InvalidStateError
from registry.domain.states import (
    PIPELINE,
    TERMINAL,
    TRANSITIONS,
    VersionState,
    check_transition,
    event_for,
    next_stage,
)

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


def test_each_pipeline_stage_may_move_to_the_next() -> None:
    for current, following in zip(PIPELINE, PIPELINE[1:]):
        assert following in TRANSITIONS[current]


def test_next_stage_skips_stages_that_do_not_apply() -> None:
    everything = lambda state: True  # noqa: E731
    no_evals = lambda state: state is not S.EVALUATING  # noqa: E731
    assert next_stage(S.SEALED, everything) is S.SCANNING
    assert next_stage(S.SCANNING, everything) is S.EVALUATING
    assert next_stage(S.SCANNING, no_evals) is S.AWAITING_APPROVAL
    # The last stage is a person's decision: it always applies.
    assert next_stage(S.EVALUATING, lambda state: False) is S.AWAITING_APPROVAL


@pytest.mark.parametrize("state", [S.AWAITING_APPROVAL, S.APPROVED, S.FAILED])
def test_no_next_stage_after_the_pipeline(state) -> None:
    with pytest.raises(InvalidStateError):
        next_stage(state, lambda s: True)
