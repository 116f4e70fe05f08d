"""Provenance: an auditor's questions of a version, an alias, a blob or the audit log, one call each."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from fastapi import APIRouter, Path, Query

from api.deps import ContainerDep, PrincipalDep, SessionDep
from api.params import REF_PATTERN, AliasName, ModelName, Sha256Hex, TenantName
from api.problems import AUTHENTICATED, responses
from api.schemas_provenance import (
    AdapterBasePublic,
    AliasHistoryPublic,
    ApprovalsPublic,
    AuditLogCheck,
    AuditLogPublic,
    BlobVersionsPublic,
    BoundAdaptersPublic,
    ComponentHistoryPublic,
    ComponentVersionsPublic,
    EvalsPublic,
    FilesPublic,
    LicensePublic,
    NodesPublic,
    OriginPublic,
    RevokedNodesPublic,
    RunningPublic,
    ScansPublic,
    VersionComponentsPublic,
)
from registry.domain.errors import IntegrityError, NotAnAdapterError, NotFoundError
from registry.services import provenance, provenance_adapters

router = APIRouter(prefix="/v1/provenance", tags=["provenance"], responses=responses(*AUTHENTICATED, NotFoundError))

Ref = Annotated[str, Query(pattern=REF_PATTERN, description="an alias (prod...) or a version number")]
Limit = Annotated[int, Query(ge=1, le=provenance.MAX_PAGE, description="most rows of this page")]
ComponentName = Annotated[str, Path(pattern=r"^[a-z_]{1,32}$",
                                    description="a release-unit component: weights, tokenizer, chat_templates...")]
Cursor = Annotated[str | None, Query(pattern=r"^[A-Za-z0-9_-]+$", max_length=1500,
                                     description="the next_cursor of the page before (opaque)")]


@router.get("/{tenant}/{name}/origin", response_model=OriginPublic)
def origin(tenant: TenantName, name: ModelName, ref: Ref, session: SessionDep, principal: PrincipalDep) -> dict:
    """Where the version came from: upstream, requested and resolved revision, submitter and time (auditors)."""
    return provenance.origin(session, principal, tenant, name, ref)


@router.get("/{tenant}/{name}/files", response_model=FilesPublic)
def files(tenant: TenantName, name: ModelName, ref: Ref, session: SessionDep, principal: PrincipalDep,
          limit: Limit = 1000, cursor: Cursor = None) -> dict:
    """The version's files (path, size, sha256), a page at a time, and the key that signed it."""
    return provenance.files(session, principal, tenant, name, ref, limit=limit, cursor=cursor)


@router.get("/{tenant}/{name}/scans", response_model=ScansPublic)
def scans(tenant: TenantName, name: ModelName, ref: Ref, session: SessionDep, principal: PrincipalDep,
          limit: Limit = 1000, cursor: Cursor = None) -> dict:
    """Every scanner's result per file, with scanner names and versions, a page of files at a time."""
    return provenance.scan_results(session, principal, tenant, name, ref, limit=limit, cursor=cursor)


@router.get("/{tenant}/{name}/evals", response_model=EvalsPublic)
def evals(tenant: TenantName, name: ModelName, ref: Ref, session: SessionDep, principal: PrincipalDep) -> dict:
    """The version's eval results with suite and runner versions."""
    return provenance.eval_results(session, principal, tenant, name, ref)


@router.get("/{tenant}/{name}/license", response_model=LicensePublic)
def license(tenant: TenantName, name: ModelName, ref: Ref, session: SessionDep, principal: PrincipalDep,
            container: ContainerDep) -> dict:
    """The license, where it was detected, and who approved it."""
    return provenance.license_provenance(session, principal, tenant, name, ref, engine=container.policy)


@router.get("/{tenant}/{name}/approvals", response_model=ApprovalsPublic)
def approvals(tenant: TenantName, name: ModelName, ref: Ref, session: SessionDep, principal: PrincipalDep,
              container: ContainerDep) -> dict:
    """Every decision (capacity, time) and whether separation of duties held, with the reasons if not."""
    return provenance.approval_provenance(session, principal, tenant, name, ref, engine=container.policy)


@router.get("/{tenant}/{name}/aliases/{alias}", response_model=AliasHistoryPublic)
def alias_history(tenant: TenantName, name: ModelName, alias: AliasName, session: SessionDep,
                  principal: PrincipalDep,
                  at: Annotated[dt.datetime | None, Query(description="ISO 8601 with a zone: what the alias "
                                                                      "pointed at then")] = None,
                  limit: Limit = 1000, cursor: Cursor = None) -> dict:
    """The alias's moves (promotions, canaries, rollbacks: who, when, from, to), oldest first; with ``at``,
    the version it pointed at then."""
    return provenance.alias_history(session, principal, tenant, name, alias, at=at, limit=limit, cursor=cursor)


@router.get("/{tenant}/{name}/nodes", response_model=NodesPublic)
def nodes(tenant: TenantName, name: ModelName, ref: Ref, session: SessionDep, principal: PrincipalDep,
          limit: Limit = 1000, cursor: Cursor = None) -> dict:
    """Who received release manifests of the version: first and last time, how many, through which refs."""
    return provenance.nodes(session, principal, tenant, name, ref, limit=limit, cursor=cursor)


