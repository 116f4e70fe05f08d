"""Scanning sealed versions: one ``scan_blob`` job per file, results cached by blob and scanner.

When a version is sealed it moves to ``scanning`` and each of its files without a cached result for
the current scanner version gets a job. The job that records the last result decides: an ``unsafe``
file fails the version with reason ``unsafe_file``, a file whose scan ended in ``error`` fails it with
``scan_error`` (a file nobody could decide on is never loaded); otherwise the lifecycle moves the version
to its next stage (approval, where policy decides about ``suspicious`` files). ``modelscan`` runs beside our engine on
the formats it knows; its result is stored too, but never decides.

A rescan (``rescan_all``, after a scanner upgrade) scans every stored file again; an approved version
whose file turns unsafe is revoked (:mod:`registry.services.revocations`), and one past scanning but
not approved yet is flagged for its reviewers, with an audit event.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from registry import audit, jobs
from registry.auth import AuthenticatedPrincipal, Permission, require, require_admin
from registry.clock import Clock
from registry.db.models import ScanResult, Version, VersionFile
from registry.db.session import begin_write, is_postgres
from registry.domain.states import VersionState
from registry.services import lifecycle, revocations
from registry.scanning import SCANNER_NAME, SCANNER_VERSION, FileScan, Verdict, scan_stream
from registry.storage.base import BlobStore

log = logging.getLogger(__name__)

PAST_SCANNING = (VersionState.EVALUATING.value, VersionState.AWAITING_APPROVAL.value,
                 VersionState.APPROVED.value)


def _cached(session: Session, digest: str, path: str, scanner: str | None = None,
            version: str | None = None) -> ScanResult | None:
    """A stored result for these bytes under this path; modelreg's current scanner unless told."""
    return session.scalar(select(ScanResult).where(
        ScanResult.blob_digest == digest, ScanResult.path == path,
        ScanResult.scanner == (scanner or SCANNER_NAME), ScanResult.scanner_version == (version or SCANNER_VERSION)))


def queue_scans(session: Session, version: Version) -> int:
    """Queue a ``scan_blob`` job per file of ``version`` without a cached result; return how many."""
    pending = 0
    for f in version.files:
        if _cached(session, f.sha256, f.path) is None:
            _queue_scan(session, f.sha256, f.path)
            pending += 1
    return pending


def _queue_scan(session: Session, digest: str, path: str) -> None:
    jobs.enqueue_job(session, jobs.JobKind.SCAN_BLOB, {"digest": digest, "path": path},
                     SCANNER_VERSION, digest, path)


def scan_blob(session_factory: sessionmaker[Session], digest: str, path: str, *, blob_store: BlobStore,
              clock: Clock, run_modelscan: bool = True) -> None:
    """Job: scan one blob seen under ``path`` (if not cached), then settle every version waiting on it."""
    with session_factory() as session:
        cached = _cached(session, digest, path) is not None
        siblings = frozenset(session.scalars(
            select(VersionFile.path).where(VersionFile.version_id.in_(
                select(VersionFile.version_id).where(VersionFile.sha256 == digest, VersionFile.path == path)))))
    if not cached:
        results = [_scan_ours(blob_store, digest, path, siblings)]
        if run_modelscan:
            other = _scan_modelscan(blob_store, digest, path, results[0][0].format)
            if other is not None:
                results.append(other)
        with session_factory() as session:
            begin_write(session)
            for scan, ms in results:
                if _cached(session, digest, path, scan.scanner, scan.scanner_version) is None:
                    session.add(ScanResult(blob_digest=digest, path=path, scanner=scan.scanner,
                                           scanner_version=scan.scanner_version, format=scan.format,
                                           verdict=scan.verdict.value, findings=[f.as_dict() for f in scan.findings],
                                           duration_ms=ms))
            session.commit()
    settle_versions_of(session_factory, digest, path, clock=clock)


def _scan_ours(blob_store: BlobStore, digest: str, path: str, siblings: frozenset[str]) -> tuple[FileScan, int]:
    started = time.perf_counter()
    size = blob_store.stat(digest).size
    reader = blob_store.open_seekable(digest)
    try:
        scan = scan_stream(path, reader, size, siblings=siblings)
    finally:
        reader.close()
    # Recorded under the version this module caches by (one source of truth for the cache key).
    scan.scanner, scan.scanner_version = SCANNER_NAME, SCANNER_VERSION
    return scan, int((time.perf_counter() - started) * 1000)


def _scan_modelscan(blob_store: BlobStore, digest: str, path: str, sniffed: str) -> tuple[FileScan, int] | None:
    """Run modelscan on a temporary copy, for the formats it knows (it picks scanners by extension)."""
    from registry.scanning import modelscan_adapter

    suffix = modelscan_adapter.EXTENSION_FOR_FORMAT.get(sniffed)
    if suffix is None:
        return None
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="modelreg-modelscan-"))
    try:
        copy = workdir / f"blob{suffix}"
        with open(copy, "wb") as out:
            for chunk in blob_store.open_range(digest):
                out.write(chunk)
        scan = modelscan_adapter.scan_file_with_modelscan(copy, name=path, fmt=sniffed)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return scan, int((time.perf_counter() - started) * 1000)


def settle_versions_of(session_factory: sessionmaker[Session], digest: str, path: str, *, clock: Clock) -> None:
    """Decide every version in ``scanning`` that holds this file; revoke approved ones turned unsafe, and
    flag the ones awaiting a decision."""
    with session_factory() as session:
        version_ids = list(session.scalars(
            select(VersionFile.version_id).where(VersionFile.sha256 == digest, VersionFile.path == path)))
    for version_id in version_ids:
        with session_factory() as session:
            begin_write(session)
            query = select(Version).where(Version.id == version_id)
            if is_postgres(session):
                query = query.with_for_update()
            version = session.scalar(query)
            if version.state == VersionState.SCANNING.value:
                decide(session, version)
            elif version.state in PAST_SCANNING and version.flagged_at is None:
                _flag_if_unsafe(session, version, clock)
            session.commit()


