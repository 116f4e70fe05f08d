"""Release manifests, server side: what a serving node may download for a model's alias or version.

:func:`issue` resolves ``ref`` (an alias, by the canary routing of :func:`registry.domain.aliases.resolve`
as :func:`registry.services.aliases.resolve` does, in one query; or a version number) for the tenant a request
is served for, refuses anything but an approved, unrevoked version, and signs a release
(:mod:`registry.signing.release`) with a key of the newest trust root
(:func:`registry.services.trust_roots.release_signer`). Presigned blob URLs travel
beside the signed payload, with the version's OpenSSF bundle (written by the fetch client as
``model.sig``).

Decisions a reader might question:

- The serial of ``(model, ref)`` (``release_serials``) is bumped when the issuing request sees that
  what the ref resolves to (main version and canary) differs from what it resolved to at the last
  bump, by one conditional ``UPDATE``: two requests racing after a move bump it once, and the same
  content keeps its serial. A version number always resolves to itself: its serial stays 1.
- The ETag digests serial, version, the tenant served and the signing key id: it changes exactly
  when a node must look again (an alias move, a canary change, a key rotation), not with ``issued_at``.
- Each 200 answer is a row in ``release_issuances`` (principal, model, ref, tenant, version, serial,
  key, time), not an audit event: every pod start and every long-poll wake-up issues one, and the
  audit chain serializes its appends on one head row, so an event per issuance would queue every
  manifest request behind one lock and drown the decisions auditors read. Who may fetch, alias
  moves, approvals, revocations and key rotations are audited where they happen.
- What never changes is cached per process (:class:`ReleaseCache`): a version's files, digests and bundle,
  and the trust roots. A request then costs its authentication, one query resolving the ref with its
  stored serial and the newest root's number, and the issuance insert.
- A long poll issues again only when the process's event watcher (:mod:`registry.watch`) sees an
  audit event naming its alias or the version served, or a trust root change; it polls nothing itself.
- An adapter's release names the base it is served with (``adapter_of``, decided by
  :func:`registry.services.adapter_serving.served_base`, which refuses it when the base moved or was
  revoked). Its serial follows the base's alias too, and its long poll wakes on the base's events.

Usage (a sketch, not run as a doctest)::

    issued = issue(session, node, "acme", "llm", "prod", keyring=container.keyring,
                   blob_store=container.blob_store, clock=container.clock,
                   config=ReleaseConfig.from_settings(container.settings))
    issued.body["envelope"]["payloadType"]
    # -> 'application/vnd.modelreg.release+json'
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from registry.auth import AuthenticatedPrincipal
from registry.clock import Clock
from registry.db.models import (
    Alias,
    Approval,
    AuditEvent,
    PolicyDecision,
    ReleaseIssuance,
    ReleaseSerial,
    Tenant,
    TrustRootRecord,
    Version,
    VersionFacts,
)
from registry.db.session import begin_write, is_postgres
from registry.domain import aliases as alias_rules
from registry.domain import serving
from registry.domain.components import UNIT_FILE, components_map
from registry.domain.errors import (
    InvalidInputError,
    InvalidStateError,
    RegistryError,
    ReleaseNotLoggedError,
    TenantNotFoundError,
)
from registry.domain.events import ALIAS_MOVE_ACTIONS, APPROVED_ACTION
from registry.domain.serving import Channel, ReleaseFacts
from registry.domain.states import VersionState
from registry.services import adapter_serving, aliases, loaders, tlog
from registry.services import chunks as chunk_lists
from registry.services.trust_roots import release_signer
from registry.services.units import components_of
from registry.signing.bundle import bundle_ignore_paths
from registry.signing.canonical import canonical_json
from registry.signing.keyring import KeyRing
from registry.signing.release import release_payload, sign_release
from registry.storage.base import BlobStore
from registry.tlog.note import Ed25519Signer

VERSION_REF_RE = re.compile(r"\A[1-9][0-9]{0,8}\Z")
"""A version number as a ref (nine digits at most: an ``Integer`` column holds it)."""
MAX_WAIT_SECONDS = 300
LOG_PENDING_RETRY_AFTER_SECONDS = 2
"""The Retry-After of a release its log cannot prove yet (the workers integrate the log every few seconds)."""


@dataclass(frozen=True)
class ReleaseConfig:
    """Lifetimes of what :func:`issue` hands out (from settings)."""

    alias_ttl: dt.timedelta
    version_ttl: dt.timedelta
    url_ttl: dt.timedelta
    root_expiry: dt.timedelta
    log_key: Ed25519Signer | None = None
    """The verifiable log's key: a release whose events no checkpoint covers yet gets one signed at once."""
    cosign: Callable[[], Any] | None = None
    """Asks the log's witnesses to cosign the newest checkpoint (after one was signed for a release)."""
    log_catch_up: int = tlog.DEFAULT_BATCH
    """The most audit events a request integrates itself; further behind, it answers 503 (Retry-After)."""

    @classmethod
    def from_settings(cls, settings: Any, log_key: Ed25519Signer | None = None,
                      cosign: Callable[[], Any] | None = None) -> ReleaseConfig:
        return cls(alias_ttl=dt.timedelta(seconds=settings.release_alias_ttl_seconds),
                   version_ttl=dt.timedelta(seconds=settings.release_version_ttl_seconds),
                   url_ttl=dt.timedelta(seconds=settings.release_url_ttl_seconds),
                   root_expiry=dt.timedelta(days=settings.trust_root_expiry_days), log_key=log_key,
                   cosign=cosign, log_catch_up=settings.log_release_catch_up_events)


