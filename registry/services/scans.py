"""The ``scan_blob`` job, rescans and what scans show; the stage that queues the jobs is
:mod:`registry.services.stages.scanning`.

A job scans a blob once, stores the result under every path of its group (blob and scan key) and
deletes the versions' waits; for each version whose last wait it cleared, the stage's verdict
(:func:`registry.services.stages.scanning.judge`) goes to the lifecycle, which fails the version or
moves it on. ``modelscan`` runs beside our engine on the formats it knows; its result is stored too,
but never decides.

A rescan (``rescan_all``, after a scanner upgrade) scans every stored file again; an approved version
whose file turns unsafe is revoked (:mod:`registry.services.revocations`), and one past scanning but
not approved yet is flagged for its reviewers, with an audit event.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session, sessionmaker

from registry import audit
from registry.auth import AuthenticatedPrincipal, Permission, require, require_admin
from registry.db.models import ScanResult, ScanWait, Version, VersionFile
from registry.db.session import begin_write, is_postgres
from registry.domain.errors import ScanFailedError
from registry.domain.stages import states_after
from registry.domain.states import VersionState
from registry.scanning import (
    PATH_DEPENDENT_FORMATS,
    SCANNER_NAME,
    SCANNER_VERSION,
    FileScan,
    Verdict,
    scan_key,
    scan_stream,
)
from registry.services import lifecycle, revocations
from registry.services.ports import Ports
from registry.services.stages import scanning
from registry.services.stages.scanning import lock_scans_of, ours, results_of, shareable
from registry.storage.base import BlobStore

log = logging.getLogger(__name__)

PAST_SCANNING = tuple(s.value for s in states_after(VersionState.SCANNING))
"""The states of a version past scanning: a rescan that finds one of its files unsafe flags or revokes it."""


def scan_blob(session_factory: sessionmaker[Session], digest: str, path: str, *, ports: Ports,
              run_modelscan: bool = True) -> None:
    """Job: scan one blob as loaders open it under ``path``, once for every stored path of the same
    scan key, then settle the versions waiting on it.

    Its cost does not grow with the size of the versions holding the blob: they are settled through
    their waits (:class:`registry.db.models.ScanWait`), not by reading every file's result.
    """
    key = scan_key(path)
    blob_store = ports.blob_store
    with session_factory() as session:
        rows = results_of(session, [digest]).get(digest, [])
        done = {r.path for r in rows if ours(r)}
        missing = [p for p in _paths_with_key(session, digest, key) if p not in done]
        source = shareable(rows, key)
    scanned: dict[str, list[tuple[FileScan, int]]] = {}
    if missing and source is None:
        first = path if path in missing else missing[0]
        scanned[first] = _scan_all(session_factory, blob_store, digest, first, key, run_modelscan)
        if scanned[first][0][0].format in PATH_DEPENDENT_FORMATS:
            # These bytes are checked against their directory and siblings: each path gets its own scan.
            for other in missing:
                if other != first:
                    scanned[other] = _scan_all(session_factory, blob_store, digest, other, f"path:{other}",
                                               run_modelscan)
    with session_factory() as session:
        begin_write(session)
        lock_scans_of(session, digest)
        _record(session, digest, key, scanned)
        session.execute(delete(ScanWait).where(ScanWait.blob_digest == digest, ScanWait.scan_key == key))
        _settle(session, digest, key, ports)
        session.commit()


def _paths_with_key(session: Session, digest: str, key: str) -> list[str]:
    paths = session.scalars(select(VersionFile.path).where(VersionFile.sha256 == digest).distinct())
    return sorted(p for p in paths if scan_key(p) == key)


def _siblings(session_factory: sessionmaker[Session], digest: str, path: str) -> frozenset[str]:
    """The paths of every version holding this file: what its references may point at."""
    with session_factory() as session:
        return frozenset(session.scalars(
            select(VersionFile.path).where(VersionFile.version_id.in_(
                select(VersionFile.version_id).where(VersionFile.sha256 == digest, VersionFile.path == path)))))


def _scan_all(session_factory: sessionmaker[Session], blob_store: BlobStore, digest: str, path: str, key: str,
              run_modelscan: bool) -> list[tuple[FileScan, int]]:
    """Our scan of the blob under ``path`` and, for the formats it knows, modelscan's."""
    # Only the checks of a whole-path key read siblings; reading them costs a query as large as the version.
    siblings = _siblings(session_factory, digest, path) if key.startswith("path:") else frozenset()
    results = [_scan_ours(blob_store, digest, path, siblings)]
    if results[0][0].format in PATH_DEPENDENT_FORMATS and not siblings:
        results = [_scan_ours(blob_store, digest, path, _siblings(session_factory, digest, path))]
    if run_modelscan:
        other = _scan_modelscan(blob_store, digest, path, results[0][0].format)
        if other is not None:
            results.append(other)
    return results


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


