"""Provenance of LoRA adapters (issue 34): "which adapters are bound to these weights" and "which base did prod's
adapter run on".

An adapter version is bound to its base version's weights digest (``registry/services/adapters.py``), and its eval
results name the base they ran on (``registry/services/adapter_evals.py``). :func:`adapters_bound_to` lists the
adapter versions bound to a base ``weights`` component digest; :func:`adapter_base` answers, for an adapter's
version or alias (now, or at a time for an alias), the base it is bound to and the eval results that ran on it.

Who may ask: as for every provenance question (:mod:`registry.services.provenance`), the auditors of the
adapter's tenant and administrators; the digest question answers only from the tenants the caller audits, so an
adapter of another tenant bound to the same weights is never named, nor counted. The base an adapter names (its
model, version and digests) is part of the adapter's signed statement, told to whoever may audit the adapter; the
base's state only to a caller who may read the base's tenant.

Usage (a sketch, not run as a doctest)::

    adapters_bound_to(session, auditor, weights_digest)["adapters"][0]["model"]    # 'acme/llm-support'
    adapter_base(session, auditor, "acme", "llm-support", "prod", at=then)["base"]["version"]    # 1
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from registry.auth import AuthenticatedPrincipal, Permission, require
from registry.db.models import AdapterBinding, Alias, AliasMove, EvalResult, Model, Tenant, Version
from registry.domain import aliases as alias_rules
from registry.domain.errors import AliasNotFoundError, InvalidInputError, NotAnAdapterError
from registry.domain.files import SHA256_RE
from registry.services import evals, loaders
from registry.services.loaders import version_ref
from registry.services.manifests import VERSION_REF_RE
from registry.services.provenance import (
    _check_page,
    _head,
    _int_cursor,
    _iso,
    _version_of,
    audited_tenants,
    encode_cursor,
)


def adapters_bound_to(session: Session, principal: AuthenticatedPrincipal, digest: str, *, limit: int = 1000,
                      cursor: str | None = None) -> dict[str, Any]:
    """Question 13: "which adapters are bound to these weights": the adapter versions, of any model of the tenants
    ``principal`` audits, bound to a base whose ``weights`` component has ``digest``, oldest first, a page at a
    time; each with the base version it names, what the submitter asked for, and the PEFT type the check at seal
    read. An empty list when none is (or none the caller audits).

    Raises:
        PermissionDeniedError: ``principal`` audits no tenant.
        InvalidInputError: a malformed digest, a bad cursor or limit.
    """
    _check_page(limit)
    tenants = audited_tenants(principal)
    if not isinstance(digest, str) or not SHA256_RE.match(digest):
        raise InvalidInputError("a weights digest is sha256:<64 lower-case hex digits>", field="digest")
    base, base_model, base_tenant = aliased(Version), aliased(Model), aliased(Tenant)
    query = (select(AdapterBinding, Version, Model.name, Tenant.name, base.number, base_model.name, base_tenant.name)
             .join(Version, Version.id == AdapterBinding.version_id).join(Model, Model.id == Version.model_id)
             .join(Tenant, Tenant.id == Model.tenant_id)
             .join(base, base.id == AdapterBinding.base_version_id).join(base_model, base_model.id == base.model_id)
             .join(base_tenant, base_tenant.id == base_model.tenant_id)
             .where(AdapterBinding.weights_digest == digest, AdapterBinding.version_id > _int_cursor(cursor)))
    if tenants is not None:
        query = query.where(Tenant.name.in_(tenants))
    rows = session.execute(query.order_by(AdapterBinding.version_id).limit(limit + 1)).all()
    page = rows[:limit]
    return {"digest": f"sha256:{digest}",
            "adapters": [{"model": f"{t}/{m}", "version": v.number, "state": v.state,
                          "base": {"model": f"{bt}/{bm}", "version": bn}, "requested": b.requested,
                          "peft_type": (b.check or {}).get("peft_type"), "sealed_at": _iso(v.sealed_at)}
                         for b, v, m, t, bn, bm, bt in page],
            "next_cursor": encode_cursor(page[-1][0].version_id) if len(rows) > limit else None}


def _utc(at: dt.datetime) -> dt.datetime:
    if at.tzinfo is None:
        raise InvalidInputError("at must carry a time zone (e.g. 2026-01-31T12:00:00Z)", field="at")
    try:
        return at.astimezone(dt.timezone.utc)
    except OverflowError:
        # Within a day of year 1 or 9999: before every move, or after every one.
        return (dt.datetime.min if at.year == 1 else dt.datetime.max).replace(tzinfo=dt.timezone.utc)


def _alias_then(session: Session, tenant: str, name: str, alias: str,
                at: dt.datetime) -> tuple[Version | None, dict[str, Any]]:
    """The version ``alias`` served everyone at ``at`` (its main version; None before its first move), and how."""
    alias_rules.validate_alias_name(alias)
    model = loaders.load_model_unchecked(session, tenant, name)
    row = session.scalar(select(Alias).where(Alias.model_id == model.id, Alias.name == alias))
    if row is None:
        raise AliasNotFoundError(f"{tenant}/{name}", alias)
    move = session.scalar(select(AliasMove).where(AliasMove.alias_id == row.id, AliasMove.at <= at)
                          .order_by(AliasMove.at.desc(), AliasMove.id.desc()).limit(1))
    version = None if move is None else loaders.load_version_unchecked(session, model, move.to_version)
    canary = None
    if move is not None and move.to_canary:
        canary = {"version": move.to_canary["version"], "tenants": sorted(move.to_canary.get("tenants") or ()),
                  "note": f"the alias also served version {move.to_canary['version']} to these tenants then (its "
                          "canary); this answer is of its main version: ask of that number for the canary"}
    return version, {"ref": alias, "alias": alias, "version": None if version is None else version.number,
                     "canary": canary, "move": None if move is None else move.id}


def adapter_base(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, ref: str, *,
                 at: dt.datetime | None = None) -> dict[str, Any]:
    """Question 14: "which base did prod's adapter run on": the base version (and its weights digest) the adapter
    version ``ref`` names is bound to, and the adapter's eval results that ran on that base; with ``at``, of the
    version the alias ``ref`` served everyone then (its main version; ``version`` None before its first move).
    Results that ran on another base, or on none, are listed apart (``elsewhere``): they cover nothing.

    Raises:
        PermissionDeniedError: ``principal`` audits no such tenant.
        InvalidInputError: a bad ref, ``at`` without a time zone or with a version number (it names one version
            at every time).
        ModelNotFoundError, VersionNotFoundError, AliasNotFoundError.
        NotAnAdapterError: the version is bound to no base.
    """
    require(principal, tenant, Permission.AUDIT)
    if at is None:
        version, named = _version_of(session, principal, tenant, name, ref)
        when = None
    else:
        if isinstance(ref, str) and VERSION_REF_RE.match(ref):
            raise InvalidInputError("at asks what an alias pointed at then: name an alias, not a version number",
                                    field="at")
        when = _utc(at)
        version, named = _alias_then(session, tenant, name, ref, when)
    doc: dict[str, Any] = {"model": f"{tenant}/{name}", "at": None if when is None else when.isoformat()}
    if version is None:
        return {**doc, "version": None, "state": None, "ref": named, "base": None, "evals": [], "elsewhere": []}
    binding = version.adapter_binding
    if binding is None:
        raise NotAnAdapterError(version_ref(version))
    base = binding.base
    base_tenant = base.model.tenant.name
    mine, elsewhere = [], []
    for row in session.scalars(select(EvalResult).where(EvalResult.version_id == version.id)
                               .order_by(EvalResult.suite)):
        on = row.ran_on if isinstance(row.ran_on, dict) else None
        if on is not None and on.get("base_weights_digest") == binding.weights_digest:
            mine.append(evals.result_doc(row))
        else:
            elsewhere.append({"suite": row.suite, "status": row.status, "ran_on": row.ran_on})
    return {**doc, **_head(version, named),
            "base": {"model": f"{base_tenant}/{base.model.name}", "version": base.number,
                     "weights_digest": binding.weights_digest, "manifest_digest": binding.base_manifest_digest,
                     "requested": binding.requested,
                     "state": base.state if Permission.READ in principal.permissions(base_tenant) else None},
            "evals": mine, "elsewhere": elsewhere}
