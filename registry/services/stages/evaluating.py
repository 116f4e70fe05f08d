"""The ``evaluating`` stage: a pending result and a ``run_eval`` job per applicable suite; and what the
policies see of eval results.

Suites are policy data (``modelreg.suites``, :mod:`registry.evals.suites`); one applies to a version by
its model name and recorded facts, and a version no suite applies to skips the stage (:func:`applies`).
Entering ``evaluating`` (:func:`start`) writes a ``pending`` result per applicable suite, with the suite
frozen as it will run (eval sets resolved to digests), and queues a ``run_eval`` job per result; the
jobs live in :mod:`registry.services.evals`, and the one that records the last result asks :func:`judge`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry import jobs
from registry.db.models import Alias, EvalResult, EvalSet, Version, VersionFacts
from registry.domain.components import components_map
from registry.domain.outcomes import Outcome, Passed, Pending
from registry.evals.suites import EvalSetRef, Suite, SuiteError, suite_version, suites_of
from registry.policy import PolicyEngine
from registry.services import adapter_evals, units
from registry.services.ports import Ports

PENDING, COMPLETED, FAILED = "pending", "completed", "failed"


def facts_of(session: Session, version: Version) -> dict[str, Any] | None:
    """The model facts sealing recorded (None for a version sealed before facts were read)."""
    row = session.get(VersionFacts, version.id)
    return row.facts if row is not None else None


def applicable_suites(session: Session, version: Version, engine: PolicyEngine) -> tuple[list[Suite], str | None]:
    """The suites that evaluate ``version`` under the policy bundle, or the reason they are unreadable."""
    try:
        suites = suites_of(engine.data())
    except SuiteError as e:
        return [], e.message
    model = f"{version.model.tenant.name}/{version.model.name}"
    facts = facts_of(session, version)
    return [s for s in suites.values() if s.applies(model, facts)], None


def applies(session: Session, version: Version, ports: Ports) -> bool:
    """Whether ``evaluating`` applies: some suite applies, or the suites cannot be read (that fails loudly)."""
    suites, error = applicable_suites(session, version, ports.policy)
    return bool(suites) or error is not None


def start(session: Session, version: Version, ports: Ports) -> Outcome:
    """The work of entering ``evaluating``: a pending result and a ``run_eval`` job per applicable suite.

    A suite that cannot run (the suites do not parse, an eval set it names does not exist) is recorded
    failed at once with the reason, so the version still reaches approval, with that requirement unmet.

    Returns:
        Pending while a result is; passed at once when none is.
    """
    now = ports.clock.now()
    suites, error = applicable_suites(session, version, ports.policy)
    if error is not None:
        session.add(EvalResult(version_id=version.id, suite="suites", suite_version="", runner="", runner_version="",
                               definition={}, status=FAILED, reason="bad_suite", error=error[:2000],
                               created_at=now, finished_at=now))
    unit = units.components_of(session, version)
    covers = components_map(unit) if unit is not None else None
    # An adapter's results name the base they run on: a result never covers another base.
    base = adapter_evals.ran_on(session, version)
    for suite in suites:
        digests, missing = _resolve_evalsets(session, suite)
        definition = suite.definition(digests) if not missing else {"suite": suite.name, "runner": suite.runner}
        row = EvalResult(version_id=version.id, suite=suite.name, suite_version=suite_version(definition),
                         runner=suite.runner, runner_version=suite.runner_version, definition=definition,
                         status=PENDING, created_at=now, components=covers, ran_on=base)
        if missing:
            row.status, row.reason, row.finished_at = FAILED, "missing_evalset", now
            row.error = f"eval set {missing} does not exist (or not with the pinned digest)"
        session.add(row)
        session.flush()
        if row.status == PENDING:
            ports.queue.enqueue_job(session, jobs.JobKind.RUN_EVAL, {"result_id": row.id}, version.id, suite.name,
                                    tenant=version.model.tenant.name)
    session.flush()
    return judge(session, version)


def _evalset(session: Session, ref: EvalSetRef) -> EvalSet | None:
    """The eval set version ``ref`` names now: the pinned digest, or the newest version."""
    query = select(EvalSet).where(EvalSet.name == ref.name)
    query = query.where(EvalSet.digest == ref.digest) if ref.digest else query.order_by(EvalSet.number.desc())
    return session.scalars(query.limit(1)).first()


def _resolve_evalsets(session: Session, suite: Suite) -> tuple[dict[str, str], str | None]:
    digests = {}
    for ref in suite.evalsets:
        row = _evalset(session, ref)
        if row is None:
            return {}, ref.name + (f"@sha256:{ref.digest}" if ref.digest else "")
        digests[ref.name] = row.digest
    return digests, None


def suite_prompts(session: Session, suites: list[Suite]) -> dict[str, list[str]]:
    """Each suite's name -> the unit's prompt templates its eval sets render (sorted), as they resolve now:
    what ``input.unit.suite_prompts`` shows the policies (a changed template asks for the suites that read it)."""
    out = {}
    for suite in suites:
        rows = [_evalset(session, ref) for ref in suite.evalsets]
        out[suite.name] = sorted({name for row in rows if row is not None for name in row.prompt_templates or []})
    return out


def judge(session: Session, version: Version) -> Outcome:
    """Pending while one of the version's results is; then passed, naming each suite's status.

    A failed suite does not fail the version: the approval policy sees it and leaves that requirement unmet.
    """
    rows = list(session.scalars(select(EvalResult).where(EvalResult.version_id == version.id)))
    if any(r.status == PENDING for r in rows):
        return Pending()
    return Passed({"evals": {r.suite: r.reason or r.status for r in rows}})


def results_of(session: Session, version: Version) -> list[EvalResult]:
    return list(session.scalars(select(EvalResult).where(EvalResult.version_id == version.id)
                                .order_by(EvalResult.suite)))


# --- what the policies see ---------------------------------------------------------------------


def policy_evals(session: Session, version: Version) -> list[dict[str, Any]]:
    """``input.evals``: each suite's status, reason, suite version and metrics, the unit and (for an adapter)
    the base it ran on, sorted by suite."""
    return [{"suite": r.suite, "suite_version": r.suite_version, "runner": r.runner,
             "runner_version": r.runner_version, "status": r.status, "reason": r.reason, "metrics": r.metrics,
             "components": r.components, "ran_on": r.ran_on}
            for r in results_of(session, version)]


def baseline_alias(engine: PolicyEngine | None) -> str | None:
    """The alias whose version is the baseline (``modelreg.config.evals.baseline_alias``, default ``prod``)."""
    config = ((engine.data() if engine else {}).get("modelreg") or {}).get("config") or {}
    evals_config = config.get("evals") if isinstance(config, dict) else None
    value = evals_config.get("baseline_alias", "prod") if isinstance(evals_config, dict) else "prod"
    return value if isinstance(value, str) and value else None


def baseline_version(session: Session, version: Version, alias: str | None) -> Version | None:
    """The version behind ``alias`` of the same model, or None (no such alias, or it is this very version)."""
    if alias is None:
        return None
    row = session.scalar(select(Alias).where(Alias.model_id == version.model_id, Alias.name == alias))
    if row is None or row.version_id == version.id:
        return None
    return session.get(Version, row.version_id)


def replaced_unit(session: Session, version: Version, alias: str | None) -> tuple[Version | None, str]:
    """The unit ``version`` replaces, for the component diff: the version it was derived from (its lineage),
    else the one behind ``alias``; and how it was chosen (``derived``, ``alias:prod``)."""
    if version.derived_from is not None:
        parent = session.scalar(select(Version).where(Version.model_id == version.model_id,
                                                      Version.number == version.derived_from))
        return parent, "derived"
    return baseline_version(session, version, alias), f"alias:{alias}"


def policy_baseline(session: Session, version: Version, alias: str | None) -> dict[str, Any] | None:
    """``input.baseline``: the completed evals of the version behind ``alias`` of the same model, or None.

    None when there is no such alias, or it points at this very version. Policies compare a suite's
    metrics only when the baseline's ``suite_version`` equals this version's (like with like).
    """
    behind = baseline_version(session, version, alias)
    if behind is None:
        return None
    evals = [{"suite": r.suite, "suite_version": r.suite_version, "metrics": r.metrics}
             for r in results_of(session, behind) if r.status == COMPLETED]
    return {"alias": alias, "version": behind.number, "evals": evals}