@dataclass(frozen=True)
class WatchKey:
    """What a long poll watches: the alias row (or the version, for a version number ref)."""

    model_id: int
    alias: str | None
    version_id: int
    also: tuple[str, ...] = ()
    """More audit subjects that change the release (an adapter's base alias and versions)."""


@dataclass(frozen=True)
class Issued:
    """A release as answered: ``body`` is None when the caller's ETag is current (304)."""

    etag: str
    serial: int
    version: int
    body: dict[str, Any] | None
    watch: WatchKey


class ReleaseCache:
    """What never changes for a database, kept per process (the container holds one): the release parts
    of each approved version (files, source, license, facts, statement and approval digests, bundle) by
    version id, and the parsed trust roots with the key chosen for each.

    A version's state is always read fresh: a revocation is seen by the next request.
    """

    MAX_VERSIONS = 4096

    def __init__(self) -> None:
        self.versions: dict[int, _VersionRelease] = {}
        self.roots: dict[int, tuple[Any, Any]] = {}

    def version_release(self, session: Session, version_id: int) -> _VersionRelease:
        found = self.versions.get(version_id)
        # Until every file's chunk list is recorded (a backfill job), read again: the next release has them.
        if found is None or not found.chunked:
            found = _version_release(session, session.get(Version, version_id))
            if len(self.versions) >= self.MAX_VERSIONS:
                self.versions.clear()
            self.versions[version_id] = found
        return found


def issue(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, ref: str,
          for_tenant: str | None = None, *, if_none_match: str | None = None, keyring: KeyRing,
          blob_store: BlobStore, clock: Clock, config: ReleaseConfig, cache: ReleaseCache | None = None) -> Issued:
    """The signed release of ``tenant/name@ref`` for ``for_tenant`` (default ``tenant``), recorded; or,
    when ``if_none_match`` holds its current ETag, nothing (no record, no signature).

    Readers and serving nodes (``fetch``) of the tenant may ask; raises as :func:`issue_to`.
    """
    return issue_to(session, [principal], tenant, name, ref, for_tenant, if_none_match=if_none_match,
                    keyring=keyring, blob_store=blob_store, clock=clock, config=config, cache=cache)


def issue_to_each(session: Session, principals: Sequence[AuthenticatedPrincipal], tenant: str, name: str,
                  ref: str, for_tenant: str | None = None, **kwargs: Any) -> list[Issued | RegistryError]:
    """:func:`issue_to` for callers each authorized on their own: per caller, the release (one for all who
    may ask) or the error that caller gets (its refusal, or the release's own error)."""
    refused: dict[int, RegistryError] = {}
    for index, principal in enumerate(principals):
        try:
            _authorize(principal, tenant)
        except RegistryError as exc:
            refused[index] = exc
    allowed = [p for i, p in enumerate(principals) if i not in refused]
    shared: Issued | RegistryError | None = None
    if allowed:
        try:
            shared = issue_to(session, allowed, tenant, name, ref, for_tenant, **kwargs)
        except RegistryError as exc:
            shared = exc
    return [refused[i] if i in refused else shared for i in range(len(principals))]  # type: ignore[misc]


