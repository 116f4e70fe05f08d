"""Provenance: the questions an auditor asks of a version, an alias, a blob or the audit log, each in one call.

Every question is asked of a model's version named by ``ref``: a version number, or an alias. An alias is
answered for the version it targets for everyone (its main version); when it also carries a canary, the
answer says so (``ref.canary``) and the canary version is asked about with its own number. A revoked
version is answered like any other: its history does not go away with it.

Who may ask: the auditors (``audit``) of the model's tenant, and administrators. The questions that name
no model (:func:`versions_with_blob`, :func:`versions_with_component`, :func:`check_audit_log`) are for the
auditors of any tenant, and the blob and component questions answer only from the tenants the caller
audits. Authorization is checked before anything is read, so a refusal reads the same whether what was
named exists or not.

Lists that can grow long (files, scans, alias moves, nodes, versions holding a blob or a release-unit component,
a component's changes under an alias) come a page at a time:
``limit`` rows after ``cursor`` (the ``next_cursor`` of the page before, None at the end).

Usage (a sketch, not run as a doctest)::

    doc = origin(session, auditor, "acme", "llm", "prod")
    doc["source"]["repo"], doc["resolved_revision"], doc["submitted_by"]
    # -> ('org/llm', '4f1c...', 'sam')
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from cryptography.hazmat.primitives import serialization
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from registry import audit
from registry.auth import AuthenticatedPrincipal, Permission, get_tenant, require, validate_name
from registry.db.models import (
    Alias,
    AliasMove,
    Approval,
    Download,
    EvalResult,
    LicenseFinding,
    Model,
    PolicyDecision,
    Principal,
    ReleaseIssuance,
    Tenant,
    Version,
    VersionComponent,
    VersionFile,
)
from registry.domain import aliases as alias_rules
from registry.domain.components import COMPONENTS
from registry.domain.errors import (
    AliasNotFoundError,
    AuditChainError,
    ComponentNotFoundError,
    InvalidInputError,
    LimitExceededError,
    PermissionDeniedError,
)
from registry.domain.files import SHA256_RE
from registry.domain.serving import Channel
from registry.domain.states import VersionState
from registry.policy import PolicyEngine
from registry.services import evals, loaders, receipts, scans, trust_roots, units
from registry.services.manifests import VERSION_REF_RE, statement_digest
from registry.signing.keys import VerifyingKey
from registry.signing.trust_root import ALGORITHM
from registry.workload_identity import is_node_principal_name

MAX_PAGE = 1000
"""Most rows of one page."""
MAX_CHECKPOINTS = 10_000
"""Most saved checkpoints one audit-log question may hold the chain to."""


# --- asking of a version --------------------------------------------------------------------------


def _check_page(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInputError(f"limit must be 1 to {MAX_PAGE}", field="limit", value=str(limit))


def _version_of(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str,
                ref: str) -> tuple[Version, dict[str, Any]]:
    """Authorize, then the version ``ref`` names and how it was named (``{"ref", "alias", "version", "canary"}``).

    Raises:
        PermissionDeniedError: ``principal`` audits no such tenant.
        InvalidInputError: ``ref`` is neither a version number nor an alias name.
        TenantNotFoundError, ModelNotFoundError, VersionNotFoundError, AliasNotFoundError.
    """
    require(principal, tenant, Permission.AUDIT)
    model = loaders.load_model_unchecked(session, tenant, name)
    if isinstance(ref, str) and VERSION_REF_RE.match(ref):
        version = loaders.load_version_unchecked(session, model, int(ref))
        return version, {"ref": ref, "alias": None, "version": version.number, "canary": None}
    try:
        alias_rules.validate_alias_name(ref)
    except InvalidInputError:
        raise InvalidInputError(f"invalid ref {str(ref)[:80]!r}: name an alias (a lower-case letter first) or a "
                                "version number", field="ref", value=str(ref)[:80]) from None
    row = session.scalar(select(Alias).where(Alias.model_id == model.id, Alias.name == ref))
    if row is None:
        raise AliasNotFoundError(f"{tenant}/{name}", ref)
    canary = None
    if row.canary_version is not None:
        canary = {"version": row.canary_version.number, "tenants": sorted(row.canary_tenants or ()),
                  "note": f"the alias also serves version {row.canary_version.number} to these tenants (its "
                          "canary); this answer is of its main version: ask of that number for the canary"}
    return row.version, {"ref": ref, "alias": ref, "version": row.version.number, "canary": canary}


def _head(version: Version, named: dict[str, Any]) -> dict[str, Any]:
    return {"model": f"{version.model.tenant.name}/{version.model.name}", "version": version.number,
            "state": version.state, "ref": named}


def _iso(at: dt.datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def _principal_name(session: Session, principal_id: int | None) -> str | None:
    if principal_id is None:
        return None
    return session.scalar(select(Principal.name).where(Principal.id == principal_id))


def origin(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, ref: str) -> dict[str, Any]:
    """Question 1: where the version came from (upstream, requested and resolved revision), who submitted it, when."""
    version, named = _version_of(session, principal, tenant, name, ref)
    return {**_head(version, named),
            "source": {"kind": version.source_kind, "repo": version.source_repo,
                       "endpoint": version.source_endpoint},
            "requested_revision": version.requested_revision, "resolved_revision": version.resolved_revision,
            "include": list(version.include or ()), "exclude": list(version.exclude or ()),
            "submitted_by": _principal_name(session, version.submitted_by),
            "submitted_at": _iso(version.created_at), "sealed_at": _iso(version.sealed_at),
            "revocation": None if version.revoked_at is None else {
                "at": _iso(version.revoked_at), "by": version.revoked_by, "reason": version.revoke_reason}}


def _signing_key(session: Session, key_id: str | None) -> dict[str, Any] | None:
    """The key that signed a version's statement, as the trust roots publish it (None when unsigned)."""
    if key_id is None:
        return None
    published, roots = trust_roots.published_keys(session).get(key_id, (None, []))
    doc: dict[str, Any] = {"key_id": key_id, "algorithm": ALGORITHM, "trust_root_versions": roots,
                           "public_key_pem": None, "fingerprint_sha256": None}
    if published is not None:
        der = serialization.load_pem_public_key(published.public_pem()).public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        doc.update(public_key_pem=published.public_pem().decode(), fingerprint_sha256=hashlib.sha256(der).hexdigest())
    return doc


