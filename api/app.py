"""The FastAPI application. Thin: parse, authorize, call one service function, shape the answer."""

from __future__ import annotations

import functools
from contextlib import asynccontextmanager
from typing import AsyncIterator

from fastapi import APIRouter, FastAPI
from starlette.routing import BaseRoute

from api import problems
from api.metrics import ApiMetrics, MetricsMiddleware
from api.middleware import BoundBodyMiddleware, ConsoleHeadersMiddleware, RefuseNulMiddleware, RequestIdMiddleware
from api.routers import admin, audit, health, metrics, node_bindings
from registry.bootstrap import Container
from registry.watch import EventWatcher


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    # The watcher starts with the first long-poll (in whatever loop serves it); at shutdown every
    # waiter answers at once (304), so the process stops within its grace period.
    yield
    await app.state.event_watcher.stop()


def create_app(container: Container) -> FastAPI:
    app = FastAPI(
        lifespan=_lifespan,
        title="modelreg",
        version="0.1.0",
        description="Model supply-chain artifact registry: mirror, hash, sign, scan, approve and serve weights.",
    )
    app.state.container = container
    settings = container.settings
    app.state.event_watcher = EventWatcher(container.engine, poll_seconds=settings.event_poll_seconds,
                                           safety_poll_seconds=settings.event_safety_poll_seconds)
    problems.install(app)
    app.state.metrics = ApiMetrics(container, app.state.event_watcher)
    app.add_middleware(BoundBodyMiddleware)
    app.add_middleware(RefuseNulMiddleware)
    app.add_middleware(ConsoleHeadersMiddleware)
    # Added after it, so outside it: they time, count and log the refusals of the middleware inside too;
    # the request id is set first of all, for every line logged on the request's behalf.
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    app.add_middleware(RequestIdMiddleware)
    # The same route objects in every app of the process: FastAPI analyses a route's parameters and builds its
    # models on the route's first request (about 30 ms of CPU each), and a process making several apps (the tests
    # make one per test) would otherwise do it again for each.
    app.router.routes.extend(_routes())
    from api.routers import ui

    ui.install(app)
    return app


@functools.cache
def _routes() -> tuple[BaseRoute, ...]:
    """The routes of every router, made once per process."""
    from api.routers import oidc_login, ui

    holder = APIRouter()
    for router in [health.router, metrics.router, admin.router, audit.router, node_bindings.router,
                   oidc_login.router, *_optional_routers(), ui.router]:
        holder.include_router(router)
    return tuple(holder.routes)


def _optional_routers():
    """Routers of the model lifecycle; imported here so health and identity work on their own."""
    from api.routers import (
        admission,
        aliases,
        approvals,
        blobs,
        evals,
        events,
        exports,
        hf,
        keys,
        manifests,
        models,
        oci,
        provenance,
        quotas,
        receipts,
        revocations,
        scans,
        tlog,
        webhooks,
    )

    return [models.router, approvals.router, keys.router, scans.router, blobs.router, aliases.router,
            revocations.router, manifests.router, evals.router, events.router, exports.router, hf.router,
            provenance.router, quotas.router, webhooks.router, oci.router, tlog.router, admission.router,
            receipts.router]