def issue_to(session: Session, principals: Sequence[AuthenticatedPrincipal], tenant: str, name: str, ref: str,
             for_tenant: str | None = None, *, if_none_match: str | None = None, keyring: KeyRing,
             blob_store: BlobStore, clock: Clock, config: ReleaseConfig, cache: ReleaseCache | None = None
             ) -> Issued:
    """:func:`issue` for several callers asking the same at once (long-poll waiters woken by one event):
    one resolution, one signature and one transaction, with an issuance recorded for each of them.

    The release names no caller, so one body serves them all; each is authorized and each is recorded.

    Readers and serving nodes (``fetch``) of the tenant may ask.

    Raises:
        PermissionDeniedError: neither ``read`` nor ``fetch`` in ``tenant``.
        InvalidInputError: ``ref`` is neither an alias name nor a version number.
        TenantNotFoundError, ModelNotFoundError, AliasNotFoundError, VersionNotFoundError: nothing by that name
            (``for_tenant`` included).
        RevokedError: the version the ref gives this tenant is revoked (``AdapterBaseRevokedError``: an
            adapter whose base is).
        NotApprovedError: it is not approved (or an adapter's base is not).
        AdapterBaseMovedError: an adapter asked for through an alias whose base model's alias of that name
            points at other weights than the bound ones.
        VersionDeletedError: retention deleted it (checked by :mod:`registry.domain.serving`, as all three are).
        NoSigningKeyError: the registry holds no key of the newest trust root.
        ReleaseNotLoggedError: the trust root names the log and it cannot prove this release yet (503).
    """
    if not principals:
        raise ValueError("issue to at least one caller")
    for principal in principals:
        _authorize(principal, tenant)
    principal = principals[0]
    cache = cache or ReleaseCache()
    for_tenant = for_tenant or tenant
    model_ref = f"{tenant}/{name}"
    found = _resolve(session, principal, tenant, name, ref, for_tenant)
    if for_tenant != tenant and session.scalar(select(Tenant.id).where(Tenant.name == for_tenant)) is None:
        # A release served for a tenant that does not exist would record and sign a name nobody holds.
        raise TenantNotFoundError(for_tenant)
    deleted = session.scalar(select(Version.deleted_at).where(Version.id == found.version_id)) is not None
    facts = ReleaseFacts(model_ref, found.number, found.state, revoke_reason=found.revoke_reason, deleted=deleted)
    refusal = serving.release_refusal(facts, Channel.MANIFEST, ref, is_alias=found.is_alias)
    if refusal is not None:
        raise refusal
    parts = cache.version_release(session, found.version_id)
    base = None
    if parts.binding is not None:
        base = adapter_serving.served_base(session, parts.binding, ref, is_alias=found.is_alias,
                                           for_tenant=for_tenant)
        # The serial moves when the base served does: a node then takes the new release, never an old one.
        found = dataclasses.replace(found, target_digest=_digest({"target": found.target_digest,
                                                                  "base": base.target}))
    watch = WatchKey(found.model_id, ref if found.is_alias else None, found.version_id,
                     base.watch if base is not None else ())
    root, key = release_signer(session, keyring, expires_in=config.root_expiry, clock=clock, cache=cache.roots,
                               newest_version=found.root_version)
    if found.serial is not None and found.serial_digest == found.target_digest:
        etag = release_etag(found.serial, found.number, for_tenant, key.key_id)
        if etag_matches(if_none_match, etag):
            session.rollback()
            return Issued(etag, found.serial, found.number, None, watch)
    now = clock.now()
    adapter_of = None
    if base is not None:
        statement = cache.version_release(session, base.version_id).fields["statement_digest"]
        adapter_of = base.document(statement)
    # Proven before anything is recorded: a release the log cannot prove yet is answered 503, not issued.
    log = _log_proof(session, tenant, name, ref, found, config, now) if root.log is not None else None
    begin_write(session)
    serial = _serial(session, found, ref, now)
    if serial == found.serial and is_postgres(session):
        # Only the issuance row is written: it need not wait for the WAL flush (a crash may lose the last
        # few rows, never a serial; a bumped serial commits durably, so a serial never names two contents).
        session.execute(text("SET LOCAL synchronous_commit = off"))
    session.add_all([ReleaseIssuance(principal=p.name, model=model_ref, ref=ref, for_tenant=for_tenant,
                                     version=found.number, serial=serial, key_id=key.key_id, at=now)
                     for p in principals])
    session.commit()
    ttl = config.alias_ttl if found.is_alias else config.version_ttl
    payload = release_payload(model=model_ref, ref=ref, tenant=for_tenant, version=found.number, serial=serial,
                              issued_at=now, expires_at=now + ttl, adapter_of=adapter_of, **parts.fields)
    body = {"envelope": sign_release(payload, [key]),
            "transport": {f["path"]: blob_store.presign_get(f["sha256"], config.url_ttl)
                          for f in parts.fields["files"]},
            "signature_bundle": parts.bundle,
            "trust_root_version": root.version}
    if root.log is not None:
        # Nodes of a root that names the log accept only a release proven in it (ADR 0011).
        body["log"] = log
    return Issued(release_etag(serial, found.number, for_tenant, key.key_id), serial, found.number, body, watch)