def _files_page(session: Session, version: Version, limit: int,
                cursor: str | None) -> tuple[list[VersionFile], str | None]:
    query = select(VersionFile).where(VersionFile.version_id == version.id)
    after = _cursor(cursor)
    if after is not None:
        query = query.where(VersionFile.path > after)
    rows = list(session.scalars(query.order_by(VersionFile.path).limit(limit + 1)))
    return rows[:limit], (encode_cursor(rows[limit - 1].path) if len(rows) > limit else None)


def files(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, ref: str, *,
          limit: int = 1000, cursor: str | None = None) -> dict[str, Any]:
    """Question 2: the version's files (path, size, sha256), a page at a time, and the key that signed its
    statement (the OpenSSF model-signing bundle made at sealing)."""
    _check_page(limit)
    version, named = _version_of(session, principal, tenant, name, ref)
    rows, next_cursor = _files_page(session, version, limit, cursor)
    return {**_head(version, named),
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in rows],
            "next_cursor": next_cursor,
            "manifest_digest": version.manifest_digest,
            "statement_digest": statement_digest(version.manifest_bundle) if version.manifest_bundle else None,
            "signed_by": _signing_key(session, version.signing_key_id)}


def scan_results(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, ref: str, *,
                 limit: int = 1000, cursor: str | None = None) -> dict[str, Any]:
    """Question 3: every scanner's result on each file (scanner name and version, verdict, findings), a page
    of files at a time."""
    _check_page(limit)
    version, named = _version_of(session, principal, tenant, name, ref)
    rows, next_cursor = _files_page(session, version, limit, cursor)
    return {**_head(version, named), "files": scans.file_scans(session, rows), "next_cursor": next_cursor}


def eval_results(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str,
                 ref: str) -> dict[str, Any]:
    """Question 4: the version's eval results, one per suite, with the suite's version (the sha256 of its
    definition) and the runner and its version. One per suite: a short list."""
    version, named = _version_of(session, principal, tenant, name, ref)
    rows = session.scalars(select(EvalResult).where(EvalResult.version_id == version.id).order_by(EvalResult.suite))
    return {**_head(version, named), "evals": [evals.result_doc(r) for r in rows]}


def _config(engine: PolicyEngine | None) -> dict[str, Any]:
    config = ((engine.data() if engine else {}).get("modelreg") or {}).get("config") or {}
    return config if isinstance(config, dict) else {}


def _approvals(session: Session, version: Version) -> list[Approval]:
    return list(session.scalars(select(Approval).where(Approval.version_id == version.id)
                                .order_by(Approval.at, Approval.id)))


def _approval_doc(a: Approval) -> dict[str, Any]:
    return {"principal": a.principal.name, "capacity": a.capacity, "decision": a.decision, "comment": a.comment,
            "files": list(a.files), "at": _iso(a.at)}


