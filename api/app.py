"""The FastAPI application. Thin: parse, authorize, call one service function, shape the answer."""

from __future__ import annotations

from fastapi import FastAPI

from api import problems
from api.middleware import ConsoleHeadersMiddleware, RefuseNulMiddleware
from api.routers import admin, audit, health
from registry.bootstrap import Container


def create_app(container: Container) -> FastAPI:
    app = FastAPI(
        title="modelreg",
        version="0.1.0",
        description="Model supply-chain artifact registry: mirror, hash, sign, scan, approve and serve weights.",
    )
    app.state.container = container
    problems.install(app)
    app.add_middleware(RefuseNulMiddleware)
    app.add_middleware(ConsoleHeadersMiddleware)
    app.include_router(health.router)
    app.include_router(admin.router)
    app.include_router(audit.router)
    for router in _optional_routers():
        app.include_router(router)
    from api.routers import ui

    ui.install(app)
    return app


def _optional_routers():
    """Routers of the model lifecycle; imported here so health and identity work on their own."""
    from api.routers import approvals, blobs, evals, hf, keys, manifests, models, provenance, releases, scans

    return [models.router, approvals.router, keys.router, scans.router, blobs.router, releases.router,
            manifests.router, evals.router, hf.router, provenance.router]
