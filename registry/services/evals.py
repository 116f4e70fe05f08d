"""Evals: eval sets, the ``evaluating`` stage's jobs and reading their results.

Entering ``evaluating`` (:mod:`registry.services.stages.evaluating`, which also holds what policy sees
of the results) writes a ``pending`` result per applicable suite and queues a ``run_eval`` job per
result. :func:`run_eval` re-checks the version (still evaluating, no
unsafe or unscanned file, not flagged), materializes its files hash-checked, runs the runner in its
subprocess (:mod:`registry.evals.sandbox`) outside any transaction, stores the log as a blob, and
records the outcome only over a ``pending`` result: a job run twice (its worker died after the run)
records once. When no result is pending any more the version moves on to ``awaiting_approval``.
A LoRA adapter runs on the base it is bound to (:mod:`registry.services.adapter_evals`): the base is held to
the binding and checked like the version (no unsafe or unscanned file), and copied out beside the adapter for
the suites that load it; the result records the base it ran on (``ran_on``).

Usage (a sketch, not run as a doctest)::

    add_evalset(session, admin, "safety", data, "refusals", blob_store=store, clock=clock)
    version_evals(session, principal, "acme", "tiny", 1)
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from registry import audit
from registry.auth import AuthenticatedPrincipal, Permission, require, require_admin
from registry.clock import Clock
from registry.db.models import EvalResult, EvalSet, ScanResult, Version
from registry.db.session import begin_write
from registry.domain.errors import (
    BlobVanishedError,
    DigestMismatchError,
    InvalidInputError,
    LimitExceededError,
    NotFoundError,
    PermissionDeniedError,
)
from registry.domain.states import VersionState
from registry.evals import sandbox, workdirs
from registry.evals.cases import MAX_EVALSET_BYTES, parse_cases, prompt_templates_read
from registry.evals.runners import AdapterOnBase, needs_base
from registry.evals.suites import EVALSET_NAME
from registry.scanning import SCANNER_NAME, SCANNER_VERSION
from registry.services import adapter_evals, lifecycle
from registry.services.blobs import grant_blob, record_blob
from registry.services.loaders import find_version_unchecked, lock_version_unchecked, version_ref
from registry.services.ports import Ports
from registry.services.stages import evaluating

# COMPLETED is read as evals.COMPLETED (exports): a result's statuses are the stage's.
from registry.services.stages.evaluating import COMPLETED, PENDING, facts_of, results_of  # noqa: F401
from registry.storage.base import BlobStore

log = logging.getLogger(__name__)

MAX_DESCRIPTION = 1024


class EvalSetNotFoundError(NotFoundError):
    code = "evalset-not-found"

    def __init__(self, name: str, number: int | None = None) -> None:
        which = f"{name} version {number}" if number is not None else name
        super().__init__(f"no eval set {which}", name=name, number=number)


class EvalNotFoundError(NotFoundError):
    code = "eval-not-found"

    def __init__(self, ref: str, suite: str) -> None:
        super().__init__(f"{ref} has no eval of suite {suite!r}", suite=suite)


# --- eval sets ---------------------------------------------------------------------------------


def _require_reader(principal: AuthenticatedPrincipal) -> None:
    """Eval sets belong to the deployment: anyone who may read models somewhere may read them."""
    if principal.is_admin or any(Permission.READ in principal.permissions(t) for t in principal.roles):
        return
    raise PermissionDeniedError(f"{principal.name!r} may not read eval sets", principal=principal.name,
                                permission=Permission.READ.value)


def validate_evalset_name(name: str) -> str:
    if not isinstance(name, str) or not EVALSET_NAME.fullmatch(name):
        raise InvalidInputError(f"eval set name {str(name)[:40]!r} is not a lowercase slug of at most 64 characters",
                                field="name")
    return name


def authorize_evalset_upload(principal: AuthenticatedPrincipal, name: str, size: int | None) -> None:
    """Check an eval set upload before its bytes are read: who sends it, under which name, and how large.

    Args:
        principal: The caller.
        name: The eval set's name.
        size: The bytes the caller says it sends (its Content-Length), when it says.

    Raises:
        PermissionDeniedError: only administrators add eval sets.
        InvalidInputError: not an eval set name.
        LimitExceededError: ``size`` is over the largest eval set.
    """
    require_admin(principal)
    validate_evalset_name(name)
    if size is not None and size > MAX_EVALSET_BYTES:
        raise LimitExceededError(f"an eval set of {size} bytes is over the limit of {MAX_EVALSET_BYTES}",
                                 size=size, limit=MAX_EVALSET_BYTES)


def add_evalset(session: Session, principal: AuthenticatedPrincipal, name: str, data: bytes, description: str,
                *, blob_store: BlobStore, clock: Clock) -> tuple[EvalSet, bool]:
    """Store ``data`` as the next version of eval set ``name`` (or return the version it already is).

    Returns:
        The eval set version, and whether it was created (False: these bytes are already a version).

    Raises:
        PermissionDeniedError: only administrators add eval sets (they gate every tenant's releases).
        EvalSetError: the bytes are not a valid eval set (the line says where).
    """
    require_admin(principal)
    validate_evalset_name(name)
    from registry.domain.text import validate_text

    validate_text(description, field="description", max_length=MAX_DESCRIPTION)
    cases = parse_cases(data)
    for attempt in (1, 2):
        put = blob_store.put(io.BytesIO(data), expected_size=len(data))
        begin_write(session)
        existing = session.scalar(select(EvalSet).where(EvalSet.name == name, EvalSet.digest == put.digest))
        if existing is not None:
            return existing, False
        try:
            record_blob(session, put.digest, put.size, blob_store=blob_store)
            break
        except BlobVanishedError:
            # Garbage collection took stored bytes the put found: put them again, once.
            session.rollback()
            if attempt == 2:
                raise
    number = (session.scalar(select(func.max(EvalSet.number)).where(EvalSet.name == name)) or 0) + 1
    row = EvalSet(name=name, number=number, digest=put.digest, size=put.size, cases=len(cases),
                  categories=dict(sorted(Counter(c.category for c in cases).items())),
                  languages=dict(sorted(Counter(c.language for c in cases).items())),
                  prompt_templates=prompt_templates_read(cases), description=description, created_by=principal.name,
                  created_at=clock.now())
    session.add(row)
    session.flush()
    audit.append(session, actor=principal.name, action="evalset.added", subject=f"evalset:{name}@{number}",
                 tenant=None, details={"digest": put.digest, "cases": len(cases), "categories": row.categories,
                                       "prompt_templates": row.prompt_templates})
    session.commit()
    return row, True


def list_evalsets(session: Session, principal: AuthenticatedPrincipal) -> list[EvalSet]:
    """The newest version of every eval set, by name."""
    _require_reader(principal)
    newest = (select(EvalSet.name, func.max(EvalSet.number).label("number")).group_by(EvalSet.name).subquery())
    return list(session.scalars(select(EvalSet).join(
        newest, (EvalSet.name == newest.c.name) & (EvalSet.number == newest.c.number)).order_by(EvalSet.name)))


def evalset_versions(session: Session, principal: AuthenticatedPrincipal, name: str) -> list[EvalSet]:
    _require_reader(principal)
    rows = list(session.scalars(select(EvalSet).where(EvalSet.name == name).order_by(EvalSet.number)))
    if not rows:
        raise EvalSetNotFoundError(name)
    return rows


def get_evalset(session: Session, principal: AuthenticatedPrincipal, name: str, number: int | None) -> EvalSet:
    """Version ``number`` of eval set ``name`` (its newest with None)."""
    _require_reader(principal)
    query = select(EvalSet).where(EvalSet.name == name)
    query = query.where(EvalSet.number == number) if number is not None else query.order_by(EvalSet.number.desc())
    row = session.scalars(query.limit(1)).first()
    if row is None:
        raise EvalSetNotFoundError(name, number)
    return row


def evalset_bytes(blob_store: BlobStore, row: EvalSet) -> bytes:
    """An eval set's stored bytes, checked against its digest."""
    data = b"".join(blob_store.open_range(row.digest))
    actual = hashlib.sha256(data).hexdigest()
    if actual != row.digest:
        raise DigestMismatchError(f"evalset:{row.name}@{row.number}", expected=row.digest, actual=actual)
    return data


# --- the evaluating stage ----------------------------------------------------------------------


def _unsafe_reason(session: Session, version: Version) -> str | None:
    """Why the version must not be evaluated (never load a file that failed a scan), or None."""
    if version.flagged_at is not None:
        return f"flagged: {version.flag_reason}"
    for f in version.files:
        verdict = session.scalar(select(ScanResult.verdict).where(
            ScanResult.blob_digest == f.sha256, ScanResult.path == f.path, ScanResult.scanner == SCANNER_NAME,
            ScanResult.scanner_version == SCANNER_VERSION))
        if verdict is None or verdict in ("unsafe", "error"):
            return f"{f.path}: scan verdict {verdict or 'missing'}"
    return None


def run_eval(session_factory: sessionmaker[Session], result_id: int, *, ports: Ports,
             work_root: Path | None = None, isolation: sandbox.Isolation = sandbox.Isolation()) -> None:
    """The ``run_eval`` job: run one suite on one version and record the outcome (once).

    Args:
        ports: the blob store the files come from, the clock, and what the version's next stage needs.
        isolation: how the runner is shut in (the operator's settings); by default it must be.
    """
    blob_store = ports.blob_store
    with session_factory() as session:
        row = session.get(EvalResult, result_id)
        if row is None or row.status != PENDING:
            return
        version = session.get(Version, row.version_id)
        if version is None or version.state != VersionState.EVALUATING.value:
            return
        unsafe = _unsafe_reason(session, version)
        files = [(f.path, f.sha256) for f in version.files]
        facts = facts_of(session, version)
        definition = dict(row.definition)
        evalsets = [(e["name"], e["digest"]) for e in definition.get("evalsets", [])]
        # A result queued before results named their base (migration 0036) runs on the bound base now, and says so.
        ran_on = row.ran_on if row.ran_on is not None else adapter_evals.ran_on(session, version)
        base, refused = adapter_evals.base_for_run(session, version, ran_on)
        if base is not None and unsafe is None:
            unsafe = _unsafe_reason(session, base.version)
            unsafe = None if unsafe is None else f"its base {base.adapter.base_ref}: {unsafe}"
        adapter = base.adapter if base is not None else None
        base_files = base.files if base is not None and needs_base(row.runner, definition.get("settings")) else None
    if refused is not None:
        outcome = sandbox.failed(*refused)
    elif unsafe is not None:
        outcome = sandbox.failed("unsafe", f"not evaluated: {unsafe}")
    else:
        outcome = _run_outside_transaction(files, evalsets, definition, facts, blob_store, work_root, isolation,
                                           adapter=adapter, base_files=base_files)
    _record(session_factory, result_id, outcome, _store_log(blob_store, outcome.log), ports=ports, ran_on=ran_on)


def _run_outside_transaction(files: list[tuple[str, str]], evalsets: list[tuple[str, str]],
                             definition: dict[str, Any], facts: dict[str, Any] | None, blob_store: BlobStore,
                             work_root: Path | None, isolation: sandbox.Isolation, *,
                             adapter: AdapterOnBase | None = None,
                             base_files: list[tuple[str, str]] | None = None) -> sandbox.Outcome:
    # The copy lives in a locked run directory: if this worker is killed, the next sweep removes it.
    with workdirs.eval_workdir(work_root) as root:
        try:
            model_dir = sandbox.materialize(files, blob_store, root / "model")
            if adapter is not None and base_files is not None:
                adapter = dataclasses.replace(adapter, base_dir=sandbox.materialize(base_files, blob_store,
                                                                                    root / "base"))
            # Eval-set names are slugs (no "/"): one directory holds them all, each hash-checked.
            sets_dir = sandbox.materialize([(f"{name}.jsonl", digest) for name, digest in evalsets], blob_store,
                                           root / "evalsets")
            sets = [{"name": name, "digest": digest, "path": str(sets_dir / f"{name}.jsonl")}
                    for name, digest in evalsets]
        except DigestMismatchError as e:
            return sandbox.failed("integrity", f"a stored blob does not match its digest: {e.message}")
        # trust_remote_code stays off: remote code needs a security approval, which comes after evals.
        return sandbox.run_runner(definition, model_dir, sets, facts=facts, work_root=root, trust_remote_code=False,
                                  isolation=isolation, adapter=adapter)


def _store_log(blob_store: BlobStore, log_bytes: bytes) -> str | None:
    if not log_bytes:
        return None
    return blob_store.put(io.BytesIO(log_bytes), expected_size=len(log_bytes)).digest


def _record(session_factory: sessionmaker[Session], result_id: int, outcome: sandbox.Outcome,
            log_digest: str | None, *, ports: Ports, ran_on: dict[str, Any] | None = None) -> None:
    with session_factory() as session:
        begin_write(session)
        row = session.get(EvalResult, result_id)
        if row is None:
            return
        version = lock_version_unchecked(session, row.version_id)
        session.refresh(row)
        if version is None or row.status != PENDING:
            return  # recorded by an earlier run of this job: count it once
        if log_digest is not None:
            grant_blob(session, version.model.tenant_id, log_digest, len(outcome.log), via="eval",
                       blob_store=ports.blob_store)
        result = outcome.result
        row.status = outcome.status
        row.reason, row.error = outcome.reason, outcome.error
        row.metrics = result.get("metrics", {})
        row.breakdown = result.get("breakdown", {})
        row.cases = result.get("cases", [])
        row.log_digest, row.duration_ms, row.finished_at = log_digest, outcome.duration_ms, ports.clock.now()
        row.isolated = outcome.isolated
        if row.ran_on is None:
            row.ran_on = ran_on
        tenant = version.model.tenant.name
        audit.append(session, actor="system", action="version.eval.recorded", subject=version_ref(version),
                     tenant=tenant, details={"suite": row.suite, "suite_version": row.suite_version,
                                             "status": row.status, "reason": row.reason,
                                             "isolated": row.isolated, "ran_on": row.ran_on,
                                             "metrics": dict(list(row.metrics.items())[:50])})
        session.flush()
        if version.state == VersionState.EVALUATING.value:
            lifecycle.conclude(session, version, evaluating.judge(session, version), ports)
        session.commit()


def fail_eval(session_factory: sessionmaker[Session], result_id: int, error: str, *, ports: Ports) -> None:
    """When a ``run_eval`` job is dead (its retries spent): record the suite failed with the last error."""
    _record(session_factory, result_id, sandbox.failed("job_failed", error), None, ports=ports)


# --- reading -----------------------------------------------------------------------------------


def result_doc(row: EvalResult, *, cases: bool = False) -> dict[str, Any]:
    failed_cases = sum(1 for c in row.cases if isinstance(c, dict) and c.get("passed") is False)
    doc = {"suite": row.suite, "suite_version": row.suite_version, "runner": row.runner,
           "runner_version": row.runner_version, "status": row.status, "reason": row.reason, "error": row.error,
           "metrics": row.metrics, "breakdown": row.breakdown, "cases_recorded": len(row.cases),
           "cases_failed": failed_cases, "log_digest": row.log_digest, "duration_ms": row.duration_ms,
           "isolated": row.isolated, "components": row.components, "ran_on": row.ran_on,
           "evalsets": row.definition.get("evalsets", []), "settings": row.definition.get("settings", {}),
           "created_at": row.created_at.isoformat(),
           "finished_at": row.finished_at.isoformat() if row.finished_at else None}
    if cases:
        doc["cases"] = row.cases
    return doc


def version_evals(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str,
                  number: int) -> tuple[Version, list[dict[str, Any]]]:
    """The eval results of a version, one per suite (per-case outcomes left out: see :func:`version_eval`)."""
    require(principal, tenant, Permission.READ)
    version = find_version_unchecked(session, tenant, name, number)
    return version, [result_doc(r) for r in results_of(session, version)]


def version_eval(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, number: int,
                 suite: str) -> dict[str, Any]:
    """One suite's result on a version, with every case outcome."""
    require(principal, tenant, Permission.READ)
    version = find_version_unchecked(session, tenant, name, number)
    row = session.scalar(select(EvalResult).where(EvalResult.version_id == version.id, EvalResult.suite == suite))
    if row is None:
        raise EvalNotFoundError(version_ref(version), suite)
    return result_doc(row, cases=True)


def eval_log(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, number: int,
             suite: str, *, blob_store: BlobStore) -> bytes:
    """The runner's log of one suite on a version (empty when there is none)."""
    doc = version_eval(session, principal, tenant, name, number, suite)
    if not doc["log_digest"]:
        return b""
    return b"".join(blob_store.open_range(doc["log_digest"]))