def _approving_decision(session: Session, version: Version) -> dict[str, Any] | None:
    row = session.scalar(select(PolicyDecision).where(
        PolicyDecision.version_id == version.id, PolicyDecision.kind == "approval",
        PolicyDecision.allowed.is_(True)).order_by(PolicyDecision.id.desc()).limit(1))
    return None if row is None else {"outcome": row.outcome, "bundle_digest": row.bundle_digest,
                                     "input_digest": row.input_digest, "decided_at": _iso(row.decided_at)}


def license_provenance(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, ref: str, *,
                       engine: PolicyEngine | None) -> dict[str, Any]:
    """Question 5: the resolved license, each place it was read from (``declared``, the Hub card field
    ``card``, the README front matter ``readme``, a ``license_file:<path>``) or a ``conflict``, and who
    approved it: the approvals in the policy's license capacity, or nobody when it is on the allow-list."""
    version, named = _version_of(session, principal, tenant, name, ref)
    config = _config(engine)
    capacity = config.get("license_capacity", "legal")
    allow_list = {str(x).lower() for x in config.get("license_allow_list", ())}
    findings = session.scalars(select(LicenseFinding).where(LicenseFinding.version_id == version.id)
                               .order_by(LicenseFinding.id))
    return {**_head(version, named), "license": version.license, "declared": version.declared_license,
            "findings": [f.as_dict() for f in findings],
            "allow_listed": (version.license or "").strip().lower() in allow_list,
            "license_capacity": capacity,
            "approved_by": [_approval_doc(a) for a in _approvals(session, version)
                            if a.capacity == capacity and a.decision == "approve"],
            "policy_decision": _approving_decision(session, version)}


def separation_of_duties(submitter: str | None, approvals: Sequence[Approval],
                         required: Sequence[str]) -> dict[str, Any]:
    """Whether separation of duties held, as the approval policy counts decisions: the submitter's decisions
    never count, a person counts once (in one capacity), and each required capacity needs an approval by
    someone else than the submitter, each by a different person."""
    reasons: list[str] = []
    for a in approvals:
        if submitter is not None and a.principal.name == submitter:
            reasons.append(f"the submitter {submitter} decided on their own version ({a.decision} as {a.capacity})")
    by_person: dict[str, list[str]] = {}
    for a in approvals:
        by_person.setdefault(a.principal.name, []).append(a.capacity)
    for person, capacities in sorted(by_person.items()):
        if len(capacities) > 1:
            reasons.append(f"{person} decided {len(capacities)} times ({', '.join(capacities)}): one person "
                           "counts once")
    approvers: dict[str, set[str]] = {}
    for a in approvals:
        if a.decision == "approve" and a.principal.name != submitter:
            approvers.setdefault(a.capacity, set()).add(a.principal.name)
    for capacity in required:
        if not approvers.get(capacity):
            reasons.append(f"no approval in capacity {capacity} by anyone but the submitter")
    return {"held": not reasons, "reasons": reasons, "required_capacities": list(required),
            "submitter": submitter}


def approval_provenance(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, ref: str, *,
                        engine: PolicyEngine | None) -> dict[str, Any]:
    """Question 6: every decision on the version (who, capacity, when) and whether separation of duties held
    (:func:`separation_of_duties`; the required capacities are the approval policy's)."""
    version, named = _version_of(session, principal, tenant, name, ref)
    rows = _approvals(session, version)
    required = [str(c) for c in _config(engine).get("required_capacities", ())]
    submitter = _principal_name(session, version.submitted_by)
    return {**_head(version, named), "approvals": [_approval_doc(a) for a in rows],
            "policy_decision": _approving_decision(session, version),
            "separation_of_duties": separation_of_duties(submitter, rows, required)}


# --- aliases ---------------------------------------------------------------------------------------


def _move_doc(m: AliasMove) -> dict[str, Any]:
    return {"id": m.id, "action": m.action, "at": _iso(m.at), "by": m.actor, "from_version": m.from_version,
            "from_canary": m.from_canary, "to_version": m.to_version, "to_canary": m.to_canary,
            "comment": m.comment, "bundle_digest": m.bundle_digest, "input_digest": m.input_digest}


