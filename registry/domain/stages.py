"""The pipeline as data: the stages a version passes through, in order, and the work entering each starts.

``STAGES`` is the one table of stages. Each row names its state, the work entering it starts (a
:class:`Work`, which :mod:`registry.services.lifecycle` maps to the module doing it) and whether a
version may skip it (``optional``: its work does not apply to every version). What follows from the
table and the state machine (:data:`registry.domain.states.TRANSITIONS`) is derived, never listed
again: ``PIPELINE`` (the order), ``FAILABLE`` (the stages a failure may come from) and
:func:`next_stage`. Only the lifecycle reads this module (``tests/unit/services/test_lifecycle_table.py``).

Adding a stage: a row here (and its transitions in ``states.py``), a :class:`Work` member, its module
in ``registry/services/stages/`` and the lifecycle's line mapping the one to the other.

Example:
    >>> next_stage(VersionState.SCANNING, lambda s: s is not VersionState.EVALUATING)
    <VersionState.AWAITING_APPROVAL: 'awaiting_approval'>
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

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
    """

    state: VersionState
    work: Work | None
    optional: bool = False


STAGES: tuple[Stage, ...] = (
    Stage(S.SUBMITTED, None),
    Stage(S.MIRRORING, Work.MIRROR),
    Stage(S.SEALED, Work.MOVE_ON),
    Stage(S.SCANNING, Work.SCAN),
    # A version no eval suite applies to goes straight to approval.
    Stage(S.EVALUATING, Work.EVALUATE, optional=True),
    Stage(S.AWAITING_APPROVAL, Work.JUDGE),
)
"""The stages in the order a version moves through them."""

PIPELINE: tuple[VersionState, ...] = tuple(stage.state for stage in STAGES)
"""The states of the stages, in order."""

COMPLETED = S.APPROVED
"""Where a version goes when the last stage passes it."""

FAILABLE: frozenset[VersionState] = frozenset(s for s in PIPELINE if S.FAILED in TRANSITIONS[s])
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
