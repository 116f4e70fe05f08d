"""Helpers for tests that drive the registry's services and workers in-process."""

from __future__ import annotations

from pathlib import Path

from registry.auth import AuthenticatedPrincipal, issue_token, load_principal
from registry.bootstrap import Container
from registry.db.models import Principal, RoleBinding, Tenant
from workers.handlers import build_handlers
from workers.loop import Worker


def make_settings(root: Path, database_url: str, signing_key_pem: str):
    """The settings of a test's registry: its data, blobs and model sources under ``root``."""
    from pydantic import SecretStr

    from registry.settings import Settings

    return Settings(
        signing_key_pem=SecretStr(signing_key_pem),
        # Tests build their model directories under root (the data dir in it stays forbidden).
        local_source_roots=[root],
        data_dir=root / "data",
        database_url=database_url,
        blob_store_url=(root / "blobs").as_uri(),
        presign_secret=SecretStr("test-presign-secret-0123456789ab"),
        job_backoff_base_seconds=0.05,
        job_backoff_max_seconds=0.2,
    )


def make_admin(container: Container, tenant: str = "acme") -> AuthenticatedPrincipal:
    with container.session_factory() as session:
        if session.query(Tenant).filter_by(name=tenant).first() is None:
            session.add(Tenant(name=tenant))
        principal = Principal(name=f"admin-{tenant}", is_admin=True)
        session.add(principal)
        session.commit()
        return load_principal(principal)


def role_token(container: Container, name: str, tenant: str, role: str, capacity: str = "") -> str:
    """A new principal ``name`` holding ``role`` (an approver's in ``capacity``) in ``tenant`` (created if
    need be); return its token."""
    return person(container, name, tenant, (role, capacity))


def person(container: Container, name: str, tenant: str, *roles: tuple[str, str]) -> str:
    """A principal ``name`` holding ``roles`` (``(role, capacity)``) in ``tenant`` (made if need be); its token."""
    with container.session_factory() as session:
        row = session.query(Tenant).filter_by(name=tenant).first()
        if row is None:
            row = Tenant(name=tenant)
            session.add(row)
            session.flush()
        principal = Principal(name=name)
        session.add(principal)
        session.flush()
        for role, capacity in roles:
            session.add(RoleBinding(principal_id=principal.id, tenant_id=row.id, role=role, capacity=capacity))
        issued = issue_token(session, principal)
        session.commit()
        return issued.token


def drain(container: Container, max_jobs: int = 10_000) -> int:
    """Run queued jobs in this thread until none is runnable; return how many ran."""
    worker = Worker(container, build_handlers(), worker_id="test-worker")
    ran = 0
    while ran < max_jobs and worker.run_once():
        ran += 1
    return ran