def alias_history(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, alias: str, *,
                  at: dt.datetime | None = None, limit: int = 1000, cursor: str | None = None) -> dict[str, Any]:
    """Question 7: every move of an alias (promotions with their canaries, rollbacks: by whom, when, from
    what to what), oldest first a page at a time; with ``at``, what the alias pointed at then (None before
    its first move).

    Raises:
        InvalidInputError: a bad alias name, a naive ``at``, a cursor that is no move id.
        AliasNotFoundError: no such alias.
    """
    _check_page(limit)
    require(principal, tenant, Permission.AUDIT)
    alias_rules.validate_alias_name(alias)
    if at is not None:
        if at.tzinfo is None:
            raise InvalidInputError("at must carry a time zone (e.g. 2026-01-31T12:00:00Z)", field="at")
        try:
            at = at.astimezone(dt.timezone.utc)
        except OverflowError:
            # Within a day of year 1 or 9999: before every move, or after every one.
            at = (dt.datetime.min if at.year == 1 else dt.datetime.max).replace(tzinfo=dt.timezone.utc)
    after = _int_cursor(cursor)
    _, row, moves = _alias_moves(session, tenant, name, alias, after, limit)
    doc: dict[str, Any] = {
        "model": f"{tenant}/{name}", "alias": alias, "version": row.version.number,
        "canary": None if row.canary_version is None else {"version": row.canary_version.number,
                                                          "tenants": sorted(row.canary_tenants or ())},
        "moves": [_move_doc(m) for m in moves[:limit]],
        "next_cursor": encode_cursor(moves[limit - 1].id) if len(moves) > limit else None}
    if at is not None:
        last = session.scalar(select(AliasMove).where(AliasMove.alias_id == row.id, AliasMove.at <= at)
                              .order_by(AliasMove.at.desc(), AliasMove.id.desc()).limit(1))
        doc["at"] = {"at": at.isoformat(),
                     "version": None if last is None else last.to_version,
                     "canary": None if last is None else last.to_canary,
                     "move": None if last is None else last.id}
    return doc


