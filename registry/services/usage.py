"""What a tenant costs, allocated by model and version, over a period: for chargeback.

- stored: bytes now, per version (the sum of its files), per model (each blob once across the
  model's versions retention kept) and for the tenant (each blob it owns once: what its quota counts);
- mirrored: bytes of the files whose ``mirror_file`` job completed within the period;
- served: release manifests issued within the period (``release_issuances``), and the bytes they
  released (each issuance counts the size of the version it gave); the principals they went to;
- evals: runs and their time per suite, for evals that finished within the period.

Bytes read through the registry's own blob endpoint are not recorded (a node usually reads presigned
S3 URLs, which the registry never sees); the bytes a manifest released are the measure of serving.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import String, and_, cast, distinct, func, literal, select
from sqlalchemy.orm import Session

from registry import jobs
from registry.auth import AuthenticatedPrincipal, Permission, get_tenant, require
from registry.clock import Clock
from registry.db.models import EvalResult, Job, Model, ReleaseIssuance, Version, VersionFile
from registry.domain.errors import InvalidInputError
from registry.services import quotas

DEFAULT_PERIOD = dt.timedelta(days=30)


def usage(session: Session, principal: AuthenticatedPrincipal, tenant: str, *, since: dt.datetime | None,
          until: dt.datetime | None, clock: Clock) -> dict[str, Any]:
    """The tenant's usage over ``[since, until)`` (default: the last 30 days up to now).

    Administrators and auditors of the tenant may read it.

    Raises:
        PermissionDeniedError, TenantNotFoundError.
        InvalidInputError: a time without a time zone.
    """
    require(principal, tenant, Permission.AUDIT)
    for name, value in (("since", since), ("until", until)):
        if value is not None and value.tzinfo is None:
            raise InvalidInputError(f"{name} needs a time zone (e.g. 2026-11-01T00:00:00Z)", field=name)
    until = until or clock.now()
    try:
        since = since or until - DEFAULT_PERIOD
    except OverflowError:
        raise InvalidInputError("until is too early for the default period: give since", field="until") from None
    # A period that ends before it starts is empty: every figure is zero.
    row = get_tenant(session, tenant)
    models = dict(session.execute(select(Model.id, Model.name).where(Model.tenant_id == row.id)).tuples().all())
    return {
        "tenant": tenant, "since": since.isoformat(), "until": until.isoformat(),
        "stored": _stored(session, row.id, models),
        "mirrored": _mirrored(session, row.id, since, until),
        "served": _served(session, tenant, models, since, until),
        "evals": _evals(session, row.id, since, until),
    }


def _stored(session: Session, tenant_id: int, models: dict[int, str]) -> dict[str, Any]:
    per_version = session.execute(
        select(Version.model_id, Version.number, Version.state, Version.deleted_at,
               func.coalesce(func.sum(VersionFile.size), 0))
        .join(Model, Model.id == Version.model_id).outerjoin(VersionFile, VersionFile.version_id == Version.id)
        .where(Model.tenant_id == tenant_id)
        .group_by(Version.model_id, Version.number, Version.state, Version.deleted_at)
        .order_by(Version.model_id, Version.number)
    ).all()
    blobs = (select(Version.model_id.label("model_id"), VersionFile.sha256.label("digest"),
                    VersionFile.size.label("size"))
             .join(Version, Version.id == VersionFile.version_id).join(Model, Model.id == Version.model_id)
             .where(Model.tenant_id == tenant_id, Version.deleted_at.is_(None), VersionFile.sha256.is_not(None))
             .distinct().subquery())
    per_model = dict(session.execute(
        select(blobs.c.model_id, func.sum(blobs.c.size)).group_by(blobs.c.model_id)).tuples().all())
    out: dict[int, dict[str, Any]] = {}
    for model_id, number, state, deleted_at, size in per_version:
        doc = out.setdefault(model_id, {"model": models[model_id], "bytes": int(per_model.get(model_id) or 0),
                                        "versions": []})
        doc["versions"].append({"version": number, "state": state, "deleted": deleted_at is not None,
                                "bytes": int(size)})
    return {"bytes": quotas.used_bytes(session, tenant_id), "models": sorted(out.values(), key=lambda d: d["model"])}


def _mirrored(session: Session, tenant_id: int, since: dt.datetime, until: dt.datetime) -> dict[str, Any]:
    key = literal(f"{jobs.JobKind.MIRROR_FILE.value}:") + cast(VersionFile.id, String)
    files, size = session.execute(
        select(func.count(VersionFile.id), func.coalesce(func.sum(VersionFile.size), 0))
        .join(Version, Version.id == VersionFile.version_id).join(Model, Model.id == Version.model_id)
        .join(Job, and_(Job.idempotency_key == key, Job.kind == jobs.JobKind.MIRROR_FILE.value))
        .where(Model.tenant_id == tenant_id, Job.state == jobs.SUCCEEDED,
               Job.finished_at >= since, Job.finished_at < until)
    ).one()
    return {"files": int(files), "bytes": int(size)}


def _served(session: Session, tenant: str, models: dict[int, str], since: dt.datetime,
            until: dt.datetime) -> dict[str, Any]:
    refs = {f"{tenant}/{name}": model_id for model_id, name in models.items()}
    if not refs:
        return {"manifests": 0, "bytes": 0, "principals": 0, "by_model": []}
    period = (ReleaseIssuance.model.in_(list(refs)), ReleaseIssuance.at >= since, ReleaseIssuance.at < until)
    counts = session.execute(
        select(ReleaseIssuance.model, ReleaseIssuance.version, func.count())
        .where(*period).group_by(ReleaseIssuance.model, ReleaseIssuance.version)
    ).all()
    principals = session.scalar(select(func.count(distinct(ReleaseIssuance.principal))).where(*period)) or 0
    sizes: dict[tuple[int, int], int] = {}
    wanted = {(refs[m], v) for m, v, _ in counts}
    if wanted:
        for model_id, number, size in session.execute(
            select(Version.model_id, Version.number, func.coalesce(func.sum(VersionFile.size), 0))
            .join(VersionFile, VersionFile.version_id == Version.id)
            .where(Version.model_id.in_({m for m, _ in wanted}), Version.number.in_({v for _, v in wanted}))
            .group_by(Version.model_id, Version.number)
        ):
            sizes[(model_id, number)] = int(size)
    by_model: dict[str, dict[str, Any]] = {}
    for model, version, count in counts:
        released = sizes.get((refs[model], version), 0) * count
        doc = by_model.setdefault(model, {"model": model.split("/", 1)[1], "manifests": 0, "bytes": 0,
                                          "versions": []})
        doc["manifests"] += count
        doc["bytes"] += released
        doc["versions"].append({"version": version, "manifests": count, "bytes": released})
    return {"manifests": sum(c for _, _, c in counts), "bytes": sum(d["bytes"] for d in by_model.values()),
            "principals": int(principals), "by_model": sorted(by_model.values(), key=lambda d: d["model"])}


def _evals(session: Session, tenant_id: int, since: dt.datetime, until: dt.datetime) -> list[dict[str, Any]]:
    rows = session.execute(
        select(EvalResult.suite, func.count(), func.coalesce(func.sum(EvalResult.duration_ms), 0))
        .join(Version, Version.id == EvalResult.version_id).join(Model, Model.id == Version.model_id)
        .where(Model.tenant_id == tenant_id, EvalResult.finished_at >= since, EvalResult.finished_at < until)
        .group_by(EvalResult.suite).order_by(EvalResult.suite)
    ).all()
    return [{"suite": suite, "runs": int(runs), "duration_ms": int(ms)} for suite, runs, ms in rows]
