"""The ``scanning`` stage: one ``scan_blob`` job per blob and scan key, results cached by blob and scanner.

Entering ``scanning`` (:func:`start`) groups the version's files without a result for the current
scanner version by blob and :func:`registry.scanning.scan_key` (what a scan reads of a path: the loader
its name selects); each group gets one job, and the version records a wait
(:class:`registry.db.models.ScanWait`) for it. A result stored under another path of the same key is
copied instead. The jobs live in :mod:`registry.services.scans`; the one that clears a version's last
wait asks :func:`judge`: an ``unsafe`` file fails the version with reason ``unsafe_file``, a file whose
scan ended in ``error`` fails it with ``scan_error`` (a file nobody could decide on is never loaded);
otherwise it passes (approval is where policy decides about ``suspicious`` files).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import and_, insert, select
from sqlalchemy.orm import Session

from registry import jobs
from registry.db.models import ScanResult, ScanWait, Version, VersionFile
from registry.db.session import lock_digest
from registry.domain.outcomes import Failed, Outcome, Passed, Pending
from registry.scanning import PATH_DEPENDENT_FORMATS, SCANNER_NAME, SCANNER_VERSION, Verdict, scan_key
from registry.services.loaders import tenant_of
from registry.services.ports import Ports


def start(session: Session, version: Version, ports: Ports) -> Outcome:
    """A ``scan_blob`` job per file without a cached result; with none to scan, the verdicts decide at once."""
    if queue_scans(session, version, ports) == 0:
        return judge(session, version)
    return Pending()


def ours(row: ScanResult) -> bool:
    """Whether ``row`` is modelreg's current scanner's result (the one that decides)."""
    return row.scanner == SCANNER_NAME and row.scanner_version == SCANNER_VERSION


def results_of(session: Session, digests: Iterable[str]) -> dict[str, list[ScanResult]]:
    """Every stored result for these blobs, by digest (in bounded batches: a version may hold 10,000)."""
    out: dict[str, list[ScanResult]] = {}
    digests = sorted(set(digests))
    for start in range(0, len(digests), 500):
        for row in session.scalars(select(ScanResult).where(ScanResult.blob_digest.in_(digests[start:start + 500]))):
            out.setdefault(row.blob_digest, []).append(row)
    return out


def shareable(rows: list[ScanResult], key: str) -> str | None:
    """A path whose current result holds for every path of scan key ``key``, or None."""
    return next((r.path for r in rows if ours(r) and r.format not in PATH_DEPENDENT_FORMATS
                 and scan_key(r.path) == key), None)


def queue_scans(session: Session, version: Version, ports: Ports) -> int:
    """Queue the scans ``version`` still needs and record that it waits for them; return how many.

    One ``scan_blob`` job per blob and scan key (:func:`registry.scanning.scan_key`): a blob listed
    under many paths that loaders open alike is scanned once. A result stored under another path
    of the same key is copied to this version's paths instead.
    """
    return queue_files(session, [(f.sha256, f.path) for f in version.files], version, ports)


def queue_files(session: Session, files: Iterable[tuple[str, str]], version: Version | None, ports: Ports) -> int:
    """Queue the scans ``files`` (digest, path) still need; ``version``, when given, waits for them."""
    groups: dict[tuple[str, str], list[str]] = {}
    for digest, path in files:
        groups.setdefault((digest, scan_key(path)), []).append(path)
    for digest in sorted({digest for digest, _ in groups}):
        lock_scans_of(session, digest)
    stored = results_of(session, (digest for digest, _ in groups))
    pending = 0
    for (digest, key), paths in groups.items():
        rows = stored.get(digest, [])
        done = {r.path for r in rows if ours(r)}
        missing = [p for p in paths if p not in done]
        if not missing:
            continue
        source = shareable(rows, key)
        if source is not None:
            copy_results(session, rows, source, missing)
            continue
        if version is not None:
            session.add(ScanWait(version_id=version.id, blob_digest=digest, scan_key=key))
        _queue_scan(session, ports, digest, missing[0], tenant_of(version) if version is not None else "")
        pending += 1
    session.flush()
    return pending


def _queue_scan(session: Session, ports: Ports, digest: str, path: str, tenant: str) -> None:
    ports.queue.enqueue_job(session, jobs.JobKind.SCAN_BLOB, {"digest": digest, "path": path},
                            SCANNER_VERSION, digest, scan_key(path), tenant=tenant)


def _relocated(findings: list[dict[str, Any]], source: str, target: str) -> list[dict[str, Any]]:
    """``findings`` of the scan under ``source``, located under ``target`` (validators name the file)."""
    if source == target:
        return findings
    return [{**f, "location": target + f["location"][len(source):]} if f["location"].startswith(source) else f
            for f in findings]


def copy_results(session: Session, rows: list[ScanResult], source: str, targets: list[str]) -> None:
    """Record every scanner's result under ``source`` for each of ``targets`` that lacks it."""
    have = {(r.path, r.scanner, r.scanner_version) for r in rows}
    records = [{"blob_digest": r.blob_digest, "path": t, "scanner": r.scanner, "scanner_version": r.scanner_version,
                "format": r.format, "verdict": r.verdict, "findings": _relocated(r.findings, source, t),
                "duration_ms": 0}
               for r in rows if r.path == source for t in targets if (t, r.scanner, r.scanner_version) not in have]
    if records:
        session.execute(insert(ScanResult), records)


