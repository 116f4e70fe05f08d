"""Release manifests: what a serving node may download, signed, with an ETag and a long poll."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from api.deps import BearerTokenDep, ContainerDep, EventWatcherDep
from api.params import REF_PATTERN, ModelName, TenantName
from api.problems import AUTHENTICATED, responses
from api.schemas import ReleasePublic
from registry.auth import AuthenticatedPrincipal, authenticate
from registry.bootstrap import Container
from registry.domain.errors import ConflictError, NotFoundError, ServiceUnavailableError
from registry import watch
from registry.services import manifests

router = APIRouter(prefix="/v1/models", tags=["releases"])


def _issue(container: Container, token: str, principal: AuthenticatedPrincipal | None,
           **kwargs: Any) -> tuple[AuthenticatedPrincipal, manifests.Issued]:
    """Authenticate (first call only) and issue in one session: one connection, one thread hop per poll.

    Nothing is held after it returns: the session closes and its connection goes back to the pool.
    """
    with container.session_factory() as session:
        principal = principal or authenticate(session, token, workload=container.workload_verifier)
        return principal, manifests.issue(session, principal, **kwargs)


def _answer(issued: manifests.Issued) -> Response:
    headers = {"ETag": issued.etag, "Cache-Control": "no-cache"}
    if issued.body is None:
        return Response(status_code=304, headers=headers)
    return JSONResponse(issued.body, headers=headers)


@router.get("/{tenant}/{name}/manifest", response_model=ReleasePublic, responses={
    304: {"description": "Not Modified: the ETag in If-None-Match is current (after `wait` seconds, with wait)"},
    **responses(*AUTHENTICATED, NotFoundError, ConflictError, ServiceUnavailableError)})
async def get_manifest(
    tenant: TenantName, name: ModelName, token: BearerTokenDep, container: ContainerDep,
    watcher: EventWatcherDep,
    ref: Annotated[str, Query(pattern=REF_PATTERN, description="an alias (prod, canary...) or a version number")],
    for_tenant: Annotated[TenantName | None, Query(
        description="the tenant the release is served for (its canary; default: the model's tenant)")] = None,
    wait: Annotated[int, Query(ge=0, le=manifests.MAX_WAIT_SECONDS, description=(
        "with If-None-Match: wait up to this many seconds for the release to change (an alias move, a "
        "revocation, a key rotation); 200 as soon as it does, else 304"))] = 0,
    if_none_match: Annotated[str | None, Header(description="the ETag of the release the caller holds")] = None,
) -> Response:
    """The signed release manifest of ``ref`` (role ``node``, or ``read`` in the tenant).

    Only approved, unrevoked versions are released: 409 ``revoked`` or ``not-approved`` otherwise. Each
    200 answer is recorded (principal, version, serial, time) for provenance.
    """
    settings = container.settings
    kwargs = dict(tenant=tenant, name=name, ref=ref, for_tenant=for_tenant,
                  if_none_match=if_none_match, keyring=container.keyring, blob_store=container.blob_store,
                  clock=container.clock, config=manifests.ReleaseConfig.from_settings(settings),
                  cache=container.release_cache)
    if wait == 0:
        principal, issued = await run_in_threadpool(_issue, container, token, None, **kwargs)
        return _answer(issued)
    await watcher.start()
    # Taken before reading: whatever changes after the read has a larger event id (registry.watch).
    since = watcher.head
    principal, issued = await run_in_threadpool(_issue, container, token, None, **kwargs)
    deadline = time.monotonic() + wait
    while issued.body is None and (remaining := deadline - time.monotonic()) > 0:
        # No thread, no connection: one future, woken by the process's watcher when an event names
        # this alias or the version served, or rotates the trust root.
        outcome = await watcher.wait(_watch_keys(tenant, name, issued), since, remaining)
        if outcome != "news":
            break
        since = watcher.head
        # Authenticated again: a token revoked while it waited gets nothing new.
        principal, issued = await run_in_threadpool(_issue, container, token, None, **kwargs)
    return _answer(issued)


def _watch_keys(tenant: str, name: str, issued: manifests.Issued) -> set[str]:
    """What may change this release: the alias (when ``ref`` is one), the version served, the trust root."""
    keys = {watch.subject_key(tenant, name, issued.version), watch.TRUST_ROOT}
    if issued.watch.alias is not None:
        keys.add(watch.subject_key(tenant, name, issued.watch.alias))
    return keys