def encode_cursor(value: str | int) -> str:
    """A page's ``next_cursor``: the last row's key, opaque to callers (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(str(value).encode()).decode().rstrip("=")


def _cursor(cursor: str | None) -> str | None:
    """The key a cursor of :func:`encode_cursor` holds (None: from the start)."""
    if cursor is None:
        return None
    try:
        if len(cursor) > 1500 or not cursor.isascii():
            raise ValueError
        key = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True).decode()
        if "\x00" in key:
            raise ValueError
        return key
    except ValueError:
        raise InvalidInputError("cursor: pass the next_cursor of the page before", field="cursor") from None


def _int_cursor(cursor: str | None) -> int:
    key = _cursor(cursor)
    if key is None:
        return 0
    if not key.isascii() or not key.isdigit() or len(key) > 18:
        raise InvalidInputError("cursor: pass the next_cursor of the page before", field="cursor")
    return int(key)


# --- serving nodes ---------------------------------------------------------------------------------


def nodes(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, ref: str, *,
          limit: int = 1000, cursor: str | None = None) -> dict[str, Any]:
    """Question 8a: who received the version, by principal: release manifests (through any ref: an alias, a
    canary, its number; ``count``, with the refs and the tenants they were served for), files downloaded
    through ``/hf`` (``hf_downloads``) and manifests pulled through ``/v2`` (``oci_pulls``), both counted in
    ``downloads`` by channel, first and last time of any. A page of principals at a time, by name."""
    _check_page(limit)
    version, named = _version_of(session, principal, tenant, name, ref)
    model = f"{tenant}/{name}"
    issued_where = [ReleaseIssuance.model == model, ReleaseIssuance.version == version.number]
    downloads_where = [Download.version_id == version.id]
    after = _cursor(cursor)
    if after is not None:
        issued_where.append(ReleaseIssuance.principal > after)
        downloads_where.append(Download.principal > after)
    issued = {who: (first, last, n) for who, first, last, n in session.execute(
        select(ReleaseIssuance.principal, func.min(ReleaseIssuance.at), func.max(ReleaseIssuance.at),
               func.count(ReleaseIssuance.id))
        .where(*issued_where).group_by(ReleaseIssuance.principal).order_by(ReleaseIssuance.principal)
        .limit(limit + 1))}
    downloaded, pulled = ({who: (first, last, int(n)) for who, first, last, n in session.execute(
        select(Download.principal, func.min(Download.first_at), func.max(Download.last_at),
               func.sum(Download.count))
        .where(*downloads_where, Download.channel == channel).group_by(Download.principal)
        .order_by(Download.principal).limit(limit + 1))} for channel in (Channel.HF.value, Channel.OCI.value))
    # Each source holds its first limit + 1 names, so the first limit + 1 of all are among them.
    names = sorted(issued.keys() | downloaded.keys() | pulled.keys())[:limit + 1]
    page = names[:limit]
    refs: dict[str, set[tuple[str, str]]] = {}
    if page:
        for who, r, served in session.execute(
                select(ReleaseIssuance.principal, ReleaseIssuance.ref, ReleaseIssuance.for_tenant).distinct()
                .where(ReleaseIssuance.model == model, ReleaseIssuance.version == version.number,
                       ReleaseIssuance.principal.in_(page))):
            refs.setdefault(who, set()).add((r, served))

    def row(who: str) -> dict[str, Any]:
        spans = [s for s in (issued.get(who), downloaded.get(who), pulled.get(who)) if s is not None]
        return {"principal": who, "first_at": _iso(min(s[0] for s in spans)),
                "last_at": _iso(max(s[1] for s in spans)), "count": issued.get(who, (None, None, 0))[2],
                "refs": sorted({r for r, _ in refs.get(who, ())}),
                "for_tenants": sorted({t for _, t in refs.get(who, ())}),
                "hf_downloads": downloaded.get(who, (None, None, 0))[2],
                "oci_pulls": pulled.get(who, (None, None, 0))[2]}

    return {**_head(version, named), "nodes": [row(who) for who in page],
            "next_cursor": encode_cursor(page[-1]) if len(names) > limit else None}


def fetched_by(session: Session, principal: AuthenticatedPrincipal, tenant: str, node: str, *,
               limit: int = 1000) -> dict[str, Any]:
    """What the principal ``node`` received of ``tenant``'s models: per model and version, first and last
    time, how many release manifests, through which refs. Newest version first, the first ``limit``.

    Raises:
        PermissionDeniedError: ``principal`` audits no such tenant.
        InvalidInputError: a bad principal name or limit.
    """
    _check_page(limit)
    require(principal, tenant, Permission.AUDIT)
    if not is_node_principal_name(node):  # a bound service account's (sa:NS/SA@issuer), or a named principal
        validate_name("principal", node)
    rows = session.execute(
        select(ReleaseIssuance.model, ReleaseIssuance.version, func.min(ReleaseIssuance.at),
               func.max(ReleaseIssuance.at), func.count(ReleaseIssuance.id))
        .where(ReleaseIssuance.principal == node,
               ReleaseIssuance.model.startswith(f"{tenant}/", autoescape=True))
        .group_by(ReleaseIssuance.model, ReleaseIssuance.version)
        .order_by(ReleaseIssuance.model, ReleaseIssuance.version.desc()).limit(limit)).all()
    return {"tenant": tenant, "node": node,
            "versions": [{"model": m, "version": v, "first_at": _iso(first), "last_at": _iso(last), "count": n}
                         for m, v, first, last, n in rows]}


RUNNING_BY = ("node", "namespace", "pod")


def _group_key(place: Mapping[str, Any], node: str | None, by: str) -> str | None:
    if by == "node":
        return node
    if place.get("where") != "pod":
        return None
    return place.get("namespace") if by == "namespace" else f"{place.get('namespace')}/{place.get('pod')}"


def running(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, ref: str, *,
            by: str = "node", now: dt.datetime, stale_after: float, limit: int = 1000,
            cursor: str | None = None) -> dict[str, Any]:
    """Question 12: "is version V still running anywhere, and since when?": every place holding it now, as node
    programs, ``cluster watch`` and admission decisions reported it (:mod:`registry.services.receipts`), grouped
    by node, namespace or pod (a place that is no pod is in the group ``null`` then), with since-when and
    whether its reporter has gone quiet (``stale``: shown, never dropped). A page of places at a time.

    Raises:
        PermissionDeniedError: ``principal`` audits no such tenant.
        InvalidInputError: an unknown grouping, a bad ref, cursor or limit.
    """
    _check_page(limit)
    if by not in RUNNING_BY:
        raise InvalidInputError(f"by: one of {', '.join(RUNNING_BY)}", field="by")
    version, named = _version_of(session, principal, tenant, name, ref)
    rows = receipts.held_places(session, [version.id], after=_int_cursor(cursor), limit=limit + 1)
    page = rows[:limit]
    places = [receipts.place_public(r, p, now, stale_after) for r, p in page]
    groups: dict[str | None, dict[str, Any]] = {}
    for place in places:
        key = _group_key(place["place"], place["node"] or place["reporter_node"], by)
        group = groups.setdefault(key, {"key": key, "since": place["since"], "stale": True, "places": []})
        group["since"] = min(group["since"], place["since"])
        group["stale"] = group["stale"] and place["stale"]
        group["places"].append(place)
    revocation = None
    if version.state == VersionState.REVOKED.value:
        revocation = {"at": _iso(version.revoked_at), "by": version.revoked_by, "reason": version.revoke_reason}
    return {**_head(version, named), "by": by, "revocation": revocation, "stale_after_seconds": stale_after,
            "places": places,
            "groups": sorted(groups.values(), key=lambda g: (g["key"] is None, g["key"] or "")),
            "next_cursor": encode_cursor(page[-1][0].id) if len(rows) > limit else None}


def revoked_nodes(session: Session, principal: AuthenticatedPrincipal, tenant: str, *, limit: int = 1000,
                  cursor: str | None = None, now: dt.datetime | None = None,
                  stale_after: float = 900.0) -> dict[str, Any]:
    """Question 8b: the principals whose last received release of a model of ``tenant`` is of a version
    revoked now: per (principal, model), the last issuance, when the version is revoked. Ordered by principal
    and model, a page at a time. The first page also lists ``holding``: the places that report holding a
    revoked version now (the receipts :func:`running` answers from; the first :data:`MAX_PAGE`)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    _check_page(limit)
    require(principal, tenant, Permission.AUDIT)
    tenant_row = get_tenant(session, tenant)
    last = (select(func.max(ReleaseIssuance.id).label("id"))
            .where(ReleaseIssuance.model.startswith(f"{tenant}/", autoescape=True))
            .group_by(ReleaseIssuance.principal, ReleaseIssuance.model).subquery())
    query = (select(ReleaseIssuance, Version)
             .join(last, last.c.id == ReleaseIssuance.id)
             .join(Model, (Model.tenant_id == tenant_row.id)
                   & (ReleaseIssuance.model == tenant + "/" + Model.name))
             .join(Version, (Version.model_id == Model.id) & (Version.number == ReleaseIssuance.version))
             .where(Version.state == VersionState.REVOKED.value))
    after = _cursor(cursor)
    if after is not None:
        who, sep, model = after.partition("\n")
        if not sep:
            raise InvalidInputError("cursor: pass the next_cursor of the page before", field="cursor")
        query = query.where((ReleaseIssuance.principal > who)
                            | ((ReleaseIssuance.principal == who) & (ReleaseIssuance.model > model)))
    rows = session.execute(query.order_by(ReleaseIssuance.principal, ReleaseIssuance.model).limit(limit + 1)).all()
    page = rows[:limit]
    revoked = list(session.scalars(select(Version).join(Model, Model.id == Version.model_id)
                                   .where(Model.tenant_id == tenant_row.id,
                                          Version.state == VersionState.REVOKED.value)))
    by_id = {v.id: v for v in revoked}
    holding = [{"model": f"{tenant}/{by_id[r.version_id].model.name}", "version": by_id[r.version_id].number,
                **receipts.place_public(r, p, now, stale_after)}
               for r, p in receipts.held_places(session, sorted(by_id), limit=MAX_PAGE)] if cursor is None else []
    return {"tenant": tenant, "holding": holding,
            "nodes": [{"principal": i.principal, "model": i.model, "version": i.version, "ref": i.ref,
                       "for_tenant": i.for_tenant, "last_received_at": _iso(i.at), "serial": i.serial,
                       "revocation": {"at": _iso(v.revoked_at), "by": v.revoked_by, "reason": v.revoke_reason}}
                      for i, v in page],
            "next_cursor": encode_cursor(f"{page[-1][0].principal}\n{page[-1][0].model}") if len(rows) > limit
            else None}


