"""Quotas of tenants, retention rules of models, and usage per tenant (authorization in the services)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import ContainerDep, PrincipalDep, SessionDep
from api.params import ModelName, TenantName
from api.problems import AUTHENTICATED, responses
from api.schemas import (
    QuotaPublic,
    QuotaUpdate,
    RetentionPublic,
    RetentionRulePublic,
    RetentionUpdate,
    UsagePublic,
)
from registry.db.models import RetentionRule
from registry.domain.errors import NotFoundError
from registry.services import quotas, retention, usage

router = APIRouter(prefix="/v1", tags=["quotas"], responses=responses(*AUTHENTICATED, NotFoundError))


@router.put("/tenants/{tenant}/quota", response_model=QuotaPublic)
def put_quota(tenant: TenantName, body: QuotaUpdate, session: SessionDep, principal: PrincipalDep,
              container: ContainerDep) -> QuotaPublic:
    """Set the tenant's byte quota (administrators); null removes it."""
    return QuotaPublic(**quotas.set_quota(session, principal, tenant, body.bytes, clock=container.clock).as_dict())


@router.get("/tenants/{tenant}/quota", response_model=QuotaPublic)
def get_quota(tenant: TenantName, session: SessionDep, principal: PrincipalDep) -> QuotaPublic:
    """The tenant's quota and the bytes it uses (each blob it owns once)."""
    return QuotaPublic(**quotas.read_quota(session, principal, tenant).as_dict())


def _retention_public(plan: retention.Plan, rule: RetentionRule | None) -> RetentionPublic:
    doc = plan.as_dict()
    return RetentionPublic(
        model=plan.model, kept=doc["kept"], deleted=doc["deleted"],
        rule=RetentionRulePublic(keep_last=rule.keep_last, approved_within_days=rule.approved_within_days,
                                 updated_by=rule.updated_by, updated_at=rule.updated_at) if rule else None)


@router.put("/models/{tenant}/{name}/retention", response_model=RetentionPublic)
def put_retention(tenant: TenantName, name: ModelName, body: RetentionUpdate, session: SessionDep,
                  principal: PrincipalDep, container: ContainerDep) -> RetentionPublic:
    """Set the model's retention rule (administrators of the tenant); ``deleted`` lists what apply would delete."""
    retention.set_rule(session, principal, tenant, name, keep_last=body.keep_last,
                       approved_within_days=body.approved_within_days, clock=container.clock)
    return _retention_public(*retention.show(session, principal, tenant, name, clock=container.clock))


@router.get("/models/{tenant}/{name}/retention", response_model=RetentionPublic)
def get_retention(tenant: TenantName, name: ModelName, session: SessionDep, principal: PrincipalDep,
                  container: ContainerDep) -> RetentionPublic:
    """The model's retention rule (null if none), what it keeps and why, and what apply would delete."""
    return _retention_public(*retention.show(session, principal, tenant, name, clock=container.clock))


@router.post("/models/{tenant}/{name}/retention/apply", response_model=RetentionPublic)
def apply_retention(tenant: TenantName, name: ModelName, session: SessionDep, principal: PrincipalDep,
                    container: ContainerDep) -> RetentionPublic:
    """Delete the versions the rule does not keep (administrators of the tenant); their records and
    audit trail stay, their blobs become garbage once nothing else uses them."""
    plan = retention.apply(session, principal, tenant, name, clock=container.clock)
    return _retention_public(plan, retention.rule_of(session, tenant, name))


@router.get("/usage", response_model=UsagePublic)
def get_usage(
    session: SessionDep, principal: PrincipalDep, container: ContainerDep,
    tenant: Annotated[TenantName, Query()],
    since: Annotated[dt.datetime | None,
                     Query(description="start of the period (default: 30 days before until)")] = None,
    until: Annotated[dt.datetime | None, Query(description="end of the period, excluded (default: now)")] = None,
) -> UsagePublic:
    """What the tenant stores, and mirrored, served and evaluated over the period (its administrators
    and auditors)."""
    return UsagePublic(**usage.usage(session, principal, tenant, since=since, until=until, clock=container.clock))