@router.get("/{tenant}/{name}/running", response_model=RunningPublic)
def running(tenant: TenantName, name: ModelName, ref: Ref, session: SessionDep, principal: PrincipalDep,
            container: ContainerDep,
            by: Annotated[str, Query(pattern="^(node|namespace|pod)$", description="group by")] = "node",
            limit: Limit = 1000, cursor: Cursor = None) -> dict:
    """Where the version runs now: every place holding it (node programs, cluster watch, admissions), grouped,
    with since when and whether its reporter went quiet."""
    return provenance.running(session, principal, tenant, name, ref, by=by, now=container.clock.now(),
                              stale_after=container.settings.receipts_stale_after_seconds, limit=limit,
                              cursor=cursor)


@router.get("/revoked-nodes", response_model=RevokedNodesPublic)
def revoked_nodes(tenant: Annotated[TenantName, Query()], session: SessionDep, principal: PrincipalDep,
                  container: ContainerDep, limit: Limit = 1000, cursor: Cursor = None) -> dict:
    """The principals whose last received release of a model of the tenant is of a version revoked since,
    and the places that report holding such a version now."""
    return provenance.revoked_nodes(session, principal, tenant, limit=limit, cursor=cursor,
                                    now=container.clock.now(),
                                    stale_after=container.settings.receipts_stale_after_seconds)


@router.get("/blobs/sha256:{digest}", response_model=BlobVersionsPublic)
def blob(digest: Annotated[Sha256Hex, Path()], session: SessionDep, principal: PrincipalDep,
         limit: Limit = 1000, cursor: Cursor = None) -> dict:
    """The versions, of any model of the tenants you audit, that hold the blob, with its path in each."""
    return provenance.versions_with_blob(session, principal, digest, limit=limit, cursor=cursor)


@router.get("/{tenant}/{name}/components", response_model=VersionComponentsPublic)
def components(tenant: TenantName, name: ModelName, ref: Ref, session: SessionDep, principal: PrincipalDep) -> dict:
    """The version's release-unit components (name, digest, member count) as recorded at seal."""
    return provenance.version_components(session, principal, tenant, name, ref)


@router.get("/components/sha256:{digest}", response_model=ComponentVersionsPublic)
def component(digest: Annotated[Sha256Hex, Path()], session: SessionDep, principal: PrincipalDep,
              component: Annotated[str | None, Query(pattern=r"^[a-z_]{1,32}$",
                                                     description="only this component (weights...)")] = None,
              limit: Limit = 1000, cursor: Cursor = None) -> dict:
    """The versions, of any model of the tenants you audit, with a release-unit component of this digest
    ("which units share these weights"); 404 ``component-not-found`` when none has."""
    return provenance.versions_with_component(session, principal, digest, component=component, limit=limit,
                                              cursor=cursor)


@router.get("/{tenant}/{name}/aliases/{alias}/components/{component}", response_model=ComponentHistoryPublic)
def component_history(tenant: TenantName, name: ModelName, alias: AliasName, component: ComponentName,
                      session: SessionDep, principal: PrincipalDep, container: ContainerDep,
                      limit: Limit = 1000, cursor: Cursor = None) -> dict:
    """Each move of the alias after which the component of the version it serves changed digest: when, by whom,
    from which version to which, and who approved the version moved to (its security approvals apart); a page of
    the alias's moves at a time."""
    return provenance.component_history(session, principal, tenant, name, alias, component,
                                        engine=container.policy, limit=limit, cursor=cursor)


@router.get("/adapters/sha256:{digest}", response_model=BoundAdaptersPublic)
def adapters(digest: Annotated[Sha256Hex, Path()], session: SessionDep, principal: PrincipalDep,
             limit: Limit = 1000, cursor: Cursor = None) -> dict:
    """The adapter versions, of any model of the tenants you audit, bound to base weights of this digest (a
    ``weights`` component digest): "which adapters are bound to these weights"."""
    return provenance_adapters.adapters_bound_to(session, principal, digest, limit=limit, cursor=cursor)


@router.get("/{tenant}/{name}/adapter-base", response_model=AdapterBasePublic,
            responses=responses(NotAnAdapterError))
def adapter_base(tenant: TenantName, name: ModelName, ref: Ref, session: SessionDep, principal: PrincipalDep,
                 at: Annotated[dt.datetime | None, Query(description="ISO 8601 with a zone: of the version the "
                                                                     "alias served then")] = None) -> dict:
    """The base an adapter version (or the one an alias serves, now or at a time) is bound to, its weights digest,
    and the adapter's eval results that ran on it; 409 ``not-an-adapter`` for a version bound to no base."""
    return provenance_adapters.adapter_base(session, principal, tenant, name, ref, at=at)


@router.post("/audit-log", response_model=AuditLogPublic, responses=responses(*AUTHENTICATED, IntegrityError))
def audit_log(body: AuditLogCheck, session: SessionDep, principal: PrincipalDep, container: ContainerDep) -> dict:
    """Whether the audit chain is intact through your saved checkpoints and since the newest of them.

    A broken chain is an answer (``intact`` false, ``broken`` naming the first bad event); a checkpoint that
    is malformed or not signed by the registry is a 422 ``audit-checkpoint-invalid``.
    """
    keys = [key.public_key for key in container.keyring.held().values()]
    return provenance.check_audit_log(session, principal, body.checkpoints, keys=keys)
