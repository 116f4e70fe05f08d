"""What each console page shows, assembled from the service functions the JSON API calls.

Every function takes the signed-in principal and lets the services check it: a page shows nothing the
same principal could not read through the API. Each returns plain data (dicts, rows) for a template.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from sqlalchemy.orm import Session

from registry.auth import AuthenticatedPrincipal, Permission
from registry.console import svg
from registry.domain.errors import PermissionDeniedError, RegistryError
from registry.domain.stages import running_states, states_in_order
from registry.domain.states import TRANSITIONS, VersionState
from registry.policy import PolicyEngine
from registry.services import aliases, approvals, evals, facts, provenance, revocations, scans, units, versions
from registry.services import audit as audit_service
from registry.services.stages import evaluating
from registry.storage.base import BlobStore

VERSION_SUBJECT = re.compile(r"\A([a-z0-9][a-z0-9._-]{0,62})/([a-z0-9][a-z0-9._-]{0,62})@([1-9][0-9]{0,8})\Z")
"""An audit subject that names a version (``tenant/name@3``): the audit page links it to the version page."""

MAX_FILES_SHOWN = 500
"""Most files (and their scan findings) the version page lists."""

RUNNING = frozenset(s.value for s in running_states())
"""States in which a version is still moving on its own (its page refreshes itself)."""


def home(session: Session, principal: AuthenticatedPrincipal, *, search: str | None = None,
         state: str | None = None) -> list[dict[str, Any]]:
    """The tenants the principal reads, each with its models (those whose name holds ``search``, and that
    have a version in ``state``)."""
    return [{"tenant": t, "models": [m.name for m in versions.list_models(session, principal, t, search=search,
                                                                          state=state)]}
            for t in versions.readable_tenants(session, principal)]


STATES = [s.value for s in states_in_order()]
"""The states a list may be filtered by, in the order a version moves through them."""


def fact_text(value: Any) -> str:
    """A fact's value as a person reads it: lists joined, no value as a dash, never a Python repr."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(fact_text(v) for v in value) or "—"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {fact_text(v)}" for k, v in value.items()) or "—"
    return str(value)


def approval_queue(session: Session, principal: AuthenticatedPrincipal) -> list[dict[str, Any]]:
    """The versions awaiting a capacity the principal holds, oldest first, with what is still unmet."""
    return [{"tenant": a.version.model.tenant.name, "model": a.version.model.name, "number": a.version.number,
             "submitter": a.status.submitter, "created_at": a.version.created_at, "unmet": a.status.unmet,
             "yours": a.yours, "own": a.status.submitter == principal.name,
             "approvals": len(a.status.approvals)}
            for a in approvals.awaiting(session, principal)]


def _security_capacity(engine: PolicyEngine | None) -> str:
    """The capacity whose approval names suspicious files (``modelreg.config.security_capacity``)."""
    config = ((engine.data() if engine else {}).get("modelreg") or {}).get("config") or {}
    value = config.get("security_capacity") if isinstance(config, dict) else None
    return value if isinstance(value, str) else "security"


def _thresholds(engine: PolicyEngine | None) -> dict[str, Any]:
    config = ((engine.data() if engine else {}).get("modelreg") or {}).get("config") or {}
    value = (config.get("evals") or {}).get("thresholds") if isinstance(config, dict) else None
    return value if isinstance(value, dict) else {}


