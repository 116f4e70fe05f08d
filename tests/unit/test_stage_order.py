"""The order of stages lives in ``STAGES`` alone: every list of states other modules keep is derived from it.

A test-only table adds a stage after scanning (``linting``, from a small Enum of its own) and every derived
list takes it in where it belongs; today's derived lists equal today's values, written out; no module of
``registry/``, ``api/`` or ``workers/`` writes a list of pipeline states by hand; ADR 0010's checklist
names every derived list.
"""

from __future__ import annotations

import ast
import enum
import re
from pathlib import Path

import pytest

from registry.cli import versions as cli_versions
from registry.console import views
from registry.domain.stages import (
    FAILABLE,
    PIPELINE,
    STAGES,
    Stage,
    Work,
    failing_states,
    running_states,
    states_after,
    states_in_order,
    states_of,
)
from registry.domain.states import LIVE, VersionState
from registry.services import scans
from tests.support import source_tree

ROOT = Path(__file__).resolve().parents[2]
ADR = ROOT / "docs" / "adr" / "0010-one-orchestrator-stage-outcomes-and-ports.md"
S = VersionState


class T(str, enum.Enum):
    """Today's states with one more stage, ``linting``, after scanning."""

    SUBMITTED = "submitted"
    MIRRORING = "mirroring"
    SEALED = "sealed"
    SCANNING = "scanning"
    LINTING = "linting"
    EVALUATING = "evaluating"
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    FAILED = "failed"
    REJECTED = "rejected"
    REVOKED = "revoked"


WITH_LINTING = (
    Stage(T.SUBMITTED, None),
    Stage(T.MIRRORING, Work.MIRROR),
    Stage(T.SEALED, Work.MOVE_ON),
    Stage(T.SCANNING, Work.SCAN),
    Stage(T.LINTING, Work.MOVE_ON),
    Stage(T.EVALUATING, Work.EVALUATE, optional=True),
    Stage(T.AWAITING_APPROVAL, Work.JUDGE, waits_for_people=True),
)
TRANSITIONS_WITH_LINTING = {
    T.SUBMITTED: frozenset({T.MIRRORING, T.FAILED}),
    T.MIRRORING: frozenset({T.SEALED, T.FAILED}),
    T.SEALED: frozenset({T.SCANNING, T.FAILED, T.REVOKED}),
    T.SCANNING: frozenset({T.LINTING, T.FAILED, T.REVOKED}),
    T.LINTING: frozenset({T.EVALUATING, T.AWAITING_APPROVAL, T.FAILED, T.REVOKED}),
    T.EVALUATING: frozenset({T.AWAITING_APPROVAL, T.FAILED, T.REVOKED}),
    T.AWAITING_APPROVAL: frozenset({T.APPROVED, T.REJECTED, T.REVOKED}),
    T.APPROVED: frozenset({T.REVOKED}),
    T.FAILED: frozenset(),
    T.REJECTED: frozenset(),
    T.REVOKED: frozenset(),
}


def test_a_stage_after_scanning_is_in_every_derived_list() -> None:
    assert states_of(WITH_LINTING).index(T.LINTING) == states_of(WITH_LINTING).index(T.SCANNING) + 1
    # A rescan that finds an unsafe file flags (or revokes) a version sitting in the new stage.
    assert states_after(T.SCANNING, WITH_LINTING, completed=T.APPROVED) == (
        T.LINTING, T.EVALUATING, T.AWAITING_APPROVAL, T.APPROVED)
    assert T.LINTING in running_states(WITH_LINTING)
    assert T.LINTING in failing_states(WITH_LINTING, TRANSITIONS_WITH_LINTING, failed=T.FAILED)
    assert [s.value for s in states_in_order(WITH_LINTING, T)] == [
        "submitted", "mirroring", "sealed", "scanning", "linting", "evaluating", "awaiting_approval",
        "approved", "failed", "rejected", "revoked"]
    # `submit --wait` keeps waiting through it: it is no state a person acts in.
    assert T.LINTING not in set(T) - running_states(WITH_LINTING)


def test_a_stage_before_scanning_is_not_past_scanning() -> None:
    table = (Stage(T.SUBMITTED, None), Stage(T.LINTING, Work.MOVE_ON), *WITH_LINTING[1:4], *WITH_LINTING[5:])
    assert T.LINTING not in states_after(T.SCANNING, table, completed=T.APPROVED)
    assert T.LINTING in running_states(table)


