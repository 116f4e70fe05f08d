"""SQLAlchemy 2 models. Every change here comes with an Alembic revision in ``migrations/versions``.

Times are timezone-aware UTC everywhere (:class:`UTCDateTime`), on PostgreSQL and SQLite alike.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Aware UTC datetimes in, aware UTC datetimes out; SQLite stores them naive."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTCDateTime column")
        value = value.astimezone(dt.timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.timezone.utc)
        return value.astimezone(dt.timezone.utc)


# 64-bit ids on PostgreSQL; SQLite only autoincrements an INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dt.datetime: UTCDateTime(), dict[str, Any]: JSON(), list[Any]: JSON()}


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    oci_anonymous_pull: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    """Whether callers without credentials may pull the tenant's released versions through ``/v2``
    (an administrator turns it on: ``modelreg tenant anonymous-pull``; ``docs/oci.md``)."""


class Principal(Base):
    """A person or a machine (a serving node, a CI pipeline) that holds tokens and roles."""

    __tablename__ = "principals"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    # "<issuer> <sub>" of a principal made by single sign-on (registry.oidc); NULL for one made by an admin.
    oidc_identity: Mapped[str | None] = mapped_column(String(512), unique=True)

    roles: Mapped[list["RoleBinding"]] = relationship(back_populates="principal", cascade="all, delete-orphan")


class RoleBinding(Base):
    """``principal`` holds ``role`` in ``tenant``; approvers also carry a capacity (security, legal, ml)."""

    __tablename__ = "role_bindings"
    __table_args__ = (UniqueConstraint("principal_id", "tenant_id", "role", "capacity"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id", ondelete="CASCADE"), index=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(32))
    # '' rather than NULL so the unique constraint holds on both databases.
    capacity: Mapped[str] = mapped_column(String(32), default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    principal: Mapped[Principal] = relationship(back_populates="roles")
    tenant: Mapped[Tenant] = relationship()


class ApiToken(Base):
    """Only the sha256 of a token is stored; the token itself is shown once, at creation."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    description: Mapped[str] = mapped_column(String(256), default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[dt.datetime | None]
    revoked_at: Mapped[dt.datetime | None]

    principal: Mapped[Principal] = relationship()


class Model(Base):
    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    next_version: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    tenant: Mapped[Tenant] = relationship()


