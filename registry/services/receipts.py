"""Receipts: which places hold a version now, as the node programs, ``cluster watch`` and admission say.

A node program reports (:func:`report`) with its node identity (a node token or a bound service account's
token: the ``fetch`` permission in the tenant of every model it names). Each place it holds becomes a
:class:`~registry.db.models.Receipt` of (principal, place, version); a repeated report changes only its
``last_reported_at``, a drop sets ``dropped_at``, a snapshot drops the reporter's places it no longer lists.
A version reported by the digest a kubelet saw (``cluster watch``: containerd reports an image volume's config
digest, CRI-O its manifest digest) is the version of that model served with that manifest or config digest
(``registry/services/image_digests.py``).

Nothing is forgotten when a node goes quiet: a place whose reporter has been silent longer than the operator's
``receipts_stale_after_seconds`` is shown ``stale``. When a version is revoked, every place still holding it
gets one ``version.still_running`` audit event in the revoking transaction (:func:`alert_still_running`), and
a place first reported holding it afterwards gets its own as it is recorded: once per place per revocation.

Usage (a sketch, not run as a doctest)::

    limiter.check(principal.name)
    answer = report(session, principal, parse_report(body), clock=clock)
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError as DatabaseIntegrityError
from sqlalchemy.orm import Session

from registry import audit
from registry.auth import AuthenticatedPrincipal, Permission, require
from registry.clock import Clock
from registry.db.models import Model, Receipt, ReceiptReporter, Tenant, Version
from registry.db.session import begin_write
from registry.domain.errors import ReceiptsRateLimitedError
from registry.domain.receipts import ADMISSION, Place, PlaceReport, ReceiptReport
from registry.domain.states import VersionState
from registry.services import image_digests

STILL_RUNNING = "version.still_running"
"""The audit action (and event type) of a place still holding a revoked version."""
MAX_ALERTS_PER_REVOCATION = 10_000
"""The most places one revocation names in ``version.still_running`` events of their own, in the revoking
transaction (the first by id); one more event counts the rest (:func:`alert_still_running`)."""


class ReportRateLimiter:
    """At most ``per_minute`` reports per principal in any minute, in this process (a sliding window)."""

    def __init__(self, per_minute: int, *, monotonic: Any = time.monotonic, max_principals: int = 100_000) -> None:
        self.per_minute = per_minute
        self._monotonic = monotonic
        self._max_principals = max_principals
        self._seen: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def check(self, principal: str) -> None:
        """Count one report of ``principal``.

        Raises:
            ReceiptsRateLimitedError: its minute's reports are used up (with the seconds until one is free).
        """
        now = self._monotonic()
        with self._lock:
            times = self._seen.get(principal)
            if times is None:
                if len(self._seen) >= self._max_principals:
                    self._forget(now)
                times = self._seen[principal] = deque()
            while times and times[0] <= now - 60.0:
                times.popleft()
            if len(times) >= self.per_minute:
                raise ReceiptsRateLimitedError(principal, self.per_minute, max(1, int(times[0] + 60.0 - now) + 1))
            times.append(now)

    def _forget(self, now: float) -> None:
        for name in [n for n, t in self._seen.items() if not t or t[-1] <= now - 60.0]:
            del self._seen[name]


def _reporter(session: Session, principal: str, program: str, node: str, scope: str,
              now: dt.datetime) -> ReceiptReporter:
    where = (ReceiptReporter.principal == principal, ReceiptReporter.program == program,
             ReceiptReporter.node == node, ReceiptReporter.scope == scope)
    row = session.scalar(select(ReceiptReporter).where(*where).with_for_update())
    if row is None:
        row = ReceiptReporter(principal=principal, program=program, node=node, scope=scope, first_report_at=now,
                              last_report_at=now)
        try:
            with session.begin_nested():
                session.add(row)
        except DatabaseIntegrityError:
            # The reporter's first two reports raced: the other one made it.
            row = session.scalars(select(ReceiptReporter).where(*where).with_for_update()).one()
    row.last_report_at = now
    return row


def _resolve(session: Session, line: PlaceReport, models: dict[str, Model | None]) -> Version | None:
    if line.model not in models:
        models[line.model] = session.scalar(
            select(Model).join(Tenant, Tenant.id == Model.tenant_id)
            .where(Tenant.name == line.tenant, Model.name == line.name))
    model = models[line.model]
    if model is None:
        return None
    if line.image_digest is not None:
        match = image_digests.version_for_image_digest(session, line.tenant, line.image_digest, model=line.name)
        return match.version if match is not None else None
    return session.scalar(select(Version).where(Version.model_id == model.id, Version.number == line.version,
                                                Version.deleted_at.is_(None)))


def report(session: Session, principal: AuthenticatedPrincipal, report: ReceiptReport, *, clock: Clock,
           stale_after: float) -> dict[str, Any]:
    """Record one report of a node program (module docstring); commits.

    Returns:
        ``recorded`` (places held), ``dropped`` (places newly dropped), ``rejected`` (the places naming no
        version of a model the caller may fetch: index, problem type, detail), ``stale_after_seconds``.

    Raises:
        PermissionDeniedError: a place names a model of a tenant where ``principal`` may not fetch (nothing
            is recorded).
    """
    for tenant in sorted({line.tenant for line in report.places}):
        require(principal, tenant, Permission.FETCH)
    now = clock.now()
    begin_write(session)
    reporter = _reporter(session, principal.name, report.program, report.node, report.scope, now)
    models: dict[str, Model | None] = {}
    resolved: list[tuple[PlaceReport, Version]] = []
    rejected: list[dict[str, Any]] = []
    for index, line in enumerate(report.places):
        version = _resolve(session, line, models)
        if version is None:
            what = f"digest {line.image_digest}" if line.image_digest else f"version {line.version}"
            rejected.append({"index": index, "type": "https://modelreg.dev/problems/version-not-found",
                             "detail": f"{line.model} has no {what}"})
        else:
            resolved.append((line, version))
    kept, dropped = _apply(session, reporter, principal.name, report.program, resolved, now)
    if report.snapshot:
        gone = session.execute(
            update(Receipt).where(Receipt.reporter_id == reporter.id, Receipt.dropped_at.is_(None),
                                  Receipt.id.not_in(kept) if kept else Receipt.id.is_not(None))
            .values(dropped_at=now).execution_options(synchronize_session=False))
        dropped += gone.rowcount or 0
    session.commit()
    return {"recorded": len(kept), "dropped": dropped, "rejected": rejected, "stale_after_seconds": stale_after}


def _apply(session: Session, reporter: ReceiptReporter, principal: str, program: str,
           lines: list[tuple[PlaceReport, Version]], now: dt.datetime) -> tuple[set[int], int]:
    """Hold or drop each place; returns the ids of the receipts held and how many were newly dropped."""
    digests = {line.place.digest() for line, _ in lines}
    existing: dict[tuple[str, int], Receipt] = {}
    if digests:
        for row in session.scalars(select(Receipt).where(Receipt.principal == principal,
                                                         Receipt.place_digest.in_(sorted(digests)))):
            existing[(row.place_digest, row.version_id)] = row
    held_keys: set[tuple[str, int]] = set()
    dropped = 0
    newly_held: list[tuple[Receipt, Version]] = []
    for line, version in lines:
        key = (line.place.digest(), version.id)
        row = existing.get(key)
        if not line.held:
            if row is not None and row.dropped_at is None:
                row.dropped_at = now
                dropped += 1
            if program == "cluster-watch" and line.place.where == "pod":
                dropped += _drop_admitted(session, line.place, version, now)
            continue
        if row is None:
            row = existing[key] = _new_receipt(reporter, principal, program, version, line.place, now)
            session.add(row)
            newly_held.append((row, version))
        elif row.dropped_at is not None:
            row.dropped_at, row.since, row.alerted_at = None, now, None
            newly_held.append((row, version))
        row.last_reported_at, row.reporter_id, row.program = now, reporter.id, program
        held_keys.add(key)
    session.flush()
    late = [(row, version) for row, version in newly_held
            if version.state == VersionState.REVOKED.value and row.dropped_at is None]
    if late:
        audit.append_many(session, [_alert_entry(row, version) for row, version in late])
        for row, _ in late:
            row.alerted_at = now
    return {existing[key].id for key in held_keys if existing[key].dropped_at is None}, dropped


def _drop_admitted(session: Session, place: Place, version: Version, now: dt.datetime) -> int:
    """A pod ``cluster watch`` saw go is gone for its admission decisions too (whoever recorded them: the pod is a
    fact of the cluster, and the reporter may fetch the version's tenant)."""
    gone = session.execute(
        update(Receipt).where(Receipt.program == ADMISSION, Receipt.version_id == version.id,
                              Receipt.namespace == place.namespace, Receipt.pod == place.pod,
                              Receipt.dropped_at.is_(None))
        .values(dropped_at=now).execution_options(synchronize_session=False))
    return gone.rowcount or 0


def _new_receipt(reporter: ReceiptReporter, principal: str, program: str, version: Version, place: Place,
                 now: dt.datetime) -> Receipt:
    return Receipt(reporter_id=reporter.id, version_id=version.id, principal=principal, program=program,
                   place_digest=place.digest(), place=place.as_dict(), node=place.node, namespace=place.namespace,
                   pod=place.pod, since=now, last_reported_at=now)


def record_admission(session: Session, *, principal: str, tenant: str, namespace: str, pod: str,
                     admitted: list[tuple[Version, str]], removed: bool, now: dt.datetime) -> None:
    """Record an admission decision's pod as a place holding each admitted version (``admitted``: the version and
    the reference's JSON pointer, which names the volume), or, for a pod being deleted, drop its places; in the
    caller's transaction. The admission webhook reports as program ``admission`` from no node. An AdmissionReview
    names no pod uid (its ``uid`` is the request's), so the place is the pod's namespace and name; ``cluster
    watch`` reporting the pod gone drops it (:func:`_apply`)."""
    record_admissions(session, principal=principal, tenant=tenant,
                      pods=[AdmittedPod(namespace, pod, admitted, removed)], now=now)


@dataclass(frozen=True)
class AdmittedPod:
    """One admission decision's pod (:func:`record_admissions`)."""

    namespace: str
    pod: str
    admitted: list[tuple[Version, str]]
    removed: bool = False


def record_admissions(session: Session, *, principal: str, tenant: str, pods: list[AdmittedPod],
                      now: dt.datetime) -> None:
    """:func:`record_admission` for the pods of many decisions of one tenant, in order, with one look-up of the
    reporter and one of the places for each run of admitted pods (a pod's deletion ends a run)."""
    if not pods:
        return
    reporter = _reporter(session, principal, ADMISSION, "", tenant, now)
    lines: list[tuple[PlaceReport, Version]] = []
    for decided in pods:
        if decided.removed:
            if lines:
                _apply(session, reporter, principal, ADMISSION, lines, now)
                lines = []
            session.execute(update(Receipt).where(Receipt.reporter_id == reporter.id,
                                                  Receipt.namespace == decided.namespace, Receipt.pod == decided.pod,
                                                  Receipt.dropped_at.is_(None))
                            .values(dropped_at=now).execution_options(synchronize_session=False))
            continue
        lines.extend((PlaceReport(tenant, version.model.name, version.number, None,
                                  Place("pod", "", namespace=decided.namespace, pod=decided.pod, uid="",
                                        volume=pointer[:256]), True), version)
                     for version, pointer in decided.admitted)
    if lines:
        _apply(session, reporter, principal, ADMISSION, lines, now)


# --- reading --------------------------------------------------------------------------------------


def is_stale(last_report_at: dt.datetime, now: dt.datetime, stale_after: float) -> bool:
    return (now - last_report_at).total_seconds() > stale_after


def place_public(row: Receipt, reporter: ReceiptReporter, now: dt.datetime, stale_after: float) -> dict[str, Any]:
    """One place as the API shows it."""
    return {"program": row.program, "principal": row.principal, "node": row.node or None,
            "reporter_node": reporter.node or None, "place": row.place, "since": row.since.isoformat(),
            "last_reported_at": row.last_reported_at.isoformat(),
            "reporter_last_report_at": reporter.last_report_at.isoformat(),
            "stale": is_stale(reporter.last_report_at, now, stale_after)}


def held_places(session: Session, version_ids: list[int], *, after: int = 0,
                limit: int = 1000) -> list[tuple[Receipt, ReceiptReporter]]:
    """The receipts of places holding one of these versions now (not dropped), by id, after ``after``."""
    if not version_ids:
        return []
    return [(r, p) for r, p in session.execute(
        select(Receipt, ReceiptReporter).join(ReceiptReporter, ReceiptReporter.id == Receipt.reporter_id)
        .where(Receipt.version_id.in_(version_ids), Receipt.dropped_at.is_(None), Receipt.id > after)
        .order_by(Receipt.id).limit(limit)).all()]


# --- revocation -----------------------------------------------------------------------------------


def _alert_entry(row: Receipt, version: Version, reporter_last_report_at: dt.datetime | None = None) -> audit.Entry:
    """The ``version.still_running`` event of one place holding revoked ``version``."""
    model = version.model
    return audit.Entry(actor=audit.SYSTEM_ACTOR, action=STILL_RUNNING,
                       subject=f"{model.tenant.name}/{model.name}@{version.number}", tenant=model.tenant.name,
                       details={"program": row.program, "principal": row.principal, "node": row.node or None,
                                "place": row.place, "since": row.since.isoformat(),
                                "last_reported_at": max(row.last_reported_at,
                                                        reporter_last_report_at or row.last_reported_at).isoformat(),
                                "receipt": row.id})


def alert_still_running(session: Session, version: Version, *, now: dt.datetime,
                        max_alerts: int = MAX_ALERTS_PER_REVOCATION) -> int:
    """Append one ``version.still_running`` event for each place holding ``version`` and not yet alerted of its
    revocation, in the caller's (revoking) transaction, as one batch (:func:`registry.audit.append_many`).

    Past ``max_alerts`` places (the first by id get their own event), one more event says how many places
    were not listed and how to list them (``more_places``, ``list_with``); those places are marked alerted too,
    so none is alerted later for this revocation.

    Returns:
        How many places were alerted, listed or counted.
    """
    rows = session.execute(
        select(Receipt, ReceiptReporter.last_report_at)
        .join(ReceiptReporter, ReceiptReporter.id == Receipt.reporter_id)
        .where(Receipt.version_id == version.id, Receipt.dropped_at.is_(None), Receipt.alerted_at.is_(None))
        .order_by(Receipt.id).limit(max_alerts)).all()
    if not rows:
        return 0
    entries = [_alert_entry(row, version, last_report_at) for row, last_report_at in rows]
    # Every unalerted place up to the last listed one is listed; past it, counted. One UPDATE either way, and
    # the rows loaded above are not flushed one by one.
    alerted = session.execute(
        update(Receipt).where(Receipt.version_id == version.id, Receipt.dropped_at.is_(None),
                              Receipt.alerted_at.is_(None))
        .values(alerted_at=now).execution_options(synchronize_session=False)).rowcount or 0
    more = alerted - len(rows)
    if more > 0:
        model = version.model
        ref = f"{model.tenant.name}/{model.name}@{version.number}"
        entries.append(audit.Entry(actor=audit.SYSTEM_ACTOR, action=STILL_RUNNING, subject=ref,
                                   tenant=model.tenant.name,
                                   details={"more_places": more, "listed": len(rows),
                                            "list_with": f"modelreg provenance running {ref}"}))
    audit.append_many(session, entries)
    return len(rows) + max(more, 0)