def release_etag(serial: int, version: int, for_tenant: str, key_id: str) -> str:
    """The quoted ETag of a release: what a node must fetch again for, nothing else."""
    digest = hashlib.sha256(f"{serial}\n{version}\n{for_tenant}\n{key_id}".encode()).hexdigest()
    return f'"{digest[:32]}"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (weak or strong, in a list).

    ``*`` matches nothing: a node that holds no release must get one, never wait for a change.
    """
    if not if_none_match:
        return False
    for candidate in if_none_match.split(","):
        candidate = candidate.strip()
        if candidate.startswith("W/"):
            candidate = candidate[2:]
        if candidate == etag:
            return True
    return False


# --- inside ---------------------------------------------------------------------------------------


def _authorize(principal: AuthenticatedPrincipal, tenant: str) -> None:
    refusal = serving.caller_refusal(principal.name, principal.permissions(tenant), tenant)
    if refusal is not None:
        raise refusal


@dataclass(frozen=True)
class _Found:
    """The version a ref gives a tenant, with what its serial follows and the serial stored for it."""

    model_id: int
    version_id: int
    number: int
    state: str
    revoke_reason: str | None
    is_alias: bool
    target_digest: str
    serial: int | None
    serial_digest: str | None
    root_version: int | None


def _resolve(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, ref: str,
             for_tenant: str) -> _Found:
    """Resolve ``ref`` for ``for_tenant`` in one query (model, alias, both versions, the stored serial),
    by :func:`registry.domain.aliases.resolve`'s rules; when nothing matches, the services' loaders say
    what is missing (tenant, model, alias or version)."""
    if isinstance(ref, str) and VERSION_REF_RE.match(ref):
        row = session.execute(_VERSION_QUERY, {"tenant": tenant, "name": name, "number": int(ref),
                                               "ref": ref}).one_or_none()
        if row is None:
            model = loaders.load_model_unchecked(session, tenant, name)
            loaders.load_version_unchecked(session, model, int(ref))  # VersionNotFoundError
            raise AssertionError("unreachable: the version exists but was not found")  # pragma: no cover
        return _Found(row.model_id, row.id, row.number, row.state, row.revoke_reason, False,
                      _digest({"version": row.number}), row.serial, row.target_digest, row.root_version)
    try:
        alias_rules.validate_alias_name(ref)
    except InvalidInputError:
        raise InvalidInputError(f"invalid ref {ref!r}: name an alias (a lower-case letter first) or a version "
                                "number", field="ref", value=str(ref)[:80]) from None
    params = {"tenant": tenant, "name": name, "ref": ref}
    row = session.execute(_ALIAS_QUERY, params).one_or_none()
    if row is None:
        # Raises what is missing (tenant, model, alias); an alias made since is read again.
        aliases.resolve(session, principal, tenant, name, ref, for_tenant)
        row = session.execute(_ALIAS_QUERY, params).one()
    canary = (alias_rules.Canary(row.c_number, frozenset(row.canary_tenants or ()))
              if row.c_id is not None else None)
    target = alias_rules.AliasTarget(row.number, canary)
    revoked = {number: reason or "revoked" for number, state, reason in (
        (row.number, row.state, row.revoke_reason), (row.c_number, row.c_state, row.c_revoke_reason))
        if state == VersionState.REVOKED.value}
    resolution = alias_rules.resolve(f"{tenant}/{name}", ref, target, for_tenant, revoked)  # RevokedError
    if resolution.canary:
        version = (row.c_id, row.c_number, row.c_state, row.c_revoke_reason)
    else:
        version = (row.id, row.number, row.state, row.revoke_reason)
    return _Found(row.model_id, version[0], version[1], version[2], version[3], True,
                  _digest({"version": target.version, "canary": aliases.canary_doc(target)}),
                  row.serial, row.target_digest, row.root_version)


def _queries() -> tuple[Any, Any]:
    from sqlalchemy import and_, bindparam
    from sqlalchemy.orm import aliased

    from registry.db.models import Model, Tenant

    canary = aliased(Version)
    # The newest trust root's number rides along: the signer needs nothing else when its root is cached.
    root_version = select(func.max(TrustRootRecord.version)).scalar_subquery().label("root_version")
    serial_join = and_(ReleaseSerial.model_id == Model.id, ReleaseSerial.ref == bindparam("ref"))
    alias_query = (
        select(Model.id.label("model_id"), Version.id, Version.number, Version.state, Version.revoke_reason,
               canary.id.label("c_id"), canary.number.label("c_number"), canary.state.label("c_state"),
               canary.revoke_reason.label("c_revoke_reason"), Alias.canary_tenants, ReleaseSerial.serial,
               ReleaseSerial.target_digest, root_version)
        .select_from(Model).join(Tenant, Tenant.id == Model.tenant_id)
        .join(Alias, and_(Alias.model_id == Model.id, Alias.name == bindparam("ref")))
        .join(Version, Version.id == Alias.version_id)
        .outerjoin(canary, canary.id == Alias.canary_version_id)
        .outerjoin(ReleaseSerial, serial_join)
        .where(Tenant.name == bindparam("tenant"), Model.name == bindparam("name")))
    version_query = (
        select(Model.id.label("model_id"), Version.id, Version.number, Version.state, Version.revoke_reason,
               ReleaseSerial.serial, ReleaseSerial.target_digest, root_version)
        .select_from(Model).join(Tenant, Tenant.id == Model.tenant_id)
        .join(Version, and_(Version.model_id == Model.id, Version.number == bindparam("number")))
        .outerjoin(ReleaseSerial, serial_join)
        .where(Tenant.name == bindparam("tenant"), Model.name == bindparam("name")))
    return alias_query, version_query


_ALIAS_QUERY, _VERSION_QUERY = _queries()


def _digest(target: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(target)).hexdigest()


def _serial(session: Session, found: _Found, ref: str, now: dt.datetime) -> int:
    """The serial for what ``ref`` resolves to now: the stored one when it resolved to the same before, else
    one more (a single conditional UPDATE: concurrent issuers after one move bump it once)."""
    if found.serial is not None and found.serial_digest == found.target_digest:
        return found.serial
    key = (ReleaseSerial.model_id == found.model_id, ReleaseSerial.ref == ref)
    if found.serial is None:
        insert = postgresql_insert if is_postgres(session) else sqlite_insert
        session.execute(insert(ReleaseSerial).values(model_id=found.model_id, ref=ref, serial=1,
                                                     target_digest=found.target_digest, updated_at=now)
                        .on_conflict_do_nothing())
    session.execute(update(ReleaseSerial).where(*key, ReleaseSerial.target_digest != found.target_digest)
                    .values(serial=ReleaseSerial.serial + 1, target_digest=found.target_digest, updated_at=now))
    return session.scalar(select(ReleaseSerial.serial).where(*key))


def _log_proof(session: Session, tenant: str, name: str, ref: str, found: _Found, config: ReleaseConfig,
               now: dt.datetime) -> dict[str, Any] | None:
    """The checkpoint and inclusion proofs of the events that made this release: the version's approval
    and, for an alias, its newest move; None when the registry has no such event, or no log key of its own.

    Raises:
        ReleaseNotLoggedError: the registry holds the log key but no checkpoint covers the events yet (the
            log is further behind than ``config.log_catch_up``): a transient state, answered 503 with
            Retry-After, never a release without its proof (which a node refuses as unproven).
    """
    subjects = [(f"{tenant}/{name}@{found.number}", (APPROVED_ACTION,))]
    if found.is_alias:
        subjects.append((f"{tenant}/{name}@{ref}", ALIAS_MOVE_ACTIONS))
    events = []
    for subject, actions in subjects:
        event = session.scalars(select(AuditEvent).where(AuditEvent.subject == subject,
                                                         AuditEvent.action.in_(actions))
                                .order_by(AuditEvent.id.desc()).limit(1)).first()
        if event is None:
            return None
        events.append(event)
    if config.log_key is None:
        return tlog.release_proof(session, events)
    newest = max(e.id for e in events)
    logged = tlog.log_through(session, config.log_key, newest, now=now, max_behind=config.log_catch_up)
    if logged == "signed" and config.cosign is not None:
        config.cosign()  # bounded: each witness has a short timeout; a node missing its quorum refuses
    proof = tlog.release_proof(session, events) if logged != "behind" else None
    if proof is None:
        raise ReleaseNotLoggedError(f"{tenant}/{name}", ref, newest, LOG_PENDING_RETRY_AFTER_SECONDS)
    return proof


@dataclass(frozen=True)
class _VersionRelease:
    """What a release says of its version, the same in every release of it."""

    fields: dict[str, Any]
    bundle: dict[str, Any] | None
    chunked: bool = True
    """Whether ``fields`` holds every file's chunk root (``chunks``); a release omits them until then."""
    binding: adapter_serving.BoundBase | None = None
    """An adapter's binding to its base (None for anything else): it never changes either."""


