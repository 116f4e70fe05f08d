"""The ``mirroring`` stage (and the ``submitted`` one's retry): the jobs that bring a version's bytes in.

Entering ``mirroring`` queues a ``mirror_file`` job per file not stored yet; with every file stored
already, the ``seal_version`` job at once. The jobs themselves live in :mod:`registry.services.mirroring`;
the one that lands the last file queues sealing, and sealing reports the stage passed.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from registry import jobs
from registry.db.models import Version
from registry.domain.outcomes import Outcome, Pending
from registry.services.loaders import tenant_of
from registry.services.ports import Ports


def start(session: Session, version: Version, ports: Ports) -> Outcome:
    """A job per file not stored yet; with every file stored already, sealing at once."""
    pending = [f for f in version.files if f.sha256 is None]
    for f in pending:
        ports.queue.enqueue_job(session, jobs.JobKind.MIRROR_FILE, {"file_id": f.id}, f.id, tenant=tenant_of(version))
    if not pending:
        queue_sealing(session, version, ports)
    return Pending()


def queue_sealing(session: Session, version: Version, ports: Ports) -> None:
    """The work that ends mirroring: one ``seal_version`` job (queued once, however often asked)."""
    ports.queue.enqueue_job(session, jobs.JobKind.SEAL_VERSION, {"version_id": version.id}, version.id,
                            tenant=tenant_of(version))


def queue_resolving(session: Session, version: Version, ports: Ports) -> None:
    """Retry resolving a submitted version whose upstream was unreachable (a ``resolve_version`` job)."""
    ports.queue.enqueue_job(session, jobs.JobKind.RESOLVE_VERSION, {"version_id": version.id}, version.id,
                            tenant=tenant_of(version))
