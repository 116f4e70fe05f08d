"""Webhooks over HTTP: ``/v1/webhooks`` (tenant admins; authorization in registry.services.webhooks)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, status

from api.deps import ContainerDep, PrincipalDep, SessionDep
from api.params import TenantName
from api.problems import AUTHENTICATED, responses
from api.schemas import (
    WebhookCreate,
    WebhookCreated,
    WebhookDeliveryPublic,
    WebhookPublic,
    WebhookRedeliver,
    WebhookRotate,
)
from registry.domain.errors import (
    EgressRefusedError,
    LimitExceededError,
    NotFoundError,
    WebhookNotFoundError,
    WebhookPingsInFlightError,
)
from registry.services import webhooks

WebhookId = Annotated[int, Path(ge=1, le=2**63 - 1, description="the webhook's id")]
router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"],
                   responses=responses(*AUTHENTICATED, NotFoundError, WebhookNotFoundError))


@router.post("", response_model=WebhookCreated, status_code=status.HTTP_201_CREATED,
             responses=responses(EgressRefusedError, LimitExceededError))
def create_webhook(body: WebhookCreate, session: SessionDep, principal: PrincipalDep,
                   container: ContainerDep) -> dict[str, Any]:
    """Subscribe a URL to the tenant's events from now on; the answer holds the secret, shown once."""
    config = webhooks.DeliveryConfig.from_settings(container.settings)
    sub, secret = webhooks.create(session, principal, tenant=body.tenant, url=body.url, types=body.types,
                                  model_glob=body.model_glob, egress_policy=config.egress, clock=container.clock)
    return {**webhooks.public(sub), "secret": secret}


@router.get("", response_model=list[WebhookPublic])
def list_webhooks(session: SessionDep, principal: PrincipalDep,
                  tenant: Annotated[TenantName | None, Query()] = None) -> list[dict[str, Any]]:
    """The webhooks the caller manages; a paused one says why."""
    return [webhooks.public(s) for s in webhooks.list_subscriptions(session, principal, tenant)]


@router.get("/{webhook_id}", response_model=WebhookPublic)
def show_webhook(webhook_id: WebhookId, session: SessionDep, principal: PrincipalDep) -> dict[str, Any]:
    return webhooks.public(webhooks.show(session, principal, webhook_id))


@router.delete("/{webhook_id}", status_code=status.HTTP_204_NO_CONTENT)
def remove_webhook(webhook_id: WebhookId, session: SessionDep, principal: PrincipalDep) -> None:
    webhooks.remove(session, principal, webhook_id)


@router.get("/{webhook_id}/deliveries", response_model=list[WebhookDeliveryPublic])
def list_deliveries(webhook_id: WebhookId, session: SessionDep, principal: PrincipalDep,
                    limit: int = Query(100, ge=1, le=webhooks.MAX_DELIVERIES_PAGE),
                    before: int | None = Query(None, ge=1, le=2**63 - 1)) -> list[dict[str, Any]]:
    """Delivery attempts, newest first."""
    return [webhooks.delivery_public(d)
            for d in webhooks.deliveries(session, principal, webhook_id, limit=limit, before=before)]


@router.post("/{webhook_id}/redeliver", response_model=WebhookPublic)
def redeliver(webhook_id: WebhookId, body: WebhookRedeliver, session: SessionDep, principal: PrincipalDep,
              container: ContainerDep) -> dict[str, Any]:
    """Resume a paused (or failing) webhook now, from ``from_event`` if given."""
    return webhooks.public(webhooks.redeliver(session, principal, webhook_id, from_event=body.from_event,
                                              clock=container.clock))


@router.post("/{webhook_id}/rotate-secret", response_model=WebhookCreated)
def rotate_secret(webhook_id: WebhookId, body: WebhookRotate, session: SessionDep, principal: PrincipalDep,
                  container: ContainerDep) -> dict[str, Any]:
    """A new secret (shown once); the current one keeps signing beside it for ``keep_previous_seconds``."""
    sub, secret = webhooks.rotate_secret(session, principal, webhook_id,
                                         keep_previous_seconds=body.keep_previous_seconds, clock=container.clock)
    return {**webhooks.public(sub), "secret": secret}


@router.post("/{webhook_id}/test", response_model=WebhookDeliveryPublic, status_code=status.HTTP_202_ACCEPTED,
             responses=responses(WebhookPingsInFlightError))
def test_webhook(webhook_id: WebhookId, session: SessionDep, principal: PrincipalDep,
                 container: ContainerDep) -> dict[str, Any]:
    """Queue a ``dev.modelreg.webhook.test`` ping for the delivery workers; the answer is the pending
    delivery, whose result is read like any delivery's (``GET .../deliveries``) once they sent it."""
    return webhooks.delivery_public(webhooks.send_test(session, principal, webhook_id, clock=container.clock))
