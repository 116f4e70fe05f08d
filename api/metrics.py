"""The series this API process counts itself, and the middleware that counts them.

One :class:`ApiMetrics` per app: its own ``CollectorRegistry`` holds the in-process series below and
the database collector (``registry/metrics.py``, which documents the whole of ``/metrics``).

- ``modelreg_http_request_duration_seconds{method,route,status_class}``: a histogram of request
  latency, labelled by the route *template* (``/v1/models/{tenant}/{name}/versions``), never the raw
  path, and by status class (``2xx``...); a request no route matched is ``route="unmatched"``.
- ``modelreg_manifest_requests_total{outcome,reason}``: release manifest requests, as nodes fetch them:
  ``issued`` (200), ``not_modified`` (304) or ``refused`` with ``reason`` the problem type's code
  (``revoked``, ``not-approved``, ``unauthenticated``...).
- ``modelreg_oidc_refusals_total{via,reason}``: single sign-ons refused, on the console (``via="console"``) or
  for ``modelreg login`` (``cli``), by ``SignInRefusedError.reason``. Refusals before the provider redeemed a
  code (a wrong ``state``, an ``error=``, a made-up code: anyone can send them) are counted here and not
  written to the audit log.
- ``modelreg_long_polls_waiting``: a gauge of the long polls (``?wait=``) this process holds now, registered
  with its event watcher and not yet answered.

Each replica counts its own requests: sum them across replicas.
"""

from __future__ import annotations

import json
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from registry.bootstrap import Container
from registry.metrics import DatabaseCollector
from registry.watch import EventWatcher

MANIFEST_ROUTE = "/v1/models/{tenant}/{name}/manifest"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# A problem document is small; a larger body on a refusal is not one, and is not read.
_PROBLEM_READ_LIMIT = 16 * 1024


class ApiMetrics:
    """The metrics registry of one app: in-process series plus the database collector."""

    def __init__(self, container: Container, watcher: EventWatcher) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "modelreg_http_request_duration_seconds", "API request latency, by route template and status class",
            ["method", "route", "status_class"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.manifest_requests = Counter(
            "modelreg_manifest_requests", "Release manifest requests, by outcome (and the refusal's problem type)",
            ["outcome", "reason"], registry=self.registry)
        self.oidc_refusals = Counter(
            "modelreg_oidc_refusals", "Single sign-ons refused, by where (console, cli) and why",
            ["via", "reason"], registry=self.registry)
        self.long_polls = Gauge(
            "modelreg_long_polls_waiting", "Long polls (?wait=) held now, registered and not yet answered",
            registry=self.registry)
        self.long_polls.set_function(lambda: watcher.waiting)
        self.registry.register(DatabaseCollector(container.session_factory, container.clock,
                                                 cache_seconds=container.settings.metrics_cache_seconds))

    def observe(self, method: str, route: str, status: int, seconds: float, problem_code: str | None) -> None:
        method = method if method in _METHODS else "other"
        self.latency.labels(method, route, f"{status // 100}xx").observe(seconds)
        if route == MANIFEST_ROUTE:
            if status == 200:
                self.manifest_requests.labels("issued", "").inc()
            elif status == 304:
                self.manifest_requests.labels("not_modified", "").inc()
            else:
                self.manifest_requests.labels("refused", problem_code or f"http-{status}").inc()


class MetricsMiddleware:
    """Times every HTTP request and records it, with its route template, in :class:`ApiMetrics`."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        problem = bytearray()
        is_problem = False

        async def send_and_watch(message: Message) -> None:
            nonlocal status, is_problem
            if message["type"] == "http.response.start":
                status = message["status"]
                content_type = dict(message.get("headers", [])).get(b"content-type", b"")
                is_problem = status >= 400 and content_type.startswith(b"application/problem+json")
            elif message["type"] == "http.response.body" and is_problem and len(problem) < _PROBLEM_READ_LIMIT:
                problem.extend(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_and_watch)
        finally:
            self.metrics.observe(scope["method"], _route_template(scope), status, time.perf_counter() - started,
                                 _problem_code(bytes(problem)) if is_problem else None)


def _route_template(scope: Scope) -> str:
    """The path template of the route that took the request, or ``unmatched``."""
    # FastAPI puts its own routes into the scope; the documentation routes (/openapi.json, /docs) are
    # plain Starlette routes it does not, so those are matched again here.
    route = scope.get("route")
    if route is None and "app" in scope:
        route = next((r for r in scope["app"].router.routes if r.matches(scope)[0] is Match.FULL), None)
    return getattr(route, "path", None) or "unmatched"


def _problem_code(body: bytes) -> str | None:
    """The code at the end of a problem document's ``type`` URI, or None."""
    try:
        kind = json.loads(body).get("type")
    except (ValueError, AttributeError):
        return None
    return kind.rsplit("/", 1)[-1][:64] if isinstance(kind, str) else None