def _eval_rows(results: list[dict[str, Any]], thresholds: dict[str, Any],
               baseline: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per suite and metric: the value, its {min, max} and the baseline's value (same suite version)."""
    base = {(e["suite"], e["suite_version"]): e["metrics"] for e in (baseline or {}).get("evals", [])}
    rows = []
    for r in results:
        bounds = thresholds.get(r["suite"]) or {}
        metrics = r["metrics"] if isinstance(r["metrics"], dict) else {}
        prior = base.get((r["suite"], r["suite_version"])) or {}
        for metric in sorted(set(metrics) | set(bounds)):
            value, bound = metrics.get(metric), bounds.get(metric) or {}
            rows.append({"suite": r["suite"], "metric": metric,
                         "value": value if isinstance(value, (int, float)) else None,
                         "min": bound.get("min") if isinstance(bound, dict) else None,
                         "max": bound.get("max") if isinstance(bound, dict) else None,
                         "baseline": prior.get(metric) if isinstance(prior.get(metric), (int, float)) else None})
    return rows


def version_page(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, number: int, *,
                 engine: PolicyEngine, blob_store: BlobStore | None = None, now: dt.datetime | None = None,
                 stale_after: float = 900.0) -> dict[str, Any]:
    """Everything the version page shows (raises what the services raise: a reader's page or none)."""
    version, found = facts.read_version_with_facts(session, principal, tenant, name, number)
    status = approvals.status(session, principal, tenant, name, number)
    _, results = evals.version_evals(session, principal, tenant, name, number)
    alias = evaluating.baseline_alias(engine)
    baseline = evaluating.policy_baseline(session, version, alias)
    estimate = facts.capacity(found) if found else None
    files = [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in version.files]
    # One scan lookup per file: a page shows the first MAX_FILES_SHOWN (the API pages through the rest).
    by_path = {s["path"]: s for s in scans.version_scans(session, principal, version, limit=MAX_FILES_SHOWN)}
    findings = [{"path": p, "verdict": s["verdict"], "format": s["format"],
                 "findings": [x for scan in s["scans"] if scan["scanner"] == "modelreg" for x in scan["findings"]]}
                for p, s in by_path.items()]
    eval_rows = _eval_rows(results, _thresholds(engine), baseline)
    flagged = [s["path"] for s in findings if s["verdict"] == "suspicious"]
    mine = next((a for a in status.approvals if a.principal_id == principal.id), None)
    audits = Permission.AUDIT in principal.permissions(tenant)
    moved = [a for a in aliases.list_aliases(session, principal, tenant, name)
             if a.version_id == version.id or a.canary_version_id == version.id]
    fetched = provenance.nodes(session, principal, tenant, name, str(number), limit=50)["nodes"] if audits else None
    # Where it runs now (receipts), for auditors: the first page of places, grouped by node.
    where_running = (provenance.running(session, principal, tenant, name, str(number), limit=50,
                                        now=now or dt.datetime.now(dt.timezone.utc), stale_after=stale_after)
                     if audits else None)
    components = units.components_of(session, version)
    base, _how = evaluating.replaced_unit(session, version, alias)
    return {
        "components": components,
        "where_running": where_running,
        # An alias points at an approved, hence sealed, version: the base always has its components.
        "unit_diff": (units.diff_document(session, base, version, blob_store=blob_store)
                      if components is not None and base is not None else None),
        "version": version, "facts": found, "files_hidden": max(0, len(files) - MAX_FILES_SHOWN),
        "estimate": estimate.as_dict() if estimate else None,
        "submitter": status.submitter, "status": status, "files": files[:MAX_FILES_SHOWN], "scans": findings,
        "evals": results, "eval_rows": eval_rows, "baseline": baseline, "baseline_alias": alias,
        "license_findings": [f.as_dict() for f in version.license_findings],
        "capacities": sorted(principal.capacities(tenant)),
        "flagged": flagged, "security_capacity": _security_capacity(engine),
        "unreviewed": [p for p in flagged if mine is not None and mine.decision == "approve" and p not in mine.files],
        "may_revoke": revocations.may_revoke(principal, tenant)
        and VersionState.REVOKED in TRANSITIONS[VersionState(version.state)],
        "may_export": audits and version.manifest_bundle is not None,
        "may_approve": Permission.APPROVE in principal.permissions(tenant),
        "running": version.state in RUNNING,
        "progress": {"files": len(files), "stored": sum(f["sha256"] is not None for f in files),
                     "bytes": sum(f["size"] for f in files),
                     "bytes_stored": sum(f["size"] for f in files if f["sha256"] is not None)},
        "graph": svg.provenance_graph(version, status.approvals, findings, results, moved, fetched),
        "metrics_chart": svg.metrics_chart(eval_rows, alias),
    }


def model_page(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str, *,
               search: str | None = None, state: str | None = None) -> dict[str, Any]:
    """The model's versions with their states (those in ``state`` whose source or revision holds ``search``),
    and its aliases with their history."""
    rows = versions.list_versions(session, principal, tenant, name, search=search, state=state)
    approved = rows if not (search or state) else versions.list_versions(session, principal, tenant, name)
    return {"versions": rows,
            "approved": [v.number for v in approved if v.state == VersionState.APPROVED.value],
            "aliases": aliases.list_aliases(session, principal, tenant, name),
            "may_move": Permission.APPROVE in principal.permissions(tenant)}


def audit_page(session: Session, principal: AuthenticatedPrincipal, *, tenant: str | None, actor: str | None,
               action: str | None, since: dt.datetime | None, until: dt.datetime | None, after: int,
               limit: int = 100, log_key: str | None = None, witnesses: list[str] | None = None,
               inclusion_of: int | None = None) -> dict[str, Any]:
    """A page of events (filtered), the chain's status and the checkpoints; the verifiable log's newest
    checkpoint and its cosigners (with ``log_key``), and an event's checked inclusion (``inclusion_of``)."""
    events = audit_service.list_events(session, principal, tenant=tenant, after=after, limit=limit, by=actor,
                                       action=action, since=since, until=until)
    checkpoints = audit_service.list_checkpoints(session, principal, after=0, limit=1000)
    try:
        chain = provenance.check_audit_log(session, principal, [c.as_dict() for c in checkpoints])
    except RegistryError as err:
        chain = {"intact": False, "broken": {"detail": err.message}, "checkpoints": len(checkpoints)}
    links = {e.id: "/ui/models/{}/{}/versions/{}".format(*m.groups())
             for e in events if (m := VERSION_SUBJECT.match(e.subject))}
    log = audit_service.log_status(session, principal, log_key=log_key, witnesses=witnesses or []) \
        if log_key else None
    inclusion = audit_service.log_inclusion(session, principal, inclusion_of) if inclusion_of else None
    return {"events": events, "links": links, "checkpoints": checkpoints[-20:], "chain": chain,
            "next_after": events[-1].id if len(events) == limit else None, "log": log, "inclusion": inclusion}


def audited_tenants(session: Session, principal: AuthenticatedPrincipal) -> list[str]:
    """The tenants whose log the principal may read (all, for an administrator)."""
    if principal.is_admin:
        return versions.readable_tenants(session, principal)
    return sorted(t for t in principal.roles if Permission.AUDIT in principal.permissions(t))


def provenance_page(session: Session, principal: AuthenticatedPrincipal, *, digest: str | None,
                    tenant: str | None, node: str | None, model: str | None, alias: str | None,
                    at: dt.datetime | None) -> dict[str, Any]:
    """The answer to whichever question the form asked: by blob digest, by node, or by alias at a time."""
    if not audited_tenants(session, principal):
        raise PermissionDeniedError(f"{principal.name!r} is not an auditor of any tenant",
                                    principal=principal.name, permission="audit")
    out: dict[str, Any] = {}
    if digest:
        out["blob"] = provenance.versions_with_blob(session, principal, digest.removeprefix("sha256:"), limit=200)
    if tenant and node:
        out["node"] = provenance.fetched_by(session, principal, tenant, node, limit=200)
    if tenant and model and alias:
        out["alias"] = provenance.alias_history(session, principal, tenant, model, alias, at=at, limit=200)
    return out