# --- blobs -----------------------------------------------------------------------------------------


def audited_tenants(principal: AuthenticatedPrincipal) -> list[str] | None:
    """The tenants ``principal`` audits; None for an administrator (every tenant).

    Raises:
        PermissionDeniedError: none.
    """
    if principal.is_admin:
        return None
    held = sorted(t for t in principal.roles if Permission.AUDIT in principal.permissions(t))
    if not held:
        raise PermissionDeniedError(f"{principal.name!r} is not an auditor of any tenant",
                                    principal=principal.name, permission="audit")
    return held


def versions_with_blob(session: Session, principal: AuthenticatedPrincipal, digest: str, *, limit: int = 1000,
                       cursor: str | None = None) -> dict[str, Any]:
    """Question 9: the versions, of any model of the tenants ``principal`` audits, holding blob ``digest``, with
    the path it has in each. Versions of tenants it does not audit are never named, nor counted."""
    _check_page(limit)
    tenants = audited_tenants(principal)
    if not isinstance(digest, str) or not SHA256_RE.match(digest):
        raise InvalidInputError("a blob is sha256:<64 lower-case hex digits>", field="digest")
    query = (select(VersionFile, Version, Model.name, Tenant.name)
             .join(Version, Version.id == VersionFile.version_id).join(Model, Model.id == Version.model_id)
             .join(Tenant, Tenant.id == Model.tenant_id)
             .where(VersionFile.sha256 == digest, VersionFile.id > _int_cursor(cursor)))
    if tenants is not None:
        query = query.where(Tenant.name.in_(tenants))
    rows = session.execute(query.order_by(VersionFile.id).limit(limit + 1)).all()
    page = rows[:limit]
    return {"digest": f"sha256:{digest}",
            "versions": [{"model": f"{t}/{m}", "version": v.number, "state": v.state, "path": f.path,
                          "size": f.size} for f, v, m, t in page],
            "next_cursor": encode_cursor(page[-1][0].id) if len(rows) > limit else None}