def _version_release(session: Session, version: Version) -> _VersionRelease:
    files = [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in version.files]
    facts_row = session.get(VersionFacts, version.id)
    facts = None if facts_row is None else {**facts_row.facts, "reader_version": facts_row.reader_version}
    chunks = chunk_lists.release_chunks(session, [(f["path"], f["sha256"]) for f in files])
    unit: dict[str, Any] = {}
    # Only a version sealed as a unit: its bundle lets model_signing verify skip what the node writes beside it.
    if UNIT_FILE in bundle_ignore_paths(version.manifest_bundle):
        components = components_of(session, version)
        if components is not None:
            recorded, listed = (facts or {}).get("parts") or {}, {f["path"] for f in files}
            unit = {"components": components_map(components),
                    "parts": {path: named for path, named in recorded.items() if path in listed}}
    return _VersionRelease(
        fields={"source": {"kind": version.source_kind, "repo": version.source_repo,
                           "revision": version.resolved_revision},
                "files": files, "license": version.license, "facts": facts,
                "statement_digest": statement_digest(version.manifest_bundle),
                "approval_digest": hashlib.sha256(canonical_json(approval_record(session, version))).hexdigest(),
                **({"chunks": chunks} if chunks is not None else {}), **unit},
        bundle=version.manifest_bundle, chunked=chunks is not None,
        binding=adapter_serving.binding_of(session, version))


