"""Prometheus metrics read from the database when ``/metrics`` is scraped.

Two kinds of series make up ``/metrics`` (``prometheus-client`` exposition):

- **Read from the database at scrape time** (this module, :class:`DatabaseCollector`): what workers do
  (they run in other processes, that nobody scrapes) and what the queue holds. Every API replica
  reads the same rows, so every replica reports the same values: aggregate them with ``max without
  (instance)``, never ``sum``.

  ===================================================  ==========  ==========================================
  series                                               type        from
  ===================================================  ==========  ==========================================
  ``modelreg_jobs{kind,state}``                        gauge       ``jobs``, by kind and state
  ``modelreg_queue_depth{kind}``                       gauge       queued jobs that are due now
  ``modelreg_queue_oldest_age_seconds{kind}``          gauge       how long the oldest due job has waited
  ``modelreg_versions{state}``                         gauge       ``versions``, by state
  ``modelreg_mirrored_bytes_total``                    counter     sizes of mirrored files (rate: mirror rate)
  ``modelreg_mirrored_files_total``                    counter     mirrored files
  ``modelreg_scan_results_total{scanner,verdict}``     counter     ``scan_results``
  ``modelreg_eval_duration_seconds{suite,status}``     histogram   ``eval_results`` that finished
  ``modelreg_manifests_issued_total``                  counter     ``release_issuances``
  ``modelreg_metrics_database_up``                     gauge       1 when the queries above answered
  ===================================================  ==========  ==========================================

- **Counted in the API process** (``api/metrics.py``), one set per replica, summed across them: request
  latency by route template and status class, manifest requests by outcome, sign-ins refused, and the
  long polls held now.

Labels come from small closed sets (job kinds, states, scanner names, the deployment's suites, route
templates), never from tenants, models, paths or tokens, so the number of series stays bounded. Each
query is an aggregate over an indexed column or a whole small table, run in one read-only transaction
with a statement timeout on PostgreSQL; a process keeps the answer ``cache_seconds`` so scrapes
arriving together cost one round of queries.

Usage (a sketch, not run as a doctest)::

    registry = CollectorRegistry()
    registry.register(DatabaseCollector(container.session_factory, container.clock))
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import case, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from registry.clock import Clock
from registry.db.models import EvalResult, Job, ReleaseIssuance, ScanResult, Version, VersionFile
from registry.db.session import is_postgres
from registry.domain.errors import PermissionDeniedError

if TYPE_CHECKING:
    from registry.auth import AuthenticatedPrincipal

log = logging.getLogger(__name__)

EVAL_BUCKETS_SECONDS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600)
STATEMENT_TIMEOUT_MS = 2000


class DatabaseCollector(Collector):
    """The scrape-time series of the table above, read in one transaction.

    A database that does not answer yields ``modelreg_metrics_database_up 0`` and no other series of
    this collector: the scrape itself succeeds, so the in-process series still arrive.
    """

    def __init__(self, session_factory: sessionmaker[Session], clock: Clock, cache_seconds: float = 5.0) -> None:
        self._session_factory = session_factory
        self._clock = clock
        self._cache_seconds = cache_seconds
        self._lock = threading.Lock()
        self._cached: tuple[float, list[Metric]] | None = None

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= self._cache_seconds:
                self._cached = (now, self._read())
            families = self._cached[1]
        yield from families

    def _read(self) -> list[Metric]:
        up = GaugeMetricFamily("modelreg_metrics_database_up",
                               "1 when the database answered the metrics queries of this scrape, else 0")
        try:
            with self._session_factory() as session:
                if is_postgres(session):
                    session.execute(text("SET TRANSACTION READ ONLY"))
                    session.execute(text(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}"))
                families = list(self._families(session))
                session.rollback()
        except Exception as exc:  # a metrics scrape must not fail because the database is away
            log.warning("metrics: database queries failed: %s", type(exc).__name__)
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        return [*families, up]

    def _families(self, session: Session) -> Iterable[Metric]:
        jobs = GaugeMetricFamily("modelreg_jobs", "Jobs in the queue table, by kind and state",
                                 labels=["kind", "state"])
        for kind, state, count in session.execute(
                select(Job.kind, Job.state, func.count()).group_by(Job.kind, Job.state)):
            jobs.add_metric([kind, state], count)
        yield jobs

        now = self._clock.now()
        depth = GaugeMetricFamily("modelreg_queue_depth", "Queued jobs that are due now, by kind", labels=["kind"])
        oldest = GaugeMetricFamily("modelreg_queue_oldest_age_seconds",
                                   "How long the oldest due queued job has been due, by kind", labels=["kind"])
        # (state, run_after) is the claim index: this reads only the due part of the queue.
        for kind, count, first_due in session.execute(
                select(Job.kind, func.count(), func.min(Job.run_after))
                .where(Job.state == "queued", Job.run_after <= now).group_by(Job.kind)):
            depth.add_metric([kind], count)
            oldest.add_metric([kind], max(0.0, (now - _aware(first_due, now)).total_seconds()))
        yield depth
        yield oldest

        versions = GaugeMetricFamily("modelreg_versions", "Model versions, by state", labels=["state"])
        for state, count in session.execute(select(Version.state, func.count()).group_by(Version.state)):
            versions.add_metric([state], count)
        yield versions

        files, size = session.execute(
            select(func.count(), func.coalesce(func.sum(VersionFile.size), 0))
            .where(VersionFile.mirrored_at.is_not(None))).one()
        yield CounterMetricFamily("modelreg_mirrored_bytes", "Bytes of version files mirrored into the store "
                                  "(its rate is the mirror rate)", value=int(size))
        yield CounterMetricFamily("modelreg_mirrored_files", "Version files mirrored into the store", value=files)

        scans = CounterMetricFamily("modelreg_scan_results", "Scan verdicts recorded, by scanner and verdict",
                                    labels=["scanner", "verdict"])
        for scanner, verdict, count in session.execute(
                select(ScanResult.scanner, ScanResult.verdict, func.count())
                .group_by(ScanResult.scanner, ScanResult.verdict)):
            scans.add_metric([scanner, verdict], count)
        yield scans

        yield self._eval_durations(session)

        issued = session.scalar(select(func.count()).select_from(ReleaseIssuance))
        yield CounterMetricFamily("modelreg_manifests_issued", "Release manifests issued (200 answers)",
                                  value=issued or 0)

    def _eval_durations(self, session: Session) -> Metric:
        histogram = HistogramMetricFamily("modelreg_eval_duration_seconds",
                                          "Duration of finished evals, by suite and status",
                                          labels=["suite", "status"])
        seconds = EvalResult.duration_ms / 1000.0
        le = [func.sum(case((seconds <= bound, 1), else_=0)) for bound in EVAL_BUCKETS_SECONDS]
        rows = session.execute(
            select(EvalResult.suite, EvalResult.status, func.count(), func.coalesce(func.sum(seconds), 0), *le)
            .where(EvalResult.status != "pending", EvalResult.duration_ms.is_not(None))
            .group_by(EvalResult.suite, EvalResult.status))
        for suite, status, count, total, *cumulative in rows:
            buckets = [(_bound(b), int(c or 0)) for b, c in zip(EVAL_BUCKETS_SECONDS, cumulative)]
            histogram.add_metric([suite, status], [*buckets, ("+Inf", count)], sum_value=float(total))
        return histogram


def _bound(value: float) -> str:
    return f"{float(value)}"


def _aware(value, now):
    """SQLite hands back naive datetimes for aware columns in aggregates: read them as UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=now.tzinfo)


def authorize_scrape(principal: "AuthenticatedPrincipal") -> None:
    """With ``metrics_public`` off, only administrators read ``/metrics``: it describes the whole deployment.

    Raises:
        PermissionDeniedError: the principal is no administrator.
    """
    if not principal.is_admin:
        raise PermissionDeniedError("reading metrics needs an administrator (or MODELREG_METRICS_PUBLIC=true)")
