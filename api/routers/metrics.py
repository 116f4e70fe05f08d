"""``/metrics``: the Prometheus exposition of this process (see ``api/metrics.py`` and ``registry/metrics.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import ContainerDep, _bearer
from api.problems import AUTHENTICATED, responses
from registry import metrics
from registry.auth import authenticate

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response, responses={
    200: {"description": "Prometheus text exposition", "content": {"text/plain": {"schema": {"type": "string"}}}},
    **responses(*AUTHENTICATED)})
def get_metrics(request: Request, container: ContainerDep,
                credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Response:
    """Jobs, queue, mirroring, scans, evals, manifests and API latency, for Prometheus.

    Public unless ``MODELREG_METRICS_PUBLIC=false``, then administrators only. No series is labelled
    with a tenant, model, path or token.
    """
    if not container.settings.metrics_public:
        with container.session_factory() as session:
            metrics.authorize_scrape(authenticate(session, credentials.credentials if credentials else None))
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