def _verdicts(session: Session, version: Version) -> dict[str, ScanResult | None]:
    return {f.path: _cached(session, f.sha256, f.path) for f in version.files}


def decide(session: Session, version: Version) -> None:
    """Once every file of a ``scanning`` version has a result: fail it, or let the lifecycle move it on."""
    results = _verdicts(session, version)
    if any(r is None for r in results.values()):
        return
    summary = {p: r.verdict for p, r in results.items()}
    unsafe = sorted(p for p, r in results.items() if r.verdict == Verdict.UNSAFE.value)
    errored = sorted(p for p, r in results.items() if r.verdict == Verdict.ERROR.value)
    if unsafe or errored:
        version.failure_reason = "unsafe_file" if unsafe else "scan_error"
        version.failure_detail = {
            "message": f"{'unsafe' if unsafe else 'unscannable'} file(s): {', '.join(unsafe or errored)}",
            "files": unsafe or errored,
            "findings": {p: results[p].findings[:20] for p in (unsafe or errored)},
        }
        lifecycle.advance(session, version, VersionState.FAILED, "system",
                          {"reason": version.failure_reason, "files": unsafe or errored,
                           "scanner": SCANNER_NAME, "scanner_version": SCANNER_VERSION})
        return
    lifecycle.complete(session, version, "system",
                       {"scanner": SCANNER_NAME, "scanner_version": SCANNER_VERSION, "verdicts": summary})


def _flag_if_unsafe(session: Session, version: Version, clock: Clock) -> None:
    """An approved version turned unsafe is revoked; one not released yet is flagged for its reviewers."""
    results = _verdicts(session, version)
    unsafe = sorted(p for p, r in results.items() if r is not None and r.verdict == Verdict.UNSAFE.value)
    if not unsafe:
        return
    reason = f"rescan with {SCANNER_NAME} {SCANNER_VERSION} found unsafe: {', '.join(unsafe)}"
    if version.state == VersionState.APPROVED.value:
        revocations.revoke_as_system(session, version, reason, clock=clock, details={
            "files": unsafe, "scanner": SCANNER_NAME, "scanner_version": SCANNER_VERSION})
        return
    version.flagged_at = clock.now()
    version.flag_reason = reason[:256]
    audit.append(session, actor="system", action="version.flagged_for_revocation",
                 subject=f"{version.model.tenant.name}/{version.model.name}@{version.number}",
                 tenant=version.model.tenant.name,
                 details={"files": unsafe, "scanner": SCANNER_NAME, "scanner_version": SCANNER_VERSION})


def fail_scanning_versions_of(session_factory: sessionmaker[Session], digest: str, path: str, error: str) -> None:
    """When a scan job is dead: the versions waiting on it fail with ``scan_error``."""
    from registry.domain.errors import ScanFailedError
    from registry.services.versions import fail_version

    with session_factory() as session:
        ids = list(session.scalars(select(Version.id).join(VersionFile).where(
            VersionFile.sha256 == digest, VersionFile.path == path,
            Version.state == VersionState.SCANNING.value)))
    for version_id in ids:
        fail_version(session_factory, version_id,
                     ScanFailedError(f"scanning {path} failed: {error}", path=path, digest=digest))


def rescan_all(session: Session, principal: AuthenticatedPrincipal) -> int:
    """Queue a scan of every stored file that has no result from the current scanner version."""
    require_admin(principal)
    begin_write(session)
    rows = session.execute(
        select(VersionFile.sha256, VersionFile.path).join(Version)
        .where(VersionFile.sha256.is_not(None),
               Version.state.in_([VersionState.SCANNING.value, *PAST_SCANNING]))
        .distinct()
    ).all()
    queued = 0
    for digest, path in rows:
        if _cached(session, digest, path) is None:
            _queue_scan(session, digest, path)
            queued += 1
    audit.append(session, actor=principal.name, action="scan.rescan_requested", subject="registry",
                 details={"scanner": SCANNER_NAME, "scanner_version": SCANNER_VERSION, "queued": queued})
    session.commit()
    return queued


def version_scans(session: Session, principal: AuthenticatedPrincipal, version: Version, *,
                  limit: int | None = None) -> list[dict[str, Any]]:
    """Per file (the first ``limit`` files, or all): our newest verdict and every scanner's record beside it."""
    require(principal, version.model.tenant.name, Permission.READ)
    return file_scans(session, version.files if limit is None else version.files[:limit])


def file_scans(session: Session, files: Iterable[VersionFile]) -> list[dict[str, Any]]:
    """Per file of ``files``: our newest verdict and every scanner's record (name, version, verdict, findings)."""
    out = []
    for f in files:
        rows = list(session.scalars(select(ScanResult).where(
            ScanResult.blob_digest == f.sha256, ScanResult.path == f.path).order_by(ScanResult.id)))
        ours = [r for r in rows if r.scanner == SCANNER_NAME]
        current = next((r for r in reversed(ours) if r.scanner_version == SCANNER_VERSION), None)
        out.append({
            "path": f.path,
            "sha256": f.sha256,
            "verdict": current.verdict if current else None,
            "format": current.format if current else None,
            "scans": [{"scanner": r.scanner, "scanner_version": r.scanner_version, "format": r.format,
                       "verdict": r.verdict, "findings": r.findings, "duration_ms": r.duration_ms,
                       "scanned_at": r.created_at.isoformat()} for r in rows],
        })
    return out
