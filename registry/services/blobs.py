"""Blob ownership: which tenant may put which stored bytes into a version.

Bytes are stored once, but a blob is put into a version only by a tenant that owns it (``blob_owners``):
one that uploaded the bytes (hashed in full, even when they were stored already) or mirrored them
from its upstream. To every other tenant the blob does not exist. Submission, mirroring and evals
(their logs) record ownership here; garbage collection (:mod:`registry.services.gc`) keeps the rows.

Usage (a sketch, not run as a doctest)::

    owned_blobs(session, tenant_id, ["ab" * 32])
    # {'abab...': 1024}
"""

from __future__ import annotations

from typing import Iterable

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from registry.db.models import Blob, BlobOwner
from registry.db.session import is_postgres
from registry.services import gc, quotas
from registry.storage.base import BlobStore


def owned_blobs(session: Session, tenant_id: int, digests: Iterable[str], *, hold: bool = False) -> dict[str, int]:
    """Which of ``digests`` the tenant owns, with their stored sizes: one query for any number.

    Args:
        hold: lock the blobs found against garbage collection until the transaction ends, as
            ``gc.hold_blobs`` does (call it so in the write transaction that references them).
    """
    wanted = set(digests)
    if not wanted:
        return {}
    query = (select(Blob.digest, Blob.size).join(BlobOwner, BlobOwner.digest == Blob.digest)
             .where(BlobOwner.tenant_id == tenant_id, Blob.digest.in_(wanted)))
    if hold and is_postgres(session):
        query = query.order_by(Blob.digest).with_for_update(read=True, of=Blob)
    return {digest: size for digest, size in session.execute(query)}


def grant_blob(session: Session, tenant_id: int, digest: str, size: int, *, via: str,
               blob_store: BlobStore) -> None:
    """Record bytes just put (``gc.record_blob``: a row, or a fresh use time) and the tenant's ownership
    of them (if new).

    Call it in a write transaction, once the tenant has shown it holds the bytes: it uploaded or
    mirrored them, hashed in full.

    Raises:
        BlobVanishedError: garbage collection deleted the bytes after they were put; put them again.
        QuotaExceededError: an upload or a mirror of bytes new to the tenant would take it over its
            quota (eval logs are the registry's own work and are not refused).
    """
    insert = postgresql_insert if is_postgres(session) else sqlite_insert
    gc.record_blob(session, digest, size, blob_store=blob_store)
    if via in QUOTA_VIA and not owned_blobs(session, tenant_id, [digest]):
        quotas.check(session, tenant_id, size, lock=True)
    # Concurrent uploads or mirrors of the same bytes grant at once: the second insert is a no-op.
    session.execute(insert(BlobOwner).values(tenant_id=tenant_id, digest=digest, via=via)
                    .on_conflict_do_nothing())


QUOTA_VIA = frozenset({"upload", "mirror"})
"""The grants a tenant's quota refuses."""


def record_blob(session: Session, digest: str, size: int, *, blob_store: BlobStore) -> None:
    """Record bytes just put, owned by no tenant (eval sets belong to the deployment); see ``gc.record_blob``."""
    gc.record_blob(session, digest, size, blob_store=blob_store)