# --- release-unit components ---------------------------------------------------------------------


def _check_component(component: str) -> None:
    if component not in COMPONENTS:
        raise InvalidInputError(f"{str(component)[:40]!r} is no component; one of {', '.join(COMPONENTS)}",
                                field="component", known=list(COMPONENTS))


def version_components(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str,
                       ref: str) -> dict[str, Any]:
    """The version's release-unit components as recorded at seal: name, digest, member count (none until it
    is sealed)."""
    version, named = _version_of(session, principal, tenant, name, ref)
    return {**_head(version, named), "components": units.components_document(session, version) or []}


def versions_with_component(session: Session, principal: AuthenticatedPrincipal, digest: str, *,
                            component: str | None = None, limit: int = 1000,
                            cursor: str | None = None) -> dict[str, Any]:
    """Question 11: "which units share these weights": the versions, of any model of the tenants ``principal``
    audits, with a release-unit component of ``digest`` (only a ``component`` of that name, if given), oldest
    seal first. Versions of tenants it does not audit are never named, nor counted.

    Raises:
        PermissionDeniedError: ``principal`` audits no tenant.
        InvalidInputError: a malformed digest, an unknown component name, a bad cursor or limit.
        ComponentNotFoundError: no version the caller audits has such a component.
    """
    _check_page(limit)
    tenants = audited_tenants(principal)
    if not isinstance(digest, str) or not SHA256_RE.match(digest):
        raise InvalidInputError("a component digest is sha256:<64 lower-case hex digits>", field="digest")
    if component is not None:
        _check_component(component)
    query = (select(VersionComponent.id, VersionComponent.name, Version, Model.name, Tenant.name)
             .join(Version, Version.id == VersionComponent.version_id).join(Model, Model.id == Version.model_id)
             .join(Tenant, Tenant.id == Model.tenant_id)
             .where(VersionComponent.digest == digest, VersionComponent.id > _int_cursor(cursor)))
    if component is not None:
        query = query.where(VersionComponent.name == component)
    if tenants is not None:
        query = query.where(Tenant.name.in_(tenants))
    rows = session.execute(query.order_by(VersionComponent.id).limit(limit + 1)).all()
    if not rows and cursor is None:
        raise ComponentNotFoundError(f"no version you audit has a {component or 'component'} sha256:{digest}",
                                     digest=f"sha256:{digest}", component=component)
    page = rows[:limit]
    return {"digest": f"sha256:{digest}", "component": component,
            "versions": [{"model": f"{t}/{m}", "version": v.number, "state": v.state, "component": c,
                          "derived_from": v.derived_from, "sealed_at": _iso(v.sealed_at)}
                         for _, c, v, m, t in page],
            "next_cursor": encode_cursor(page[-1][0]) if len(rows) > limit else None}