def _record(session: Session, digest: str, key: str, scanned: dict[str, list[tuple[FileScan, int]]]) -> None:
    """Store the scans under their paths; the shareable one also under every other path of the key without a result.

    The paths are read again here, in the writing transaction, so a version sealed while the blob
    was being scanned gets the result too.
    """
    rows = results_of(session, [digest]).get(digest, [])
    have = {(r.path, r.scanner, r.scanner_version) for r in rows}
    records = []
    for scanned_path, results in scanned.items():
        for scan, ms in results:
            if (scanned_path, scan.scanner, scan.scanner_version) not in have:
                records.append({"blob_digest": digest, "path": scanned_path, "scanner": scan.scanner,
                                "scanner_version": scan.scanner_version, "format": scan.format,
                                "verdict": scan.verdict.value, "findings": [f.as_dict() for f in scan.findings],
                                "duration_ms": ms})
    if records:
        session.execute(insert(ScanResult), records)
    shared = [(p, results) for p, results in scanned.items() if results[0][0].format not in PATH_DEPENDENT_FORMATS]
    rows = results_of(session, [digest]).get(digest, [])
    source = shared[0][0] if shared else shareable(rows, key)
    if source is not None:
        done = {r.path for r in rows if ours(r)}
        scanning.copy_results(session, rows, source,
                              [p for p in _paths_with_key(session, digest, key) if p not in done])


def _settle(session: Session, digest: str, key: str, ports: Ports) -> None:
    """Decide each ``scanning`` version holding the blob that waits for nothing more; flag versions past
    scanning that hold it under a path of ``key`` now found unsafe."""
    in_scanning = session.scalars(select(VersionFile.version_id).join(Version).where(
        VersionFile.sha256 == digest, Version.state == VersionState.SCANNING.value).distinct()).all()
    for version_id in sorted(in_scanning):
        version = _lock(session, version_id)
        waiting = session.scalar(select(ScanWait.version_id).where(ScanWait.version_id == version_id).limit(1))
        # A version that started scanning before waits were recorded has none: judge() checks every file.
        if version.state == VersionState.SCANNING.value and waiting is None:
            lifecycle.conclude(session, version, scanning.judge(session, version), ports)
    unsafe_paths = set(session.scalars(select(ScanResult.path).where(
        ScanResult.blob_digest == digest, ScanResult.scanner == SCANNER_NAME,
        ScanResult.scanner_version == SCANNER_VERSION, ScanResult.verdict == Verdict.UNSAFE.value)))
    unsafe_paths = {p for p in unsafe_paths if scan_key(p) == key}
    if not unsafe_paths:
        return
    past = session.execute(select(VersionFile.version_id, VersionFile.path).join(Version).where(
        VersionFile.sha256 == digest, Version.state.in_(PAST_SCANNING), Version.flagged_at.is_(None))).all()
    by_version: dict[int, list[str]] = {}
    for version_id, path in past:
        if path in unsafe_paths:
            by_version.setdefault(version_id, []).append(path)
    for version_id in sorted(by_version):
        version = _lock(session, version_id)
        if version.state in PAST_SCANNING and version.flagged_at is None:
            _flag_unsafe(session, version, sorted(by_version[version_id]), ports)


