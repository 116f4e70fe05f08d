"""Downloads counted per version, principal, UTC day and channel (``downloads``): provenance's "who pulled it".

Every distribution channel that serves a download itself counts it here, by its name
(:class:`registry.domain.serving.Channel`): ``hf`` for a file through ``/hf``, ``oci`` for a manifest through
``/v2``. Release manifests are counted per issuance in ``release_issuances`` instead (each is a signed answer
worth its own row), and ``modelreg serve-s3`` serves from a node's cache, which the registry never sees.
One row per (version, principal, day, channel), upserted, so the table grows with who downloads, not with
traffic.

Usage (a sketch, not run as a doctest)::

    count_download(session, principal, version_id, channel=Channel.HF, clock=container.clock)
"""

from __future__ import annotations

from datetime import timezone

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from registry.auth import AuthenticatedPrincipal
from registry.clock import Clock
from registry.db.models import Download
from registry.db.session import begin_write, is_postgres
from registry.domain.serving import Channel


def count_download(session: Session, principal: AuthenticatedPrincipal, version_id: int, *, channel: Channel,
                   clock: Clock) -> None:
    """Count one download of version ``version_id`` by ``principal`` through ``channel``, and commit: one row
    per (version, principal, UTC day, channel), upserted."""
    now = clock.now()
    insert = postgresql_insert if is_postgres(session) else sqlite_insert
    begin_write(session)
    row = insert(Download).values(version_id=version_id, principal=principal.name, channel=Channel(channel).value,
                                  day=now.astimezone(timezone.utc).date(), count=1, first_at=now, last_at=now)
    session.execute(row.on_conflict_do_update(
        index_elements=[Download.version_id, Download.principal, Download.day, Download.channel],
        set_={"count": Download.count + 1, "last_at": row.excluded.last_at}))
    if is_postgres(session):
        # A count lost in a crash is worth less than a WAL flush per download (as with release issuances).
        session.execute(text("SET LOCAL synchronous_commit = off"))
    session.commit()