def component_history(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, alias: str,
                      component: str, *, engine: PolicyEngine | None = None, limit: int = 1000,
                      cursor: str | None = None) -> dict[str, Any]:
    """Question 12: "when did prod's chat template last change, who approved it": each move of the alias after
    which the ``component`` of the version it serves to everyone (its main version; canaries aside) has another
    digest than before: when, how (promote, rollback) and by whom, from which version to which, both digests,
    and every decision on the version moved to (who, capacity, when), its security approvals apart. The alias's
    moves are walked oldest first, ``limit`` moves a page (a page may hold no change; ``next_cursor`` goes on).

    Raises:
        PermissionDeniedError: ``principal`` audits no such tenant.
        InvalidInputError: a bad alias or component name, a bad cursor or limit.
        ModelNotFoundError, AliasNotFoundError.
    """
    _check_page(limit)
    require(principal, tenant, Permission.AUDIT)
    alias_rules.validate_alias_name(alias)
    _check_component(component)
    after = _int_cursor(cursor)
    model, row, moves = _alias_moves(session, tenant, name, alias, after, limit)
    page = moves[:limit]
    numbers = {n for m in page for n in (m.from_version, m.to_version) if n is not None} | {row.version.number}
    ids, digests = {}, {}
    for number, version_id, digest in session.execute(
            select(Version.number, Version.id, VersionComponent.digest)
            .outerjoin(VersionComponent, (VersionComponent.version_id == Version.id)
                       & (VersionComponent.name == component))
            .where(Version.model_id == model.id, Version.number.in_(numbers))):
        ids[number], digests[number] = version_id, digest
    changes = [m for m in page if digests.get(m.from_version) != digests.get(m.to_version)]
    decided: dict[int, list[Approval]] = {}
    for a in session.scalars(select(Approval).where(Approval.version_id.in_({ids[m.to_version] for m in changes}))
                             .order_by(Approval.at, Approval.id)):
        decided.setdefault(a.version_id, []).append(a)
    security = str(_config(engine).get("security_capacity", "security"))

    def change(m: AliasMove) -> dict[str, Any]:
        approvals = decided.get(ids[m.to_version], [])
        return {"move": m.id, "at": _iso(m.at), "action": m.action, "by": m.actor, "comment": m.comment,
                "from_version": m.from_version, "to_version": m.to_version,
                "from_digest": digests.get(m.from_version), "to_digest": digests.get(m.to_version),
                "approvals": [_approval_doc(a) for a in approvals],
                "security_approvals": [_approval_doc(a) for a in approvals
                                       if a.capacity == security and a.decision == "approve"]}

    return {"model": f"{tenant}/{name}", "alias": alias, "component": component, "version": row.version.number,
            "digest": digests.get(row.version.number), "security_capacity": security,
            "changes": [change(m) for m in changes],
            "next_cursor": encode_cursor(page[-1].id) if len(moves) > limit else None}


def _alias_moves(session: Session, tenant: str, name: str, alias: str, after: int,
                 limit: int) -> tuple[Model, Alias, list[AliasMove]]:
    """The model, its alias and the alias's moves after the move ``after``, oldest first: ``limit`` and one
    more (which tells that a next page exists)."""
    model = loaders.load_model_unchecked(session, tenant, name)
    row = session.scalar(select(Alias).where(Alias.model_id == model.id, Alias.name == alias))
    if row is None:
        raise AliasNotFoundError(f"{tenant}/{name}", alias)
    moves = list(session.scalars(select(AliasMove).where(AliasMove.alias_id == row.id, AliasMove.id > after)
                                 .order_by(AliasMove.id).limit(limit + 1)))
    return model, row, moves


# --- the audit log ---------------------------------------------------------------------------------


def check_audit_log(session: Session, principal: AuthenticatedPrincipal, checkpoints: Sequence[Mapping[str, Any]],
                    *, keys: Sequence[VerifyingKey] = ()) -> dict[str, Any]:
    """Question 10: whether the audit chain is intact, through the auditor's saved checkpoints (the chain
    still reaches each with the signed hash) and since the newest of them (every later event links and
    hashes right, up to the head). A broken chain is an answer (``intact`` false, ``broken`` naming the
    first bad event), not an error.

    The checkpoints must be signed by a key of a published trust root or one of ``keys`` (the registry's).

    Raises:
        PermissionDeniedError: ``principal`` audits no tenant.
        LimitExceededError: more than :data:`MAX_CHECKPOINTS` checkpoints.
        AuditCheckpointError: a checkpoint is malformed or not signed by the registry.
    """
    audited_tenants(principal)
    if len(checkpoints) > MAX_CHECKPOINTS:
        raise LimitExceededError(f"at most {MAX_CHECKPOINTS} checkpoints per question", field="checkpoints")
    known = {k.key_id: k for k in keys}
    known.update({key_id: key for key_id, (key, _) in trust_roots.published_keys(session).items()})
    signed = [audit.open_checkpoint(entry, list(known.values()), index=i) for i, entry in enumerate(checkpoints)]
    newest = max(signed, key=lambda c: c.event_id, default=None)
    doc: dict[str, Any] = {
        "checkpoints": len(signed),
        "newest_checkpoint": None if newest is None else {"event_id": newest.event_id, "event_hash": newest.event_hash,
                                                          "at": newest.at}}
    try:
        report = audit.verify(session, checkpoints=checkpoints, keys=list(known.values()))
    except AuditChainError as err:
        return {"intact": False, **doc, "events": None, "head_hash": None, "events_since_checkpoint": None,
                "broken": {"event_id": err.details.get("event_id"), "problem": err.details.get("problem"),
                           "detail": err.message}}
    return {"intact": True, **doc, "events": report.events, "head_hash": report.head_hash,
            "events_since_checkpoint": report.events - (newest.event_id if newest else 0), "broken": None}