def statement_digest(bundle: dict[str, Any] | None) -> str:
    """sha256 of the signed model-signing statement: the DSSE payload bytes of the version's bundle."""
    if not bundle:
        # An approved version was sealed: it has a bundle. Never sign a release saying otherwise.
        raise InvalidStateError("the version has no signed statement (not sealed)")
    return hashlib.sha256(base64.b64decode(bundle["dsseEnvelope"]["payload"])).hexdigest()


def approval_record(session: Session, version: Version) -> dict[str, Any]:
    """The record a release's ``approval_digest`` covers: the policy decision that allowed the version
    (its bundle and input digests; None when it was approved otherwise) and every person's decision."""
    decision = session.scalar(select(PolicyDecision).where(
        PolicyDecision.version_id == version.id, PolicyDecision.kind == "approval",
        PolicyDecision.allowed.is_(True)).order_by(PolicyDecision.id.desc()).limit(1))
    decisions = session.scalars(select(Approval).where(Approval.version_id == version.id)
                                .order_by(Approval.at, Approval.id))
    return {"version": loaders.version_ref(version),
            "decision": None if decision is None else {
                "bundle_digest": decision.bundle_digest, "input_digest": decision.input_digest,
                "decided_at": decision.decided_at.isoformat()},
            "approvals": [{"principal": a.principal.name, "capacity": a.capacity, "decision": a.decision,
                           "at": a.at.isoformat(), "files": list(a.files)} for a in decisions]}
