"""``/metrics``: the Prometheus exposition of this process (see ``api/metrics.py`` and ``registry/metrics.py``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import ContainerDep
from api.problems import AUTHENTICATED, responses
from registry import metrics
from registry.auth import authenticate

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response, responses={
    200: {"description": "Prometheus text exposition", "content": {"text/plain": {"schema": {"type": "string"}}}},
    **responses(*AUTHENTICATED)})
def get_metrics(request: Request, container: ContainerDep) -> Response:
    """Jobs, queue, mirroring, scans, evals, manifests and API latency, for Prometheus.

    Public unless ``MODELREG_METRICS_PUBLIC=false``, then administrators only (``Authorization: Bearer``).
    No series is labelled with a tenant, model, path or token.
    """
    if not container.settings.metrics_public:
        # Read here, not declared: the OpenAPI document describes the default, a public route.
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        with container.session_factory() as session:
            principal = authenticate(session, token.strip() if scheme.lower() == "bearer" else None)
            metrics.authorize_scrape(principal)
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
