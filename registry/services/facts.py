"""Recording and reading a version's model facts (see :mod:`registry.facts`).

``record_facts`` reads the headers of a version's stored files through the blob store's ranged
reads and stores what they say, in the caller's transaction (the seal step calls it); it is
idempotent: recording again replaces the row. ``read_facts`` is what callers see, after the same
permission check as reading the version.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from registry.auth import AuthenticatedPrincipal
from registry.clock import Clock
from registry.db.models import Version, VersionFacts
from registry.domain.capacity import CapacityEstimate, estimate_capacity
from registry.domain.errors import InvalidStateError
from registry.facts import READER_VERSION, read_model_facts
from registry.services.loaders import version_ref
from registry.services.versions import read_version
from registry.storage.base import BlobStore


def record_facts(session: Session, version: Version, blob_store: BlobStore, *, clock: Clock) -> VersionFacts:
    """Read the facts of ``version``'s stored files and store them (flushed, not committed).

    The reads are ranged GETs of headers; a caller holding a write lock it would rather not hold
    meanwhile reads first with :func:`collect_facts` and stores with :func:`store_facts`.

    Args:
        session: The caller's session, in its write transaction.
        version: A version whose files are all stored (``sha256`` set).
        blob_store: Where the bytes are; only headers are read (``open_range``).
        clock: The container's clock (the recording time).

    Raises:
        InvalidStateError: a file of the version is not stored yet.
        BlobNotFoundError, BlobStoreError: the store lost a blob or cannot be reached (retry later).
    """
    pending = [f.path for f in version.files if f.sha256 is None]
    if pending:
        raise InvalidStateError(f"{version_ref(version)} has files not stored yet: {pending[:5]}",
                                state=version.state, files=pending[:20])
    return store_facts(session, version, collect_facts([(f.path, f.size, f.sha256) for f in version.files],
                                                       blob_store), clock=clock)


def collect_facts(files: list[tuple[str, int, str]], blob_store: BlobStore) -> dict[str, Any]:
    """Read the facts of stored files, ``(path, size, sha256)`` each, with no database at all.

    Raises:
        BlobNotFoundError, BlobStoreError: the store lost a blob or cannot be reached (retry later).
    """
    digests = {path: digest for path, _, digest in files}

    def read_range(path: str, start: int, end: int) -> bytes:
        return b"".join(blob_store.open_range(digests[path], start, end))

    return read_model_facts({path: size for path, size, _ in files}, read_range)


def store_facts(session: Session, version: Version, facts: dict[str, Any], *, clock: Clock) -> VersionFacts:
    """Store facts read by :func:`collect_facts` for ``version``, replacing any (flushed, not committed)."""
    row = session.get(VersionFacts, version.id)
    if row is None:
        row = VersionFacts(version_id=version.id)
        session.add(row)
    row.reader_version, row.facts, row.recorded_at = READER_VERSION, facts, clock.now()
    session.flush()
    return row


def facts_document(row: VersionFacts | None) -> dict[str, Any] | None:
    """The served form of a facts row (``None`` when the version has none recorded)."""
    if row is None:
        return None
    return {**row.facts, "reader_version": row.reader_version, "recorded_at": row.recorded_at.isoformat()}


def read_facts(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str,
               number: int) -> dict[str, Any] | None:
    """The facts of ``tenant/name@number``, or ``None`` if none were recorded (yet).

    Raises:
        PermissionDeniedError: the principal may not read in ``tenant``.
        VersionNotFoundError, ModelNotFoundError, TenantNotFoundError: no such version.
    """
    return read_version_with_facts(session, principal, tenant, name, number)[1]


def read_version_with_facts(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str,
                            number: int) -> tuple[Version, dict[str, Any] | None]:
    """:func:`read_facts` with the version it belongs to (one permission check for both)."""
    version = read_version(session, principal, tenant, name, number)
    return version, facts_document(session.get(VersionFacts, version.id))


def capacity(facts: dict[str, Any] | None, context: int | None = None, sequences: int = 1) -> CapacityEstimate | None:
    """The serving capacity estimate of a version's facts for ``context`` tokens x ``sequences``.

    Raises:
        ValueError: ``context`` or ``sequences`` is not a positive integer.
    """
    return None if facts is None else estimate_capacity(facts, context, sequences)
