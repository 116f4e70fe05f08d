"""The documents the Rego policies judge: one builder per policy, pure, the schema as TypedDicts.

The approval input names everything a release decision may depend on. Lists are sorted and scan
results of one file merged, so the same facts always give the same canonical JSON, hence the same
input digest in the decisions table. ``policies/README.md`` documents each field for policy authors.

Example:
    >>> doc = approval_input(
    ...     version=VersionRef("acme", "tiny", 1, "awaiting_approval"),
    ...     source=SourceRef("hf", "org/tiny", "a" * 40),
    ...     files=[FileEntry("model.safetensors", 10, "b" * 64)],
    ...     scans=[ScanVerdict("model.safetensors", "safe")],
    ...     license=LicenseInfo("apache-2.0"),
    ...     approvals=[],
    ...     submitter="alice",
    ... )
    >>> doc["scans"][0]["verdict"], doc["facts"], doc["evals"]
    ('safe', None, [])
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, Iterable, Literal, TypedDict

from registry.domain.errors import InvalidInputError
from registry.domain.files import FileEntry

Decision = Literal["approve", "reject"]
DECISIONS = ("approve", "reject")
# The scanner's verdicts; an error outranks suspicious (a file we could not decide on is never
# loaded), unsafe outranks everything (registry/scanning/model.py ranks them the same way).
VERDICT_RANK = {"safe": 0, "suspicious": 1, "error": 2, "unsafe": 3}


# --- what callers pass ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class VersionRef:
    tenant: str
    model: str
    number: int
    state: str


@dataclasses.dataclass(frozen=True)
class SourceRef:
    kind: str
    repo: str
    revision: str | None


@dataclasses.dataclass(frozen=True)
class ScanVerdict:
    """One scanner's verdict on one file; ``findings`` are ``(rule_id, severity)`` pairs."""

    path: str
    verdict: str
    findings: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class LicenseInfo:
    """The normalized license (an SPDX id, ``other:<name>``, or None when unknown) and its findings."""

    id: str | None
    findings: tuple[dict[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True)
class Approval:
    """A recorded decision; ``files`` are the suspicious files a security approval vouches for."""

    principal: str
    capacity: str
    decision: str
    at: dt.datetime
    files: tuple[str, ...] = ()


# --- what the policies read -----------------------------------------------------------------


class VersionDoc(TypedDict):
    tenant: str
    model: str
    number: int
    state: str


class SourceDoc(TypedDict):
    kind: str
    repo: str
    revision: str | None


class FileDoc(TypedDict):
    path: str
    size: int
    sha256: str


class FindingDoc(TypedDict):
    rule_id: str
    severity: str


class ScanDoc(TypedDict):
    path: str
    verdict: str
    findings: list[FindingDoc]


class LicenseDoc(TypedDict):
    id: str | None
    findings: list[dict[str, Any]]


class ApprovalDoc(TypedDict):
    principal: str
    capacity: str
    decision: str
    files: list[str]
    at: str


class ApprovalInput(TypedDict):
    version: VersionDoc
    source: SourceDoc
    facts: dict[str, Any] | None
    files: list[FileDoc]
    scans: list[ScanDoc]
    unscanned: list[str]
    license: LicenseDoc
    evals: list[dict[str, Any]]
    baseline: dict[str, Any] | None
    approvals: list[ApprovalDoc]
    submitter: str
    unit: dict[str, Any] | None
    adapter_of: dict[str, Any] | None


class PrincipalDoc(TypedDict):
    name: str
    is_admin: bool
    capacities: list[str]


class TargetDoc(TypedDict):
    number: int
    state: str


class PromotionInput(TypedDict):
    principal: PrincipalDoc
    alias: str
    target: TargetDoc
    canary: TargetDoc | None
    current: TargetDoc | None
    evals: list[dict[str, Any]]
    baseline: dict[str, Any] | None
    unit: dict[str, Any] | None
    adapter_of: dict[str, Any] | None


def approval_input(
    *,
    version: VersionRef,
    source: SourceRef,
    files: Iterable[FileEntry],
    scans: Iterable[ScanVerdict],
    license: LicenseInfo,
    approvals: Iterable[Approval],
    submitter: str,
    facts: dict[str, Any] | None = None,
    evals: Iterable[dict[str, Any]] = (),
    baseline: dict[str, Any] | None = None,
    unit: dict[str, Any] | None = None,
    adapter_of: dict[str, Any] | None = None,
) -> ApprovalInput:
    """Build the input of ``policies/approval.rego``.

    Args:
        version: The version judged.
        source: Where it came from.
        files: Its files; a path given twice is refused.
        scans: Scanner verdicts; several for one path merge into the worst verdict and the union
            of findings. A file with no verdict is left without one (the policy says what that means).
        license: The normalized license.
        approvals: Decisions so far, by anyone (the policy decides which count).
        submitter: Name of the principal who submitted the version.
        facts: Model facts, or None until they are read.
        evals: Each suite's eval result (``registry.services.stages.evaluating.policy_evals``), sorted by suite.
        baseline: The completed evals of the version behind the baseline alias, or None
            (``registry.services.stages.evaluating.policy_baseline``).
        unit: The release unit: components, the unit replaced and what changed, or None until the files
            are stored (``registry.services.units.policy_unit``).
        adapter_of: For a LoRA adapter, the base its signed statement binds it to (``{model, version,
            weights_digest, manifest_digest}``, ``registry.services.loaders.statement_binding``); None
            for a version that is no adapter.

    Raises:
        InvalidInputError: a duplicate file, an unknown verdict or decision, a naive time.
    """
    file_docs: dict[str, FileDoc] = {}
    for f in files:
        if f.path in file_docs:
            raise InvalidInputError(f"file {f.path!r} is listed twice", path=f.path)
        file_docs[f.path] = {"path": f.path, "size": f.size, "sha256": f.sha256}
    merged: dict[str, tuple[str, set[tuple[str, str]]]] = {}
    for s in scans:
        if s.verdict not in VERDICT_RANK:
            raise InvalidInputError(f"unknown scan verdict {s.verdict!r} for {s.path!r}", path=s.path)
        verdict, findings = merged.get(s.path, ("safe", set()))
        worst = max(verdict, s.verdict, key=VERDICT_RANK.__getitem__)
        merged[s.path] = (worst, findings | set(s.findings))
    approval_docs: list[ApprovalDoc] = []
    for a in approvals:
        if a.decision not in DECISIONS:
            raise InvalidInputError(f"unknown decision {a.decision!r}", decision=a.decision)
        if a.at.tzinfo is None:
            raise InvalidInputError("an approval time has no time zone", principal=a.principal)
        approval_docs.append({
            "principal": a.principal, "capacity": a.capacity, "decision": a.decision,
            "files": sorted(set(a.files)), "at": a.at.astimezone(dt.timezone.utc).isoformat(),
        })
    return {
        "version": dataclasses.asdict(version),  # type: ignore[typeddict-item]
        "source": dataclasses.asdict(source),  # type: ignore[typeddict-item]
        "facts": facts,
        "files": [file_docs[p] for p in sorted(file_docs)],
        "scans": [
            {"path": p, "verdict": v, "findings": [{"rule_id": r, "severity": sev} for r, sev in sorted(fs)]}
            for p, (v, fs) in sorted(merged.items())
        ],
        # Worked out here, not in Rego: rego-cpp builds a set or looks up an object key in time linear in
        # its size, so "files minus scanned paths" was quadratic there (130 s at 10,000 files).
        "unscanned": sorted(set(file_docs) - set(merged)),
        "license": {"id": license.id, "findings": list(license.findings)},
        "evals": sorted(evals, key=lambda e: e["suite"]),
        "baseline": baseline,
        "approvals": sorted(approval_docs, key=lambda a: (a["at"], a["principal"], a["capacity"])),
        "unit": unit,
        "submitter": submitter,
        "adapter_of": adapter_of,
    }


def promotion_input(
    *,
    principal: str,
    is_admin: bool,
    capacities: Iterable[str],
    alias: str,
    target: tuple[int, str],
    canary: tuple[int, str] | None = None,
    current: tuple[int, str] | None = None,
    evals: Iterable[dict[str, Any]] = (),
    baseline: dict[str, Any] | None = None,
    unit: dict[str, Any] | None = None,
    adapter_of: dict[str, Any] | None = None,
) -> PromotionInput:
    """Build the input of ``policies/promotion.rego``.

    Args:
        principal: Who moves the alias.
        is_admin: Whether they administer the tenant (a registry administrator or the tenant's admin role).
        capacities: Their approver capacities in the model's tenant.
        alias: The alias moved.
        target: ``(number, state)`` of the version it is to point at.
        canary: ``(number, state)`` of a canary version, if any.
        current: ``(number, state)`` of the version it points at now, if any.
        evals: The target version's eval results, as in the approval input.
        baseline: The completed evals of the version the alias points at now, or None.
        unit: The target's release unit against the version the alias points at now (as in the approval input).
        adapter_of: For a LoRA adapter, the base the target is bound to (as in the approval input).
    """

    def ref(value: tuple[int, str] | None) -> TargetDoc | None:
        return None if value is None else {"number": value[0], "state": value[1]}

    return {
        "principal": {"name": principal, "is_admin": is_admin, "capacities": sorted(set(capacities))},
        "alias": alias,
        "target": {"number": target[0], "state": target[1]},
        "canary": ref(canary),
        "current": ref(current),
        "evals": sorted(evals, key=lambda e: e["suite"]),
        "baseline": baseline,
        "unit": unit,
        "adapter_of": adapter_of,
    }