class Version(Base):
    """One pinned, immutable version of a model: a source, a resolved revision and, once sealed, files."""

    __tablename__ = "versions"
    __table_args__ = (
        UniqueConstraint("model_id", "number"),
        # The same source, revision and file selection is one live version, not two copies; a failed
        # or rejected one leaves the index, so the source can be submitted again.
        Index(
            "uq_versions_live_source", "model_id", "source_key", unique=True,
            postgresql_where=text("state NOT IN ('failed', 'rejected', 'revoked') AND deleted_at IS NULL"),
            sqlite_where=text("state NOT IN ('failed', 'rejected', 'revoked') AND deleted_at IS NULL"),
        ),
        # A base version named by its statement digest (an adapter's ``adapter_of: sha256:...``).
        Index("ix_versions_manifest_digest", "manifest_digest"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(32), index=True)
    source_kind: Mapped[str] = mapped_column(String(16))
    source_repo: Mapped[str] = mapped_column(String(1024))
    source_endpoint: Mapped[str | None] = mapped_column(String(1024))
    requested_revision: Mapped[str | None] = mapped_column(String(256))
    resolved_revision: Mapped[str | None] = mapped_column(String(128))
    include: Mapped[list[Any]] = mapped_column(default=list)
    exclude: Mapped[list[Any]] = mapped_column(default=list)
    source_key: Mapped[str | None] = mapped_column(String(64))
    license: Mapped[str | None] = mapped_column(String(128))
    """The resolved license: an SPDX expression or ``other:<name>`` (``registry.domain.licenses``), never raw
    upstream text; the raw values are in ``license_findings``."""
    declared_license: Mapped[str | None] = mapped_column(String(256))
    """What the submitter declared (checked to normalize at submit)."""
    upstream_card: Mapped[dict[str, Any] | None]
    """What the upstream said at resolve time about license and access: ``license`` (raw, bounded),
    ``license_name``, ``license_link``, ``gated`` and ``access`` (which token accepted the terms)."""
    failure_reason: Mapped[str | None] = mapped_column(String(64))
    failure_detail: Mapped[dict[str, Any] | None]
    submitted_by: Mapped[int | None] = mapped_column(ForeignKey("principals.id"))
    manifest_digest: Mapped[str | None] = mapped_column(String(64))
    manifest_bundle: Mapped[dict[str, Any] | None]
    signing_key_id: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    sealed_at: Mapped[dt.datetime | None]
    flagged_at: Mapped[dt.datetime | None]
    """Set when a later rescan finds an unsafe file in a version already past scanning."""
    flag_reason: Mapped[str | None] = mapped_column(String(256))
    revoked_at: Mapped[dt.datetime | None]
    """Set when the version is revoked (by a person, or by a rescan that found an unsafe file)."""
    revoked_by: Mapped[str | None] = mapped_column(String(128))
    revoke_reason: Mapped[str | None] = mapped_column(Text)
    deleted_at: Mapped[dt.datetime | None]
    """Set when a retention rule deleted the version: the row, its files and its audit trail stay (so
    provenance still answers), it is never served again, and its blobs no longer count as referenced
    (``registry/services/gc.py``)."""
    deleted_by: Mapped[str | None] = mapped_column(String(128))
    derived_from: Mapped[int | None] = mapped_column(Integer)
    """The number of the version of the same model this one was derived from (``modelreg derive``): its
    lineage, and the unit it replaces in the approval's component diff. A number, not a reference: versions
    are never deleted as rows, and a plain column is dropped on SQLite without copying the table."""

    model: Mapped[Model] = relationship()
    files: Mapped[list["VersionFile"]] = relationship(
        back_populates="version", order_by="VersionFile.path", cascade="all, delete-orphan"
    )
    license_findings: Mapped[list["LicenseFinding"]] = relationship(
        order_by="LicenseFinding.id", cascade="all, delete-orphan", passive_deletes=True
    )
    adapter_binding: Mapped["AdapterBinding | None"] = relationship(
        foreign_keys="AdapterBinding.version_id", cascade="all, delete-orphan", passive_deletes=True,
        lazy="selectin")
    """Set when the version is an adapter: the base version it is bound to (``registry/services/adapters.py``)."""


class VersionFile(Base):
    __tablename__ = "version_files"
    __table_args__ = (UniqueConstraint("version_id", "path"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id", ondelete="CASCADE"), index=True)
    path: Mapped[str] = mapped_column(String(1024))
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str | None] = mapped_column(String(64), index=True)
    upstream_sha256: Mapped[str | None] = mapped_column(String(64))
    upstream_git_sha1: Mapped[str | None] = mapped_column(String(40))
    upstream_etag: Mapped[str | None] = mapped_column(String(256))
    mirrored_at: Mapped[dt.datetime | None]

    version: Mapped[Version] = relationship(back_populates="files")


class Blob(Base):
    """A committed blob in the store; ``versions`` reference it through ``version_files.sha256``.

    The row stands for the bytes: garbage collection deletes the bytes while it holds the row locked,
    and deletes the row with them (``registry/services/gc.py``).
    """

    __tablename__ = "blobs"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[dt.datetime | None] = mapped_column(default=utcnow)
    """When bytes were last put under this digest (an upload, a mirror, an eval log); the grace period
    of garbage collection counts from it (or from ``created_at`` for rows older than the column)."""


class BlobOwner(Base):
    """Tenant ``tenant_id`` may put blob ``digest`` into its versions: it uploaded or mirrored the bytes.

    Bytes are stored once (``blobs``); references to them are per tenant, so a tenant neither uses
    nor learns of bytes that only another tenant holds.
    """

    __tablename__ = "blob_owners"

    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), ForeignKey("blobs.digest", ondelete="CASCADE"),
                                        primary_key=True)
    via: Mapped[str] = mapped_column(String(16))
    """``upload`` or ``mirror``; ``migration``: the tenant's versions used it before owners were kept."""
    granted_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class BlobChunks(Base):
    """The chunk digests of a blob (``registry/domain/chunks.py``): ``digests`` is the concatenated 32-byte
    SHA-256 of each aligned ``chunk_size`` chunk. They depend on the bytes alone, so they are kept per blob,
    recorded in the pass that stored the bytes (or by a ``record_chunks`` job for older blobs)."""

    __tablename__ = "blob_chunks"

    digest: Mapped[str] = mapped_column(String(64), ForeignKey("blobs.digest", ondelete="CASCADE"),
                                        primary_key=True)
    chunk_size: Mapped[int] = mapped_column(Integer)
    digests: Mapped[bytes] = mapped_column(LargeBinary)
    recorded_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_claim", "state", "run_after"),
        # What claim() walks, in order: queued jobs by priority, and running jobs by lease expiry.
        Index("ix_jobs_queued_order", "priority", "id",
              postgresql_where=text("state = 'queued'"), sqlite_where=text("state = 'queued'")),
        Index("ix_jobs_running_lease", "lease_expires_at",
              postgresql_where=text("state = 'running'"), sqlite_where=text("state = 'running'")),
        # The fair claim's walk: one tenant's queued jobs by priority (registry/jobs.py).
        Index("ix_jobs_tenant_queued_order", "tenant", "priority", "id",
              postgresql_where=text("state = 'queued'"), sqlite_where=text("state = 'queued'")),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    state: Mapped[str] = mapped_column(String(16), default="queued")
    priority: Mapped[int] = mapped_column(Integer, default=100)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=5)
    run_after: Mapped[dt.datetime] = mapped_column(default=utcnow)
    lease_expires_at: Mapped[dt.datetime | None]
    locked_by: Mapped[str | None] = mapped_column(String(128))
    last_error: Mapped[str | None] = mapped_column(Text)
    idempotency_key: Mapped[str | None] = mapped_column(String(256), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[dt.datetime | None]
    tenant: Mapped[str] = mapped_column(String(64), default="")
    """The tenant whose work this is, for fair claims; ``""`` for work of no tenant."""


class JobTurn(Base):
    """When a tenant's job was last claimed, as a count of turns: claims go to the tenant served least
    recently (``registry/jobs.py``); a tenant new to the queue has turn 0, so it comes first."""

    __tablename__ = "job_turns"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    served_turn: Mapped[int] = mapped_column(BigInteger, default=0)


class AuditEvent(Base):
    """One append-only, hash-chained event; see ``registry/audit.py``."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)
    at: Mapped[dt.datetime]
    actor: Mapped[str] = mapped_column(String(128))
    action: Mapped[str] = mapped_column(String(64), index=True)
    subject: Mapped[str] = mapped_column(String(512), index=True)
    tenant: Mapped[str | None] = mapped_column(String(64))
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "at": self.at.isoformat(), "actor": self.actor, "action": self.action,
                "subject": self.subject, "tenant": self.tenant, "details": self.details,
                "prev_hash": self.prev_hash, "hash": self.hash}


class AuditHead(Base):
    """The chain's head, updated with every append: deleting the newest events breaks it too."""

    __tablename__ = "audit_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    last_event_id: Mapped[int] = mapped_column(BigInteger)
    last_hash: Mapped[str] = mapped_column(String(64))


class AuditCheckpoint(Base):
    """A signed statement by the registry that the chain reached ``event_id`` with ``event_hash``.

    Saved outside the database by an auditor, it lets ``audit verify --checkpoints`` detect a chain
    that was cut or recomputed behind it; see ``registry/audit.py``.
    """

    __tablename__ = "audit_checkpoints"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    # One checkpoint per event: two processes checkpointing the same head at once write it once.
    event_id: Mapped[int] = mapped_column(BigInteger, unique=True)
    event_hash: Mapped[str] = mapped_column(String(64))
    at: Mapped[dt.datetime]
    key_id: Mapped[str] = mapped_column(String(64))
    envelope: Mapped[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        """The served form; only ``envelope`` is signed, the other fields repeat it for reading."""
        return {"id": self.id, "event_id": self.event_id, "event_hash": self.event_hash,
                "at": self.at.isoformat(), "key_id": self.key_id, "envelope": self.envelope}


class LogTile(Base):
    """One C2SP tlog-tiles tile of the verifiable audit log (ADR 0011), at its widest width so far.

    ``level`` is the tile level (0: leaf hashes); level -1 holds the entries of level-0 tile ``index``: the
    32-byte commitments (``registry.audit.event_commitment``). ``data`` is ``width`` concatenated 32-byte
    values; a partial tile only ever grows, so every narrower partial tile of the same index is its prefix.
    """

    __tablename__ = "log_tiles"

    level: Mapped[int] = mapped_column(SmallInteger, primary_key=True, autoincrement=False)
    index: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    width: Mapped[int] = mapped_column(SmallInteger)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class LogHead(Base):
    """The verifiable audit log's head (one row): the integrated size, its root and right edge, and the
    newest signed checkpoint. Its lock serializes integration (``registry.services.tlog``)."""

    __tablename__ = "log_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    # The checkpoint origin, fixed at the first checkpoint: it names the log, whatever the host is later.
    origin: Mapped[str | None] = mapped_column(String(255))
    size: Mapped[int] = mapped_column(BigInteger)
    root: Mapped[bytes] = mapped_column(LargeBinary)
    # The roots of the perfect subtrees covering the tree (merkle.CompactRange), concatenated.
    edge: Mapped[bytes] = mapped_column(LargeBinary)
    checkpoint: Mapped[str | None] = mapped_column(Text)
    checkpoint_size: Mapped[int] = mapped_column(BigInteger)
    checkpoint_at: Mapped[dt.datetime | None]


class LogCosignature(Base):
    """A witness's cosignature line (C2SP tlog-cosignature) on one checkpoint of the log, verified with that
    witness's key before it was stored; ``served_checkpoint`` appends those of the newest checkpoint."""

    __tablename__ = "log_cosignatures"
    __table_args__ = (Index("ix_log_cosignatures_witness_key", "witness_key", "checkpoint_size"),)

    checkpoint_size: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    root: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    # The witness's verifier key string (name, key ID and key): a rotated key is another witness.
    witness_key: Mapped[str] = mapped_column(String(512), primary_key=True)
    line: Mapped[str] = mapped_column(Text)
    collected_at: Mapped[dt.datetime]


class ScanResult(Base):
    """One scanner's verdict on one blob, seen under one path.

    Keyed by the bytes (``blob_digest``), the scanner and its version, and the path, because a
    file's name is part of what is checked (``config.json`` may carry ``auto_map``; an ONNX file's
    external data is relative to it). A blob shared by many versions under the same path is scanned
    once; a scanner upgrade makes new rows.
    """

    __tablename__ = "scan_results"
    __table_args__ = (UniqueConstraint("blob_digest", "scanner", "scanner_version", "path"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    blob_digest: Mapped[str] = mapped_column(String(64), index=True)
    path: Mapped[str] = mapped_column(String(1024))
    scanner: Mapped[str] = mapped_column(String(64))
    scanner_version: Mapped[str] = mapped_column(String(64))
    format: Mapped[str] = mapped_column(String(64))
    verdict: Mapped[str] = mapped_column(String(16))
    findings: Mapped[list[Any]] = mapped_column(default=list)
    duration_ms: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class PolicyDecision(Base):
    """One evaluation of a policy: what was decided, by which rules (bundle digest), on which facts
    (input digest), when. Written for every decision, allowed or not, so a release can be traced
    to the policy that let it through."""

    __tablename__ = "policy_decisions"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    outcome: Mapped[str] = mapped_column(String(16))
    allowed: Mapped[bool] = mapped_column(Boolean)
    unmet: Mapped[list[Any]] = mapped_column(default=list)
    bundle_digest: Mapped[str] = mapped_column(String(64))
    input_digest: Mapped[str] = mapped_column(String(64))
    error: Mapped[str | None] = mapped_column(Text)
    decided_at: Mapped[dt.datetime]


class VersionFacts(Base):
    """What the facts readers found in a version's files (``registry/facts``), recorded at sealing.

    One row per version; ``reader_version`` says which readers wrote ``facts``, so an upgrade can
    record them again.
    """

    __tablename__ = "version_facts"

    version_id: Mapped[int] = mapped_column(BigId, ForeignKey("versions.id", ondelete="CASCADE"), primary_key=True)
    reader_version: Mapped[str] = mapped_column(String(16))
    facts: Mapped[dict[str, Any]]
    recorded_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class VersionComponent(Base):
    """One component of a version's release unit (``registry/domain/components.py``), recorded when the version
    is sealed: what version detail, ``modelreg diff``, the policies, releases and exports read, and what the
    auditors' "which units share these weights" looks up by ``digest``. A version sealed before the table got
    its rows from migration 0033 (``detail`` null there).
    """

    __tablename__ = "version_components"
    __table_args__ = (UniqueConstraint("version_id", "name"),
                      Index("ix_version_components_digest_id", "digest", "id"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(32))
    digest: Mapped[str] = mapped_column(String(64))
    member_count: Mapped[int] = mapped_column(Integer)
    members: Mapped[list[Any]] = mapped_column(deferred=True)
    """``[[path, sha256, part or null], ...]`` sorted by member name; loaded only where members are needed (a
    weights component lists every shard)."""
    detail: Mapped[dict[str, Any] | None]
    """A registry-held part as checked at seal, so version detail reads no part blob: ``prompt_templates``
    ``{"prompts": {name: [variables]}}``, ``serving_profile`` ``{"profile": {...}}`` (the capacity arithmetic's
    input with the facts and today's GPU table), or ``{"error": {"type", "message"}}`` when the parts were refused.
    None for every other component, and for parts recorded by migration 0033 (their blobs are read instead)."""


class AdapterBinding(Base):
    """An adapter version bound to its base version (issue 34): the base's version and the digest of its
    ``weights`` component when the adapter was submitted, signed in the adapter's statement at seal. One row per
    adapter version; "which adapters are bound to these weights" looks up ``weights_digest``.
    """

    __tablename__ = "adapter_bindings"

    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id", ondelete="CASCADE"), primary_key=True)
    base_version_id: Mapped[int] = mapped_column(ForeignKey("versions.id"), index=True)
    weights_digest: Mapped[str] = mapped_column(String(64), index=True)
    """The base's ``weights`` component digest (``registry/domain/components.py``)."""
    base_manifest_digest: Mapped[str] = mapped_column(String(64))
    """The digest of the base's signed statement: the very base version, as ``sha256:`` refs name it."""
    requested: Mapped[str] = mapped_column(String(256))
    """What the submitter named (``acme/llm@3``, ``acme/llm@prod``, ``sha256:...``), before it was resolved."""
    check: Mapped[dict[str, Any] | None]
    """The compatibility check's outcome at seal (``AdapterCheck.as_dict()``); null until the seal ran."""
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    base: Mapped[Version] = relationship(foreign_keys=[base_version_id])


class LicenseFinding(Base):
    """One place a version's license was read from, or one conflict between two of them.

    ``source`` is ``declared`` (the submitter), ``card`` (the Hub API's card data), ``readme`` (the README
    front matter), ``license_file:<path>`` (a LICENSE file matched against SPDX texts) or ``conflict``.
    ``raw`` is the text as found, cut at ``RAW_LIMIT`` characters with ``raw_length`` saying how long it was
    (never silently: such a value is always unrecognized); ``normalized`` is None when unrecognized, and
    ``problem`` then says why.
    """

    __tablename__ = "license_findings"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id", ondelete="CASCADE"), index=True)
    source: Mapped[str] = mapped_column(String(1100))
    raw: Mapped[str | None] = mapped_column(Text)
    raw_length: Mapped[int | None] = mapped_column(Integer)
    normalized: Mapped[str | None] = mapped_column(String(128))
    problem: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[dict[str, Any] | None]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "raw": self.raw, "raw_length": self.raw_length,
                "normalized": self.normalized, "problem": self.problem, "detail": self.detail}


class Approval(Base):
    """One person's decision on a version, in one capacity. A person decides once per version (the
    unique constraint holds it against two requests at once); ``files`` are the suspicious files a
    security approval vouches for."""

    __tablename__ = "approvals"
    __table_args__ = (UniqueConstraint("version_id", "principal_id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id", ondelete="CASCADE"), index=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    capacity: Mapped[str] = mapped_column(String(32))
    decision: Mapped[str] = mapped_column(String(16))
    comment: Mapped[str] = mapped_column(Text, default="")
    files: Mapped[list[Any]] = mapped_column(default=list)
    at: Mapped[dt.datetime]

    principal: Mapped[Principal] = relationship()


class Alias(Base):
    """A name (``prod``, ``canary``) of a model that points at one of its versions, maybe with a canary.

    The canary, when set, is a second version served to ``canary_tenants`` only; see
    ``registry/domain/aliases.py``. Every move is recorded in ``alias_history``.
    """

    __tablename__ = "aliases"
    __table_args__ = (UniqueConstraint("model_id", "name"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id"))
    canary_version_id: Mapped[int | None] = mapped_column(ForeignKey("versions.id"))
    canary_tenants: Mapped[list[Any]] = mapped_column(default=list)
    updated_by: Mapped[str] = mapped_column(String(128))
    updated_at: Mapped[dt.datetime]

    model: Mapped[Model] = relationship()
    version: Mapped[Version] = relationship(foreign_keys=[version_id])
    canary_version: Mapped[Version | None] = relationship(foreign_keys=[canary_version_id])
    history: Mapped[list["AliasMove"]] = relationship(back_populates="alias", order_by="AliasMove.id",
                                                      cascade="all, delete-orphan")


class AliasMove(Base):
    """One move of an alias: who, when, from what to what (version numbers and canaries), why, and
    the promotion policy decision that allowed it (bundle and input digests)."""

    __tablename__ = "alias_history"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    alias_id: Mapped[int] = mapped_column(ForeignKey("aliases.id", ondelete="CASCADE"), index=True)
    action: Mapped[str] = mapped_column(String(16))
    """``promote`` or ``rollback``."""
    at: Mapped[dt.datetime]
    actor: Mapped[str] = mapped_column(String(128))
    from_version: Mapped[int | None] = mapped_column(Integer)
    from_canary: Mapped[dict[str, Any] | None]
    """``{"version": n, "tenants": [...]}`` or None; the same for ``to_canary``."""
    to_version: Mapped[int] = mapped_column(Integer)
    to_canary: Mapped[dict[str, Any] | None]
    comment: Mapped[str] = mapped_column(Text, default="")
    bundle_digest: Mapped[str] = mapped_column(String(64))
    input_digest: Mapped[str] = mapped_column(String(64))

    alias: Mapped[Alias] = relationship(back_populates="history")


class EvalSet(Base):
    """One version of an eval set: its JSONL bytes are the blob ``digest``; a change is a new ``number``.

    Eval sets belong to the deployment, as the suites that name them do (``policies/data.json``).
    """

    __tablename__ = "eval_sets"
    __table_args__ = (UniqueConstraint("name", "number"), UniqueConstraint("name", "digest"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    number: Mapped[int] = mapped_column(Integer)
    digest: Mapped[str] = mapped_column(String(64), ForeignKey("blobs.digest"))
    size: Mapped[int] = mapped_column(BigInteger)
    cases: Mapped[int] = mapped_column(Integer)
    categories: Mapped[dict[str, Any]]
    """Category -> number of cases."""
    languages: Mapped[dict[str, Any]]
    """Language -> number of cases."""
    prompt_templates: Mapped[list[Any] | None]
    """The names of the unit's prompt templates its cases render, sorted; None for an eval set added before
    cases could name one (it renders none)."""
    description: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[dt.datetime]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "number": self.number, "digest": self.digest, "size": self.size,
                "cases": self.cases, "categories": self.categories, "languages": self.languages,
                "prompt_templates": self.prompt_templates or [], "description": self.description,
                "created_by": self.created_by, "created_at": self.created_at.isoformat()}


class EvalResult(Base):
    """One suite's eval of one version: ``pending`` from the moment the version enters ``evaluating``,
    then ``completed`` (the runner's metrics) or ``failed`` (``reason``: timeout, memory, crash, ...).

    ``definition`` is the suite as it was run: runner and its version, settings, and the eval sets by
    digest; ``suite_version`` is the sha256 of it, so a baseline compares like with like.
    """

    __tablename__ = "eval_results"
    __table_args__ = (UniqueConstraint("version_id", "suite"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id", ondelete="CASCADE"), index=True)
    suite: Mapped[str] = mapped_column(String(64))
    suite_version: Mapped[str] = mapped_column(String(64))
    runner: Mapped[str] = mapped_column(String(64))
    runner_version: Mapped[str] = mapped_column(String(32))
    definition: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(String(32))
    error: Mapped[str | None] = mapped_column(Text)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    breakdown: Mapped[dict[str, Any]] = mapped_column(default=dict)
    cases: Mapped[list[Any]] = mapped_column(default=list)
    log_digest: Mapped[str | None] = mapped_column(String(64), index=True)
    duration_ms: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[dt.datetime]
    finished_at: Mapped[dt.datetime | None]
    isolated: Mapped[bool | None]
    """Whether the runner ran shut in (its own mount and network namespaces); None: it never started."""
    components: Mapped[dict[str, Any] | None]
    """The unit's component digests when the run was queued (``{component: digest}``): an eval result names the
    unit it ran on, and the policies count it only for that unit. None for results recorded before."""
    ran_on: Mapped[dict[str, Any] | None]
    """For an adapter, the base the run was for (``registry/services/adapter_evals.py``: the base version and its
    weights digest, the adapter's weights digest): the policies count the result only for that base. None for a
    version that is no adapter, and for results recorded before (migration 0036)."""


class TrustRootRecord(Base):
    """One published trust root (``registry/signing/trust_root.py``): its DSSE envelope, never changed.

    Root 1 is made from the registry's signing key on first use; ``modelreg keys rotate`` adds N+1.
    """

    __tablename__ = "trust_roots"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    envelope: Mapped[dict[str, Any]]
    created_at: Mapped[dt.datetime]


class ReleaseSerial(Base):
    """The serial of a model's ref (an alias or a version number): it only grows.

    ``target_digest`` is the sha256 of what the ref resolved to when the serial was last bumped (main
    version and canary); the serial is bumped when that changes, so the same content keeps its serial.
    """

    __tablename__ = "release_serials"

    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), primary_key=True)
    ref: Mapped[str] = mapped_column(String(64), primary_key=True)
    serial: Mapped[int] = mapped_column(BigInteger)
    target_digest: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[dt.datetime]


class ReleaseIssuance(Base):
    """One release manifest issued (a 200 answer): who got which version of which ref, with what serial.

    A provenance record, not an audit event: see ``registry/services/manifests.py``.
    """

    __tablename__ = "release_issuances"
    __table_args__ = (Index("ix_release_issuances_model_ref_at", "model", "ref", "at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    principal: Mapped[str] = mapped_column(String(128))
    model: Mapped[str] = mapped_column(String(128))
    ref: Mapped[str] = mapped_column(String(64))
    for_tenant: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    serial: Mapped[int] = mapped_column(BigInteger)
    key_id: Mapped[str] = mapped_column(String(64))
    at: Mapped[dt.datetime]


class TenantQuota(Base):
    """The bytes a tenant may own (``blob_owners``, each blob counted once), set by an administrator."""

    __tablename__ = "tenant_quotas"

    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True)
    bytes: Mapped[int] = mapped_column(BigInteger)
    updated_by: Mapped[str] = mapped_column(String(128))
    updated_at: Mapped[dt.datetime]


class RetentionRule(Base):
    """Which versions of a model retention keeps: the last ``keep_last``, those an alias points at,
    and those approved within ``approved_within_days``; see ``registry/services/retention.py``."""

    __tablename__ = "retention_rules"

    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), primary_key=True)
    keep_last: Mapped[int] = mapped_column(Integer)
    approved_within_days: Mapped[int | None] = mapped_column(Integer)
    updated_by: Mapped[str] = mapped_column(String(128))
    updated_at: Mapped[dt.datetime]


class ScanWait(Base):
    """A ``scanning`` version waits for the scan of ``blob_digest`` as loaders open it (``scan_key``).

    Rows are added when the version starts scanning and deleted by the scan that settles them, so
    the job that clears a version's last row decides it without reading every file's result
    (``registry/services/scans.py``).
    """

    __tablename__ = "scan_waits"
    __table_args__ = (Index("ix_scan_waits_blob", "blob_digest", "scan_key"),)

    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id", ondelete="CASCADE"), primary_key=True)
    blob_digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    scan_key: Mapped[str] = mapped_column(String(1100), primary_key=True)


class ConsoleSession(Base):
    """A web console session, opened with an API token: its cookie names it, so it can be ended server-side
    (sign-out, the token revoked, the principal disabled) and a replayed cookie opens nothing."""

    __tablename__ = "console_sessions"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    token_id: Mapped[int] = mapped_column(ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id", ondelete="CASCADE"), index=True)
    secret_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime]
    expires_at: Mapped[dt.datetime]
    ended_at: Mapped[dt.datetime | None]
    ended_why: Mapped[str | None] = mapped_column(String(32))


class Download(Base):
    """A principal's downloads of a version on one day (UTC) through one channel: one row, counted.

    ``channel`` names the distribution channel (:class:`registry.domain.serving.Channel`): ``hf`` (files
    through ``/hf``), ``oci`` (manifests through ``/v2``); ``manifest`` and ``s3`` are names the column may hold,
    though release issuances are counted in ``release_issuances`` and serve-s3's reads are a node's own. A
    provenance record beside ``release_issuances``; one row per (version, principal, day, channel) however
    many requests a client makes, so the table grows with who downloads, not with traffic.
    """

    __tablename__ = "downloads"

    version_id: Mapped[int] = mapped_column(BigId, ForeignKey("versions.id", ondelete="CASCADE"), primary_key=True)
    principal: Mapped[str] = mapped_column(String(128), primary_key=True)
    day: Mapped[dt.date] = mapped_column(Date, primary_key=True)
    channel: Mapped[str] = mapped_column(String(8), primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)
    first_at: Mapped[dt.datetime]
    last_at: Mapped[dt.datetime]


class WebhookSubscription(Base):
    """A tenant's webhook: catalogue events of ``types`` (about models matching ``model_glob``) POSTed to
    ``url`` in order, from ``cursor`` on (``registry/services/webhooks.py``, ``docs/webhooks.md``).

    ``cursor`` is the last audit id whose events are all delivered; ``cursor_part`` how many events of the
    next matching audit event (one may mean two) are delivered already. ``secret`` signs every delivery;
    ``previous_secret`` too, until ``previous_secret_expires_at``, while receivers move to the new one.
    """

    __tablename__ = "webhook_subscriptions"
    __table_args__ = (Index("ix_webhook_subscriptions_tenant", "tenant"),
                      Index("ix_webhook_subscriptions_status", "status"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    url: Mapped[str] = mapped_column(String(2048))
    types: Mapped[list[Any]] = mapped_column(default=list)
    model_glob: Mapped[str | None] = mapped_column(String(256))
    secret: Mapped[str] = mapped_column(String(128))
    previous_secret: Mapped[str | None] = mapped_column(String(128))
    previous_secret_expires_at: Mapped[dt.datetime | None]
    cursor: Mapped[int] = mapped_column(BigInteger, default=0)
    cursor_part: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(16), default="active")
    """``active`` or ``paused`` (named apart from a version's ``state``, which only the lifecycle moves)."""
    paused_reason: Mapped[str | None] = mapped_column(String(1024))
    paused_at: Mapped[dt.datetime | None]
    failing_since: Mapped[dt.datetime | None]
    failed_attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[dt.datetime | None]
    last_error: Mapped[str | None] = mapped_column(String(1024))
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[dt.datetime]


class WebhookDelivery(Base):
    """One attempt to deliver one event (or a test ping) to a subscription, and what came of it."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_subscription", "subscription_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    subscription_id: Mapped[int] = mapped_column(
        BigId, ForeignKey("webhook_subscriptions.id", ondelete="CASCADE"))
    event_id: Mapped[str] = mapped_column(String(128))
    event_type: Mapped[str] = mapped_column(String(128))
    attempt: Mapped[int] = mapped_column(Integer)
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(String(1024))
    duration_ms: Mapped[int] = mapped_column(Integer)
    at: Mapped[dt.datetime]
    pending_event: Mapped[dict[str, Any] | None]
    """A test ping's CloudEvent while it waits for the subscription's delivery job to send it (then None)."""


class NodeBinding(Base):
    """An administrator's word that a Kubernetes service account of a trusted issuer is a serving node of a
    tenant: a projected token of ``(issuer, namespace, service_account)`` authenticates as ``principal``
    (named ``sa:<namespace>/<service account>@<issuer without its scheme>``) holding only ``role`` in
    ``tenant``: ``node`` (a serving node), or ``admission`` (an admission webhook; ``BINDING_ROLES``).
    See ``registry/workload_identity.py``."""

    __tablename__ = "node_bindings"
    __table_args__ = (
        UniqueConstraint("issuer", "namespace", "service_account", "tenant_id"),
        Index("ix_node_bindings_subject", "issuer", "namespace", "service_account"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    issuer: Mapped[str] = mapped_column(String(512))
    namespace: Mapped[str] = mapped_column(String(63))
    service_account: Mapped[str] = mapped_column(String(253))
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    principal_id: Mapped[int] = mapped_column(ForeignKey("principals.id", ondelete="CASCADE"), index=True)
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    role: Mapped[str] = mapped_column(String(16), default="node", server_default="node")

    tenant: Mapped[Tenant] = relationship()
    principal: Mapped[Principal] = relationship()


class OciArtifact(Base):
    """One shape (``raw`` ModelPack, ``image``) of a released version as served through ``/v2``, built
    once: the exact manifest and config bytes, so a digest never changes once served and a lookup by
    manifest or config digest is one indexed query (``registry/services/oci_serving.py``)."""

    __tablename__ = "oci_artifacts"
    __table_args__ = (
        UniqueConstraint("version_id", "shape"),
        UniqueConstraint("model_id", "manifest_digest"),
        Index("ix_oci_artifacts_model_config", "model_id", "config_digest"),
        # A kubelet's image-volume digest, model unknown (registry/services/image_digests.py).
        Index("ix_oci_artifacts_manifest_digest", "manifest_digest"),
        Index("ix_oci_artifacts_config_digest", "config_digest"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id", ondelete="CASCADE"))
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    shape: Mapped[str] = mapped_column(String(8))
    media_type: Mapped[str] = mapped_column(String(128))
    manifest_digest: Mapped[str] = mapped_column(String(71))
    manifest: Mapped[bytes] = mapped_column(LargeBinary)
    config_digest: Mapped[str] = mapped_column(String(71))
    config: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[dt.datetime]


class OciReferrerDigest(Base):
    """The digests of one referrer of a released version (its manifest's and its document's), recorded when
    its documents are built, so a ``/v2`` lookup by digest is one indexed query and a miss builds nothing
    (``registry/services/oci_referrers.py``). A document that changes adds a row; a stale row finds the
    version, whose documents then no longer match, and answers unknown."""

    __tablename__ = "oci_referrer_digests"
    __table_args__ = (
        UniqueConstraint("version_id", "manifest_digest"),
        Index("ix_oci_referrer_digests_model_manifest", "model_id", "manifest_digest"),
        Index("ix_oci_referrer_digests_model_layer", "model_id", "layer_digest"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id", ondelete="CASCADE"))
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    artifact_type: Mapped[str] = mapped_column(String(128))
    manifest_digest: Mapped[str] = mapped_column(String(71))
    layer_digest: Mapped[str] = mapped_column(String(71))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class OciTarLayer(Base):
    """A tar layer an artifact references (each image layer; the packed small files of a version of many):
    never stored as bytes, generated when served from ``paths`` (the version's files, in tar order)."""

    __tablename__ = "oci_tar_layers"
    __table_args__ = (Index("ix_oci_tar_layers_model_digest", "model_id", "digest"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    artifact_id: Mapped[int] = mapped_column(ForeignKey("oci_artifacts.id", ondelete="CASCADE"), index=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    root: Mapped[str] = mapped_column(String(16))
    """The directory the members sit under in the tar (``models``; empty for the raw shape's pack)."""
    digest: Mapped[str] = mapped_column(String(71))
    size: Mapped[int] = mapped_column(BigInteger)
    paths: Mapped[list[str]] = mapped_column(JSON)


class ReceiptReporter(Base):
    """One reporter of receipts: a node program (``fetch``, ``cache-warm``...) run by a principal on a node, for
    one scope (a cache root, a bucket...), and when it last reported. A place whose reporter has been silent
    longer than ``receipts_stale_after_seconds`` is shown stale (``registry/services/receipts.py``)."""

    __tablename__ = "receipt_reporters"
    __table_args__ = (UniqueConstraint("principal", "program", "node", "scope"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    principal: Mapped[str] = mapped_column(String(128))
    program: Mapped[str] = mapped_column(String(16))
    node: Mapped[str] = mapped_column(String(253))
    scope: Mapped[str] = mapped_column(String(256))
    first_report_at: Mapped[dt.datetime]
    last_report_at: Mapped[dt.datetime]


class Receipt(Base):
    """A place holding a version, as its reporter says: a folder or bucket of a node, or a pod's volume. One
    row per (principal, place, version); ``since`` is when it was first held (again, after a drop),
    ``dropped_at`` set once it is not. ``alerted_at`` is when its ``version.still_running`` event was appended
    (once per place per revocation)."""

    __tablename__ = "receipts"
    __table_args__ = (
        UniqueConstraint("principal", "place_digest", "version_id"),
        Index("ix_receipts_version_held", "version_id", "dropped_at"),
        Index("ix_receipts_reporter_held", "reporter_id", "dropped_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    reporter_id: Mapped[int] = mapped_column(ForeignKey("receipt_reporters.id", ondelete="CASCADE"))
    version_id: Mapped[int] = mapped_column(ForeignKey("versions.id", ondelete="CASCADE"))
    principal: Mapped[str] = mapped_column(String(128))
    program: Mapped[str] = mapped_column(String(16))
    place_digest: Mapped[str] = mapped_column(String(64))
    """The sha256 of the place's key (``path:<node>:<path>``, ``pod:<ns>/<pod>/<uid>/<volume>``...)."""
    place: Mapped[dict[str, Any]] = mapped_column(JSON)
    node: Mapped[str] = mapped_column(String(253))
    namespace: Mapped[str | None] = mapped_column(String(253), nullable=True)
    pod: Mapped[str | None] = mapped_column(String(253), nullable=True)
    since: Mapped[dt.datetime]
    last_reported_at: Mapped[dt.datetime]
    dropped_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    alerted_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)


class AdmissionAnsweredUid(Base):
    """The request uid of a review the webhook answered from its proof and reported, once recorded: a batch sent
    again after a timeout records none of them twice. Kept a day (``admission.ANSWERED_UIDS_KEPT``)."""

    __tablename__ = "admission_answered_uids"

    uid: Mapped[str] = mapped_column(String(64), primary_key=True)
    recorded_at: Mapped[dt.datetime] = mapped_column(index=True)
