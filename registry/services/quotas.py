"""Byte quotas per tenant: set by administrators, checked before bytes are stored for a tenant.

What a tenant uses is the size of every blob it owns (``blob_owners``), each counted once however
many of its versions list it; bytes another tenant also owns count for both. A quota is checked:

- at submission, against the declared sizes of the files the tenant does not own yet (a 413
  ``quota-exceeded`` problem, and nothing is created);
- at upload, against the declared size, before the body is read;
- when ownership is granted (``grant_blob``: a mirror or an upload lands), under a lock on the quota
  row, so concurrent mirrors of one tenant cannot together pass it. A mirror refused there fails its
  version (``quota_exceeded``); the version is never sealed, so nothing half-written is served.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry import audit
from registry.auth import AuthenticatedPrincipal, Permission, get_tenant, require, require_admin
from registry.clock import Clock
from registry.db.models import Blob, BlobOwner, Tenant, TenantQuota
from registry.db.session import begin_write, is_postgres
from registry.domain.errors import InvalidInputError, QuotaExceededError

MAX_QUOTA = 2**62
"""The largest quota one may set (a BIGINT holds it on both databases)."""


@dataclass(frozen=True)
class QuotaStatus:
    tenant: str
    limit: int | None
    """None: no quota."""
    used: int

    def as_dict(self) -> dict[str, int | str | None]:
        return {"tenant": self.tenant, "limit": self.limit, "used": self.used,
                "available": None if self.limit is None else max(0, self.limit - self.used)}


def used_bytes(session: Session, tenant_id: int) -> int:
    """The bytes of every blob the tenant owns, each once."""
    return int(session.scalar(
        select(func.coalesce(func.sum(Blob.size), 0)).join(BlobOwner, BlobOwner.digest == Blob.digest)
        .where(BlobOwner.tenant_id == tenant_id)
    ) or 0)


def set_quota(session: Session, principal: AuthenticatedPrincipal, tenant: str, limit: int | None, *,
              clock: Clock) -> QuotaStatus:
    """Set (or with None, remove) ``tenant``'s byte quota; audited as ``quota.set``.

    A quota below what the tenant already uses is allowed: it stops new bytes, it deletes nothing.

    Raises:
        PermissionDeniedError: only administrators set quotas.
        TenantNotFoundError: no such tenant.
        InvalidInputError: a negative or too large limit.
    """
    require_admin(principal)
    if limit is not None and not 0 <= limit <= MAX_QUOTA:
        raise InvalidInputError(f"a quota is between 0 and {MAX_QUOTA} bytes", field="bytes")
    begin_write(session)
    row = get_tenant(session, tenant)
    quota = session.get(TenantQuota, row.id)
    previous = quota.bytes if quota is not None else None
    if limit is None:
        if quota is not None:
            session.delete(quota)
    elif quota is None:
        session.add(TenantQuota(tenant_id=row.id, bytes=limit, updated_by=principal.name, updated_at=clock.now()))
    else:
        quota.bytes, quota.updated_by, quota.updated_at = limit, principal.name, clock.now()
    audit.append(session, actor=principal.name, action="quota.set", subject=f"tenant:{tenant}", tenant=tenant,
                 details={"bytes": limit, "previous": previous})
    session.commit()
    return QuotaStatus(tenant, limit, used_bytes(session, row.id))


def read_quota(session: Session, principal: AuthenticatedPrincipal, tenant: str) -> QuotaStatus:
    """The tenant's quota and use, for anyone who may read in it.

    Raises:
        PermissionDeniedError, TenantNotFoundError.
    """
    require(principal, tenant, Permission.READ)
    row = get_tenant(session, tenant)
    quota = session.get(TenantQuota, row.id)
    return QuotaStatus(tenant, quota.bytes if quota is not None else None, used_bytes(session, row.id))


def check(session: Session, tenant: Tenant | int, needed: int, *, lock: bool = False) -> None:
    """Refuse ``needed`` more bytes for ``tenant`` if they would take it over its quota.

    Args:
        lock: lock the quota row until the transaction ends (in the transaction that grants), so
            two grants of one tenant are counted one after the other.

    Raises:
        QuotaExceededError: with what is used, the limit and what is needed.
    """
    tenant_id = tenant if isinstance(tenant, int) else tenant.id
    query = select(TenantQuota.bytes).where(TenantQuota.tenant_id == tenant_id)
    if lock and is_postgres(session):
        query = query.with_for_update()
    limit = session.scalar(query)
    if limit is None or needed <= 0:
        return
    used = used_bytes(session, tenant_id)
    if used + needed > limit:
        name = tenant.name if isinstance(tenant, Tenant) else session.get(Tenant, tenant_id).name
        raise QuotaExceededError(name, used=used, limit=limit, needed=needed)


def new_bytes(owned: Iterable[str], files: Iterable[tuple[str | None, int]]) -> int:
    """The bytes of ``files`` (digest or None, size) not among the digests ``owned``, each digest once."""
    owned = set(owned)
    seen: set[str] = set()
    total = 0
    for digest, size in files:
        if digest is not None:
            if digest in owned or digest in seen:
                continue
            seen.add(digest)
        total += size
    return total
