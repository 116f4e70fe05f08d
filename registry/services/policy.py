"""Policy decisions: evaluate a Rego policy on a version and record what it said.

Every evaluation is stored (allowed or not, failed or not) with the policy bundle digest and the
input digest, in the caller's transaction, so the record exists exactly when the state change it
justifies does. Authorization is the caller's: these functions judge, they do not check who asks.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy.orm import Session

from registry.db.models import PolicyDecision, Version
from registry.policy import Decision, PolicyEngine


def decide_approval(
    session: Session,
    version: Version,
    input_doc: dict[str, Any],
    engine: PolicyEngine,
    clock_now: dt.datetime,
) -> Decision:
    """Evaluate the approval policy on ``input_doc`` and store the decision for ``version``.

    Args:
        session: The caller's session; the row is added and flushed, not committed.
        version: The version judged.
        input_doc: Built by :func:`registry.domain.policy_input.approval_input`.
        engine: The policy engine (a broken policy gives an ``error`` decision, which denies).
        clock_now: The decision's time, from the container's clock.

    Returns:
        The decision; ``decision.allowed`` says whether the version may become approved.
    """
    return _record(session, version, engine.approval(input_doc), clock_now)


def decide_promotion(
    session: Session,
    version: Version,
    input_doc: dict[str, Any],
    engine: PolicyEngine,
    clock_now: dt.datetime,
) -> Decision:
    """Evaluate the promotion policy (may this alias point at ``version``?) and store the decision.

    Args:
        session: The caller's session; the row is added and flushed, not committed.
        version: The version the alias would point at.
        input_doc: Built by :func:`registry.domain.policy_input.promotion_input`.
        engine: The policy engine.
        clock_now: The decision's time, from the container's clock.
    """
    return _record(session, version, engine.promotion(input_doc), clock_now)


def _record(session: Session, version: Version, decision: Decision, now: dt.datetime) -> Decision:
    session.add(PolicyDecision(
        version_id=version.id, kind=decision.kind, outcome=decision.outcome, allowed=decision.allowed,
        unmet=decision.unmet, bundle_digest=decision.bundle_digest, input_digest=decision.input_digest,
        error=decision.error, decided_at=now,
    ))
    session.flush()
    return decision
