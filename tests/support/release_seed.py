"""A released model for long-poll tests and benchmarks: ``acme/llm`` v1 and v2 approved, ``prod`` -> 1,
and one ``node`` token per client; seeded in-process through the services (as bench/manifest.py does)."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

TENANT, MODEL = "acme", "llm"


def seed_files(number: int) -> dict[str, bytes]:
    """The files of version ``number`` as seeded."""
    return {"config.json": json.dumps({"model_type": "llama", "hidden_size": 8 * number}).encode(),
            "model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "}


def seed_release(data_dir: Path, clients: int, database_url: str | None = None, model: str = MODEL,
                 files_of: Callable[[int], dict[str, bytes]] = seed_files, approved: int = 2) -> list[str]:
    """Seed the database of ``data_dir`` (SQLite there, unless ``database_url``); return the node tokens.

    ``model`` names the model (``acme/<model>``) when a test's manifests name another than ``llm``;
    ``files_of`` gives version N's files (default :func:`seed_files`), e.g. a release unit's; ``approved``
    how many approved versions there are (1..approved; a benchmark revoking several wants more than two)."""
    from registry.auth import issue_token
    from registry.db.models import Principal, RoleBinding, Tenant
    from registry.domain.aliases import make_target
    from registry.domain.files import FileEntry
    from registry.services import aliases, versions
    from tests.support.registry import drain, make_admin
    from tests.support.releases import approve_standin

    with _opened(data_dir, database_url, migrate=True) as container:
        admin = make_admin(container, TENANT)
        for number in range(1, approved + 1):
            files = files_of(number)
            entries = []
            with container.session_factory() as session:
                for path, data in files.items():
                    digest = hashlib.sha256(data).hexdigest()
                    versions.upload_blob(session, admin, TENANT, digest, io.BytesIO(data), len(data),
                                         blob_store=container.blob_store)
                    entries.append(FileEntry(path, len(data), digest))
                versions.submit_uploaded(session, admin, TENANT, model, entries, label=f"v{number}",
                                         limits=container.limits(), ports=container.ports)
            drain(container)
            approve_standin(container, TENANT, model, number)
        with container.session_factory() as session:
            aliases.promote(session, admin, TENANT, model, "prod", make_target(1), policy=container.policy,
                            clock=container.clock)
        tokens = []
        with container.session_factory() as session:
            tenant = session.query(Tenant).filter_by(name=TENANT).one()
            for index in range(clients):
                node = Principal(name=f"node-{index}")
                session.add(node)
                session.flush()
                session.add(RoleBinding(principal_id=node.id, tenant_id=tenant.id, role="node", capacity=""))
                tokens.append(issue_token(session, node).token)
            session.commit()
        return tokens


def promote(data_dir: Path, number: int, database_url: str | None = None) -> None:
    """Move ``prod`` to ``number`` as the tenant's admin would (a new container: another process's view)."""
    from registry.domain.aliases import make_target
    from registry.services import aliases

    with _as_admin(data_dir, database_url) as (container, session, admin):
        aliases.promote(session, admin, TENANT, MODEL, "prod", make_target(number), policy=container.policy,
                        clock=container.clock)


def revoke(data_dir: Path, number: int, reason: str = "bad weights", database_url: str | None = None) -> None:
    """Revoke version ``number`` as the tenant's admin would (a new container: another process's view)."""
    from registry.services import revocations

    with _as_admin(data_dir, database_url) as (container, session, admin):
        revocations.revoke(session, admin, TENANT, MODEL, number, reason, clock=container.clock)


def admin_token(data_dir: Path, database_url: str | None = None) -> str:
    """A new token of the seeded tenant admin (``admin-acme``; seeded before any first-start admin, so there
    is no ``admin-token`` file), for what a test does over HTTP."""
    from registry.auth import issue_token
    from registry.db.models import Principal

    with _as_admin(data_dir, database_url) as (_, session, admin):
        token = issue_token(session, session.get(Principal, admin.id)).token
        session.commit()
        return token


@contextmanager
def _opened(data_dir: Path, database_url: str | None, *, migrate: bool = False):
    """A new container on ``data_dir``'s database (SQLite there, unless ``database_url``); disposed after."""
    from registry.bootstrap import bootstrap, load_settings, prepare_embedded

    overrides = {"database_url": database_url} if database_url else {}
    settings = load_settings(data_dir=data_dir, **overrides)
    prepare_embedded(settings)
    container = bootstrap(settings, migrate=migrate)
    try:
        yield container
    finally:
        container.dispose()


@contextmanager
def _as_admin(data_dir: Path, database_url: str | None):
    """A new container on ``data_dir``'s database, a session, and the tenant's admin; disposed after."""
    from registry.auth import load_principal
    from registry.db.models import Principal

    with _opened(data_dir, database_url) as container, container.session_factory() as session:
        admin = load_principal(session.query(Principal).filter_by(name=f"admin-{TENANT}").one())
        yield container, session, admin
