"""The ``awaiting_approval`` stage: the approval policy judges a version, from what the database holds.

Entering ``awaiting_approval`` judges the version at once (:func:`start`; nothing unmet approves it),
so what it still needs is known before anyone looks; people's decisions (:mod:`registry.services.approvals`)
judge it again. The policy input is built by :func:`approval_input_for`; facts and the license come
through :func:`_facts_for` and :func:`_license_for`, the one place each is read.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.db.models import Approval, LicenseFinding, Principal, Version, VersionFacts
from registry.domain import policy_input as pi
from registry.domain.errors import InvalidStateError
from registry.domain.outcomes import Outcome, Passed, Pending
from registry.policy import Decision, PolicyEngine
from registry.services import units
from registry.services.loaders import statement_binding, version_ref
from registry.services.policy import decide_approval
from registry.services.ports import Ports
from registry.services.stages import evaluating
from registry.services.stages.scanning import current_results


def _facts_for(session: Session, version: Version) -> dict[str, Any] | None:
    """The version's model facts, as sealing recorded them (None for a version sealed before facts were read)."""
    row = session.get(VersionFacts, version.id)
    return None if row is None else {**row.facts, "reader_version": row.reader_version}


def _license_for(session: Session, version: Version) -> pi.LicenseInfo:
    """The version's resolved license and the findings behind it (sealing recorded them).

    SPDX ids match without regard to case, so the policy compares them lower-cased; ``other:<name>``
    ids are lower-case already.
    """
    resolved = (version.license or "").strip().lower()
    findings = session.scalars(select(LicenseFinding).where(LicenseFinding.version_id == version.id)
                               .order_by(LicenseFinding.id))
    return pi.LicenseInfo(resolved or None, tuple(f.as_dict() for f in findings))


def _scan_verdicts(session: Session, version: Version) -> list[pi.ScanVerdict]:
    """modelreg's verdict and findings per file (modelscan's records are kept, but never decide)."""
    out = []
    # One query, not one per file: a version may hold 10,000 files.
    for path, row in current_results(session, version).items():
        if row is not None:
            findings = tuple((x["rule_id"], x["severity"]) for x in row.findings)
            out.append(pi.ScanVerdict(path, row.verdict, findings))
    return out


def approvals_of(session: Session, version: Version) -> list[Approval]:
    return list(session.scalars(select(Approval).where(Approval.version_id == version.id)
                                .order_by(Approval.at, Approval.id)))


def submitter_of(session: Session, version: Version) -> str | None:
    if version.submitted_by is None:
        return None
    return session.scalar(select(Principal.name).where(Principal.id == version.submitted_by))


def policy_approvals(session: Session, version: Version) -> list[pi.Approval]:
    return [pi.Approval(a.principal.name, a.capacity, a.decision, a.at, tuple(a.files))
            for a in approvals_of(session, version)]


def approval_input_for(session: Session, version: Version, engine: PolicyEngine | None = None, *,
                       approvals: list[pi.Approval] | None = None) -> pi.ApprovalInput:
    """The input of the approval policy for ``version``, read from the database (no authorization check).

    ``engine`` names the baseline alias (``modelreg.config.evals.baseline_alias``, default ``prod``);
    ``approvals``, when given, stand for the recorded ones (a preview of a decision not made yet).

    Raises:
        InvalidStateError: the version's files are not all stored yet (nothing to judge).
    """
    if any(f.sha256 is None for f in version.files):
        raise InvalidStateError(
            f"{version_ref(version)} is {version.state}: its files are not all stored yet",
            state=version.state)
    alias = evaluating.baseline_alias(engine)
    suites = evaluating.applicable_suites(session, version, engine)[0] if engine is not None else []
    return pi.approval_input(
        version=pi.VersionRef(version.model.tenant.name, version.model.name, version.number, version.state),
        source=pi.SourceRef(version.source_kind, version.source_repo, version.resolved_revision),
        files=[pi.FileEntry(f.path, f.size, f.sha256) for f in version.files],
        scans=_scan_verdicts(session, version),
        license=_license_for(session, version),
        approvals=policy_approvals(session, version) if approvals is None else approvals,
        submitter=submitter_of(session, version) or "",
        facts=_facts_for(session, version),
        evals=evaluating.policy_evals(session, version),
        baseline=evaluating.policy_baseline(session, version, alias),
        unit=units.policy_unit(session, version, *evaluating.replaced_unit(session, version, alias),
                               evaluating.suite_prompts(session, suites)),
        adapter_of=statement_binding(version),
    )


def digests(decision: Decision) -> dict[str, str]:
    return {"bundle_digest": decision.bundle_digest, "input_digest": decision.input_digest}


def judge(session: Session, version: Version, engine: PolicyEngine, now: dt.datetime) -> Decision:
    """Judge ``version`` with ``engine`` and store the decision (its digests with it)."""
    return decide_approval(session, version, dict(approval_input_for(session, version, engine)), engine, now)


def start(session: Session, version: Version, ports: Ports) -> Outcome:
    """The work of entering ``awaiting_approval``: judge the version now (stored), so what it still needs
    is known before anyone looks.

    Returns:
        Passed (approve it) when the policy allows it as it stands, else pending on people's decisions.
    """
    decision = judge(session, version, ports.policy, ports.clock.now())
    return Passed(digests(decision)) if decision.allowed else Pending()