def _lock(session: Session, version_id: int) -> Version:
    query = select(Version).where(Version.id == version_id)
    if is_postgres(session):
        query = query.with_for_update()
    return session.scalar(query)


def _flag_unsafe(session: Session, version: Version, unsafe: list[str], ports: Ports) -> None:
    """An approved version turned unsafe is revoked; one not released yet is flagged for its reviewers."""
    reason = f"rescan with {SCANNER_NAME} {SCANNER_VERSION} found unsafe: {', '.join(unsafe)}"
    if version.state == VersionState.APPROVED.value:
        revocations.revoke_as_system(session, version, reason, clock=ports.clock, details={
            "files": unsafe, "scanner": SCANNER_NAME, "scanner_version": SCANNER_VERSION})
        return
    version.flagged_at = ports.clock.now()
    version.flag_reason = reason[:256]
    audit.append(session, actor="system", action="version.flagged_for_revocation",
                 subject=f"{version.model.tenant.name}/{version.model.name}@{version.number}",
                 tenant=version.model.tenant.name,
                 details={"files": unsafe, "scanner": SCANNER_NAME, "scanner_version": SCANNER_VERSION})


def fail_scanning_versions_of(session_factory: sessionmaker[Session], digest: str, path: str, error: str) -> None:
    """When a scan job is dead: the versions waiting on it (any path of its scan key) fail with ``scan_error``."""
    key = scan_key(path)
    with session_factory() as session:
        rows = session.execute(select(Version.id, VersionFile.path).join(VersionFile).where(
            VersionFile.sha256 == digest, Version.state == VersionState.SCANNING.value)).all()
    for version_id in sorted({version_id for version_id, p in rows if scan_key(p) == key}):
        lifecycle.fail_version(session_factory, version_id,
                     ScanFailedError(f"scanning {path} failed: {error}", path=path, digest=digest))


def rescan_all(session: Session, principal: AuthenticatedPrincipal, *, ports: Ports) -> int:
    """Queue a scan of every stored file that has no result from the current scanner version."""
    require_admin(principal)
    begin_write(session)
    rows = session.execute(
        select(VersionFile.sha256, VersionFile.path).join(Version)
        .where(VersionFile.sha256.is_not(None),
               Version.state.in_([VersionState.SCANNING.value, *PAST_SCANNING]))
        .distinct()
    ).all()
    queued = scanning.queue_files(session, rows, None, ports)
    audit.append(session, actor=principal.name, action="scan.rescan_requested", subject="registry",
                 details={"scanner": SCANNER_NAME, "scanner_version": SCANNER_VERSION, "queued": queued})
    session.commit()
    return queued


def version_scans(session: Session, principal: AuthenticatedPrincipal, version: Version, *,
                  limit: int | None = None) -> list[dict[str, Any]]:
    """Per file (the first ``limit`` files, or all): our newest verdict and every scanner's record beside it."""
    require(principal, version.model.tenant.name, Permission.READ)
    return file_scans(session, version.files if limit is None else version.files[:limit])


_SCAN_READ_BATCH = 500
"""How many blob digests one read of ``scan_results`` asks for (a version may hold tens of thousands of files)."""


def file_scans(session: Session, files: Iterable[VersionFile]) -> list[dict[str, Any]]:
    """Per file of ``files``: our newest verdict and every scanner's record (name, version, verdict, findings).

    The records are read a batch of digests at a time, not one query per file: an ML-BOM or scan report of a
    20,000-file version is two reads of this, at approval and on every referrer listing.
    """
    files = list(files)
    by_file: dict[tuple[str, str], list[ScanResult]] = {}
    digests = sorted({f.sha256 for f in files})
    for start in range(0, len(digests), _SCAN_READ_BATCH):
        batch = digests[start:start + _SCAN_READ_BATCH]
        for row in session.scalars(select(ScanResult).where(ScanResult.blob_digest.in_(batch))
                                   .order_by(ScanResult.id)):
            by_file.setdefault((row.blob_digest, row.path), []).append(row)
    out = []
    for f in files:
        rows = by_file.get((f.sha256, f.path), [])
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