def test_a_stage_that_waits_for_people_is_not_running() -> None:
    table = (*WITH_LINTING[:4], Stage(T.LINTING, Work.JUDGE, waits_for_people=True), *WITH_LINTING[5:])
    assert running_states(table) == {T.SUBMITTED, T.MIRRORING, T.SEALED, T.SCANNING, T.EVALUATING}


def test_todays_derived_lists_are_todays_values() -> None:
    assert scans.PAST_SCANNING == ("evaluating", "awaiting_approval", "approved")
    assert views.RUNNING == {"submitted", "mirroring", "sealed", "scanning", "evaluating"}
    assert views.STATES == ["submitted", "mirroring", "sealed", "scanning", "evaluating", "awaiting_approval",
                            "approved", "failed", "rejected", "revoked"]
    assert cli_versions.WAIT_DONE_STATES == {"failed", "rejected", "revoked", "approved", "awaiting_approval"}
    assert FAILABLE == {S.SUBMITTED, S.MIRRORING, S.SEALED, S.SCANNING, S.EVALUATING}
    # Retention keeps a version "in-pipeline" in these: every live state before a decision.
    assert set(PIPELINE) == LIVE - {S.APPROVED}


def test_a_state_after_no_stage_is_refused() -> None:
    with pytest.raises(Exception, match="approved is not a stage"):
        states_after(S.APPROVED)


# The state machine and the stage table are where states are listed; everywhere else derives.
STATE_LISTS_ALLOWED_IN = {"registry/domain/states.py", "registry/domain/stages.py"}
STATE_VALUES = {s.value for s in VersionState}
STAGE_VALUES = {s.state.value for s in STAGES}


def _state_named(node: ast.AST) -> str | None:
    """The state a node names: ``VersionState.X``, ``S.X`` (``.value`` or not), or the string ``"x"``."""
    if isinstance(node, ast.Attribute) and node.attr == "value":
        node = node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and node.value.id in ("VersionState", "S") and node.attr.lower() in STATE_VALUES:
        return node.attr.lower()
    if isinstance(node, ast.Constant) and node.value in STATE_VALUES:
        return node.value
    return None


def hand_written_state_lists(root: Path) -> list[str]:
    """Where a tuple, list, set or dict literal names two or more states, one of them a stage, outside the
    state machine and the stage table."""
    found = []
    for package in ("registry", "api", "workers"):
        for path in source_tree.python_files(package, root):
            relative = str(path.relative_to(root))
            if relative in STATE_LISTS_ALLOWED_IN:
                continue
            for node in ast.walk(source_tree.tree(path)):
                members = node.keys if isinstance(node, ast.Dict) else \
                    node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else []
                named = [_state_named(m) for m in members if m is not None]
                named = [n for n in named if n is not None]
                if len(named) >= 2 and STAGE_VALUES & set(named):
                    found.append(f"{relative}:{node.lineno}")
    return found


def test_no_module_writes_a_list_of_states_by_hand() -> None:
    assert hand_written_state_lists(ROOT) == []


@pytest.mark.parametrize("source", [
    "from registry.domain.states import VersionState\n\n"
    "PAST = (VersionState.EVALUATING.value, VersionState.APPROVED.value)\n",
    "DONE = {'failed', 'awaiting_approval'}\n",
    "def running(state):\n    return state in ['submitted', 'scanning']\n",
], ids=["enum members", "strings", "an if"])
def test_a_planted_hand_written_list_is_found(tmp_path, source) -> None:
    (tmp_path / "registry" / "services").mkdir(parents=True)
    (tmp_path / "registry" / "services" / "planted.py").write_text(source)
    assert len(hand_written_state_lists(tmp_path)) == 1


def test_outcomes_alone_are_no_pipeline_list(tmp_path) -> None:
    (tmp_path / "registry").mkdir()
    (tmp_path / "registry" / "planted.py").write_text("ENDED = ('failed', 'rejected', 'revoked')\n")
    assert hand_written_state_lists(tmp_path) == []


def _checklist() -> str:
    text = source_tree.text(ADR)
    return text[text.index("## Adding a stage"):]


@pytest.mark.parametrize("name", [
    "STAGES", "VersionState", "TRANSITIONS", "_FORWARD_EVENTS", "lifecycle._WORK", "workers/handlers.py",
    "migrations/versions/", "policies/", "registry/domain/events.py",
    "PIPELINE", "FAILABLE", "scans.PAST_SCANNING", "views.RUNNING", "views.STATES", "WAIT_DONE_STATES"])
def test_the_adr_checklist_names_every_place_a_stage_touches(name) -> None:
    assert re.search(re.escape(name), _checklist()), name
