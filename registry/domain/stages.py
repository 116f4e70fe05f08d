"""The pipeline as data: the stages a version passes through, in order, and the work entering each starts.

``STAGES`` is the one table of stages. Each row names its state, the work entering it starts (a
:class:`Work`, which :mod:`registry.services.lifecycle` maps to the module doing it), whether a
version may skip it (``optional``: its work does not apply to every version) and whether it waits for
people (``waits_for_people``). What follows from the table and the state machine
(:data:`registry.domain.states.TRANSITIONS`) is derived, never listed again: ``PIPELINE`` (the order),
``FAILABLE`` (the stages a failure may come from), :func:`next_stage`, and the lists of states other
modules keep (:func:`states_after`, :func:`running_states`, :func:`failing_states`,
:func:`states_in_order`). Each function takes the table as a parameter, ``STAGES`` by default, so a
test can pass a table of its own (``tests/unit/test_stage_order.py``). Only the lifecycle reads the
rows and moves versions by them; other modules import the derived lists alone
(``tests/unit/services/test_lifecycle_table.py``).

Adding a stage: ADR 0010's checklist (``docs/adr/0010-one-orchestrator-stage-outcomes-and-ports.md``).

Example:
    >>> next_stage(VersionState.SCANNING, lambda s: s is not VersionState.EVALUATING)
    <VersionState.AWAITING_APPROVAL: 'awaiting_approval'>
    >>> [s.value for s in states_after(VersionState.SCANNING)]
    ['evaluating', 'awaiting_approval', 'approved']
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from registry.domain.errors import InvalidStateError
from registry.domain.states import TRANSITIONS, VersionState

S = VersionState


class Work(str, enum.Enum):
    """The work entering a stage starts (each is one module of ``registry/services/stages/``)."""

    MIRROR = "mirror"
    """A ``mirror_file`` job per file not stored yet; with none, a ``seal_version`` job."""
    MOVE_ON = "move_on"
    """Nothing to wait for: the version moves on at once (``sealed`` to ``scanning``)."""
    SCAN = "scan"
    """A ``scan_blob`` job per file without a cached verdict; with none, the verdicts decide at once."""
    EVALUATE = "evaluate"
    """A pending eval result and a ``run_eval`` job per applicable suite."""
    JUDGE = "judge"
    """The approval policy judges the version; nothing unmet approves it at once."""


@dataclass(frozen=True, slots=True)
class Stage:
    """One row of the pipeline.

    Attributes:
        state: the state a version is in while the stage's work runs.
        work: what entering the state starts; None: nothing (a version is created ``submitted``, and
            resolving happens at submission or in its ``resolve_version`` job).
        optional: a version its work does not apply to skips the stage.
        waits_for_people: a version in it waits for people's decisions, not for work: it is not running
            (the console stops refreshing its page, ``modelreg submit --wait`` returns).
    """

    state: VersionState
    work: Work | None
    optional: bool = False
    waits_for_people: bool = False


STAGES: tuple[Stage, ...] = (
    Stage(S.SUBMITTED, None),
    Stage(S.MIRRORING, Work.MIRROR),
    Stage(S.SEALED, Work.MOVE_ON),
    Stage(S.SCANNING, Work.SCAN),
    # A version no eval suite applies to goes straight to approval.
    Stage(S.EVALUATING, Work.EVALUATE, optional=True),
    Stage(S.AWAITING_APPROVAL, Work.JUDGE, waits_for_people=True),
)
"""The stages in the order a version moves through them."""

COMPLETED = S.APPROVED
"""Where a version goes when the last stage passes it."""


def states_of(table: Iterable[Stage] = STAGES) -> tuple[VersionState, ...]:
    """The states of the table's stages, in order.

    Example:
        >>> states_of()[0].value
        'submitted'
    """
    return tuple(stage.state for stage in table)


def states_after(state: VersionState, table: Iterable[Stage] = STAGES,
                 completed: VersionState = COMPLETED) -> tuple[VersionState, ...]:
    """Where a version that passed the stage ``state`` may be: every later stage, in order, then
    ``completed``. (A rescan that finds an unsafe file flags or revokes the versions past scanning.)

    Args:
        state: a stage of ``table``.
        table: the stages in order.
        completed: where a version goes when the table's last stage passes it.

    Raises:
        InvalidStateError: ``state`` is not a stage of the table.
    """
    order = states_of(table)
    if state not in order:
        raise InvalidStateError(f"{state.value} is not a stage", state=state.value)
    return (*order[order.index(state) + 1:], completed)


def running_states(table: Iterable[Stage] = STAGES) -> frozenset[VersionState]:
    """The stages in which a version moves on by itself: every stage that does not wait for people.

    Args:
        table: the stages in order.
    """
    return frozenset(stage.state for stage in table if not stage.waits_for_people)


def failing_states(table: Iterable[Stage] = STAGES,
                   transitions: Mapping[VersionState, frozenset[VersionState]] = TRANSITIONS,
                   failed: VersionState = S.FAILED) -> frozenset[VersionState]:
    """The stages whose work may fail a version: those the state machine lets move to ``failed``.

    Args:
        table: the stages in order.
        transitions: the state machine, each state's moves.
        failed: the state a failure moves a version to.
    """
    return frozenset(stage.state for stage in table if failed in transitions[stage.state])


def states_in_order(table: Iterable[Stage] = STAGES,
                    states: Iterable[VersionState] = VersionState) -> tuple[VersionState, ...]:
    """Every state, the stages first in the order a version moves through them, then the outcomes (in
    the order ``states`` declares them).

    Args:
        table: the stages in order.
        states: every state a version may be in.
    """
    order = states_of(table)
    return (*order, *(s for s in states if s not in order))


PIPELINE: tuple[VersionState, ...] = states_of()
"""The states of the stages, in order: a version in one of them is still in the pipeline."""

FAILABLE: frozenset[VersionState] = failing_states()
"""The stages whose work may fail a version (a dead job fails its version only from these)."""

_BY_STATE = {stage.state: stage for stage in STAGES}


def stage_of(state: VersionState) -> Stage | None:
    """The row of ``state``, or None for a state that is no stage (an outcome)."""
    return _BY_STATE.get(state)


def next_stage(current: VersionState, applies: Callable[[VersionState], bool]) -> VersionState:
    """Where a version goes when the stage ``current`` passes it: the next stage that applies, skipping
    optional stages whose work does not apply; after the last stage, ``approved``.

    Args:
        applies: whether an optional stage applies to the version (``evaluating`` only with evals to run).

    Raises:
        InvalidStateError: ``current`` is not a stage.

    Example:
        >>> next_stage(VersionState.AWAITING_APPROVAL, lambda s: True)
        <VersionState.APPROVED: 'approved'>
    """
    if current not in _BY_STATE:
        raise InvalidStateError(f"a {current.value} version has no next stage", state=current.value)
    for stage in STAGES[PIPELINE.index(current) + 1:]:
        if not stage.optional or applies(stage.state):
            return stage.state
    return COMPLETED
