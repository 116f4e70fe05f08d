"""Node bindings: Kubernetes service accounts of trusted issuers as a tenant's serving nodes, or its admission
webhook (``role``). Administrators only (checked in the service)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from fastapi import APIRouter, Query, status
from pydantic import BaseModel, ConfigDict, Field

from api.deps import ContainerDep, PrincipalDep, SessionDep
from api.params import TenantName
from api.problems import AUTHENTICATED, responses
from registry.db.models import NodeBinding
from registry.domain.errors import AlreadyExistsError, InvalidInputError, NotFoundError
from registry.domain.text import FreeText
from registry.services import node_bindings

router = APIRouter(prefix="/v1/node-bindings", tags=["identity"])

_ISSUER = Field(min_length=1, description="the issuer URL, as configured (the tokens' iss)")
_NAMESPACE = Field(min_length=1, description="the service account's namespace")
_ACCOUNT = Field(min_length=1, description="the service account's name")


class NodeBindingCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    issuer: FreeText(512) = _ISSUER
    namespace: FreeText(63) = _NAMESPACE
    service_account: FreeText(253) = _ACCOUNT
    tenant: TenantName
    role: Literal["node", "admission"] = Field("node", description="what its tokens may do in the tenant: fetch "
                                                                   "releases (node) or ask admission reviews")


class NodeBindingPublic(BaseModel):
    issuer: str
    namespace: str
    service_account: str
    tenant: str
    role: str = Field(description="node or admission")
    principal: str = Field(description="the node principal its tokens authenticate as (provenance names it)")
    created_by: str
    created_at: dt.datetime


def _public(b: NodeBinding) -> NodeBindingPublic:
    return NodeBindingPublic(issuer=b.issuer, namespace=b.namespace, service_account=b.service_account,
                             tenant=b.tenant.name, role=b.role, principal=b.principal.name, created_by=b.created_by,
                             created_at=b.created_at)


@router.post("", response_model=NodeBindingPublic, status_code=status.HTTP_201_CREATED,
             responses=responses(*AUTHENTICATED, InvalidInputError, NotFoundError, AlreadyExistsError))
def bind(body: NodeBindingCreate, session: SessionDep, principal: PrincipalDep,
         container: ContainerDep) -> NodeBindingPublic:
    binding = node_bindings.bind(session, principal, issuer=body.issuer, namespace=body.namespace,
                                 service_account=body.service_account, tenant=body.tenant,
                                 trusted=container.settings.workload_issuers, role=body.role)
    return _public(binding)


@router.get("", response_model=list[NodeBindingPublic], responses=responses(*AUTHENTICATED))
def list_bindings(session: SessionDep, principal: PrincipalDep,
                  tenant: Annotated[TenantName | None, Query(description="only this tenant's")] = None,
                  ) -> list[NodeBindingPublic]:
    return [_public(b) for b in node_bindings.list_bindings(session, principal, tenant=tenant)]


@router.delete("", status_code=status.HTTP_204_NO_CONTENT, responses=responses(*AUTHENTICATED, NotFoundError))
def unbind(session: SessionDep, principal: PrincipalDep,
           issuer: Annotated[str, Query(min_length=1, max_length=512)],
           namespace: Annotated[str, Query(min_length=1, max_length=63)],
           service_account: Annotated[str, Query(min_length=1, max_length=253)],
           tenant: Annotated[TenantName, Query()]) -> None:
    node_bindings.unbind(session, principal, issuer=issuer, namespace=namespace,
                         service_account=service_account, tenant=tenant)
