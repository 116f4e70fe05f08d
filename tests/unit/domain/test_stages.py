"""The stage table and what is derived from it: the order, the failable stages, the next stage; no fixtures."""

from __future__ import annotations

import pytest

from registry.domain.errors import InvalidStateError, UpstreamError
from registry.domain.outcomes import Failed, Passed, Pending
from registry.domain.stages import COMPLETED, FAILABLE, PIPELINE, STAGES, Work, next_stage, stage_of
from registry.domain.states import TRANSITIONS, VersionState

S = VersionState


def test_each_stage_may_move_to_every_stage_it_can_pass_to() -> None:
    for index, stage in enumerate(STAGES):
        later = STAGES[index + 1:]
        reachable = []
        for following in later:
            reachable.append(following.state)
            if not following.optional:
                break
        else:
            reachable.append(COMPLETED)
        assert set(reachable) <= TRANSITIONS[stage.state], stage.state


def test_the_pipeline_is_the_tables_order() -> None:
    assert PIPELINE == (S.SUBMITTED, S.MIRRORING, S.SEALED, S.SCANNING, S.EVALUATING, S.AWAITING_APPROVAL)
    assert [s.work for s in STAGES] == [None, Work.MIRROR, Work.MOVE_ON, Work.SCAN, Work.EVALUATE, Work.JUDGE]


def test_the_failable_stages_come_from_the_transitions() -> None:
    """A failure comes from the stages whose work can fail; awaiting approval ends in a person's reject."""
    assert FAILABLE == {S.SUBMITTED, S.MIRRORING, S.SEALED, S.SCANNING, S.EVALUATING}
    assert all(S.FAILED in TRANSITIONS[s] for s in FAILABLE)
    assert S.FAILED not in TRANSITIONS[S.AWAITING_APPROVAL]


def test_next_stage_skips_optional_stages_that_do_not_apply() -> None:
    everything = lambda state: True  # noqa: E731
    no_evals = lambda state: state is not S.EVALUATING  # noqa: E731
    assert next_stage(S.SUBMITTED, everything) is S.MIRRORING
    assert next_stage(S.SEALED, everything) is S.SCANNING
    assert next_stage(S.SCANNING, everything) is S.EVALUATING
    assert next_stage(S.SCANNING, no_evals) is S.AWAITING_APPROVAL
    # Only optional stages are asked: approval always applies.
    assert next_stage(S.EVALUATING, lambda state: False) is S.AWAITING_APPROVAL
    assert next_stage(S.AWAITING_APPROVAL, lambda state: False) is COMPLETED is S.APPROVED


@pytest.mark.parametrize("state", [S.APPROVED, S.FAILED, S.REJECTED, S.REVOKED])
def test_no_next_stage_after_the_pipeline(state) -> None:
    assert stage_of(state) is None
    with pytest.raises(InvalidStateError):
        next_stage(state, lambda s: True)


def test_outcomes() -> None:
    assert Pending() == Pending()
    assert Passed().details == {}
    failed = Failed.from_error(UpstreamError("the hub is down", path="a.bin", cause=object()))
    assert failed.reason == "upstream"
    assert failed.detail == {"error": "UpstreamError", "message": "the hub is down", "path": "a.bin"}
    assert failed.audit_details == {"reason": "upstream", **failed.detail}
    assert Failed("scan_error", {"files": ["a"]}, event={"reason": "scan_error"}).audit_details == {
        "reason": "scan_error"}