# The first key of the scan locks (pg_advisory_xact_lock(int, int)), apart from gc's digest locks.
_SCAN_LOCK_CLASS = 0x5CA4


def lock_scans_of(session: Session, digest: str) -> None:
    """Take the lock on ``digest``'s scans until the transaction ends (SQLite's one writer is the same lock).

    A version that starts scanning reads the blob's results and, finding none, records that it waits;
    a scan job records the results and clears the waits. Without the lock a version could read before
    the job wrote and record its wait after the job cleared them, and then wait for ever (the job is
    done, so no other is queued).
    """
    lock_digest(session, _SCAN_LOCK_CLASS, digest)


def current_results(session: Session, version: Version) -> dict[str, ScanResult | None]:
    """Each file's result from the current scanner (None: not scanned yet), in one query however many files."""
    rows = session.execute(
        select(VersionFile.path, ScanResult).outerjoin(ScanResult, and_(
            ScanResult.blob_digest == VersionFile.sha256, ScanResult.path == VersionFile.path,
            ScanResult.scanner == SCANNER_NAME, ScanResult.scanner_version == SCANNER_VERSION))
        .where(VersionFile.version_id == version.id).order_by(VersionFile.path)).all()
    return {path: result for path, result in rows}


def judge(session: Session, version: Version) -> Outcome:
    """What the verdicts of a scanning version add up to: pending until every file has one, failed for
    an unsafe or unscannable file, else passed (with every verdict)."""
    results = current_results(session, version)
    if any(r is None for r in results.values()):
        return Pending()
    summary = {p: r.verdict for p, r in results.items()}
    unsafe = sorted(p for p, r in results.items() if r.verdict == Verdict.UNSAFE.value)
    errored = sorted(p for p, r in results.items() if r.verdict == Verdict.ERROR.value)
    if unsafe or errored:
        reason = "unsafe_file" if unsafe else "scan_error"
        detail = {
            "message": f"{'unsafe' if unsafe else 'unscannable'} file(s): {', '.join(unsafe or errored)}",
            "files": unsafe or errored,
            "findings": {p: results[p].findings[:20] for p in (unsafe or errored)},
        }
        return Failed(reason, detail, event={"reason": reason, "files": unsafe or errored,
                                             "scanner": SCANNER_NAME, "scanner_version": SCANNER_VERSION})
    return Passed({"scanner": SCANNER_NAME, "scanner_version": SCANNER_VERSION, "verdicts": summary})
