"""Helpers for tests that drive the registry's services and workers in-process."""

from __future__ import annotations

from registry.auth import AuthenticatedPrincipal, load_principal
from registry.bootstrap import Container
from registry.db.models import Principal, Tenant
from workers.handlers import build_handlers
from workers.loop import Worker


def make_admin(container: Container, tenant: str = "acme") -> AuthenticatedPrincipal:
    with container.session_factory() as session:
        if session.query(Tenant).filter_by(name=tenant).first() is None:
            session.add(Tenant(name=tenant))
        principal = Principal(name=f"admin-{tenant}", is_admin=True)
        session.add(principal)
        session.commit()
        return load_principal(principal)


def drain(container: Container, max_jobs: int = 10_000) -> int:
    """Run queued jobs in this thread until none is runnable; return how many ran."""
    worker = Worker(container, build_handlers(), worker_id="test-worker")
    ran = 0
    while ran < max_jobs and worker.run_once():
        ran += 1
    return ran
