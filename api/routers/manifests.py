"""Release manifests: what a serving node may download, signed, with an ETag and a long poll."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from api.deps import BearerTokenDep, ContainerDep, EventWatcherDep
from api.params import REF_PATTERN, ModelName, TenantName
from api.problems import AUTHENTICATED, responses
from api.schemas import ReleasePublic
from registry import watch
from registry.auth import AuthenticatedPrincipal, authenticate
from registry.bootstrap import Container
from registry.domain.errors import ConflictError, NotFoundError, RegistryError, ServiceUnavailableError
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


REISSUE_GATHER_SECONDS = 0.005
"""How long the first woken waiter of a release waits for the others woken with it before they re-issue."""
MAX_REISSUE_BATCH = 500
"""The most waiters one re-issue serves (one transaction records an issuance for each)."""


def _issue_batch(container: Container, tokens: list[str], kwargs: dict[str, Any]) -> list[Any]:
    """Re-issue one release for many woken waiters in one session: each token authenticated again (once
    per distinct token), then ``manifests.issue_to_each`` (each authorized, one issuance for all).

    Returns, per token, ``(principal, issued)`` or the error that waiter gets.
    """
    with container.session_factory() as session:
        known: dict[str, Any] = {}
        for token in dict.fromkeys(tokens):
            try:
                known[token] = authenticate(session, token, workload=container.workload_verifier)
            except RegistryError as exc:
                known[token] = exc
        ok = [t for t in tokens if not isinstance(known[t], RegistryError)]
        issued = dict(zip(ok, manifests.issue_to_each(session, [known[t] for t in ok], **kwargs))) if ok else {}
    return [known[t] if isinstance(known[t], RegistryError) else
            issued[t] if isinstance(issued[t], RegistryError) else (known[t], issued[t]) for t in tokens]


class ReissueBatches:
    """Waiters woken by one event re-issue their release together: one thread hop, one signature, one
    transaction per release and ``If-None-Match``, instead of one each (2,000 nodes on one alias)."""

    def __init__(self) -> None:
        self._open: dict[tuple, list[tuple[str, asyncio.Future]]] = {}

    async def issue(self, container: Container, token: str, kwargs: dict[str, Any]
                    ) -> tuple[AuthenticatedPrincipal, manifests.Issued]:
        key = tuple(kwargs[k] for k in ("tenant", "name", "ref", "for_tenant", "if_none_match"))
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        batch = self._open.get(key)
        if batch is None:
            batch = self._open[key] = []
            loop.call_later(REISSUE_GATHER_SECONDS,
                            lambda: asyncio.ensure_future(self._run(container, key, kwargs)))
        batch.append((token, future))
        if len(batch) >= MAX_REISSUE_BATCH:
            del self._open[key]  # full: the timer finds a new batch, or none
            asyncio.ensure_future(self._run(container, key, kwargs, batch))
        result = await future
        if isinstance(result, RegistryError):
            raise result
        return result

    async def _run(self, container: Container, key: tuple, kwargs: dict[str, Any],
                   batch: list[tuple[str, asyncio.Future]] | None = None) -> None:
        batch = batch if batch is not None else self._open.pop(key, None)
        if not batch:
            return
        try:
            results = await run_in_threadpool(_issue_batch, container, [t for t, _ in batch], kwargs)
        except BaseException as exc:  # noqa: BLE001 - every waiter gets the failure, none hangs
            results = [exc] * len(batch)
        for (_, future), result in zip(batch, results):
            if future.done():
                continue
            if isinstance(result, BaseException) and not isinstance(result, RegistryError):
                future.set_exception(result)
            else:
                future.set_result(result)


def _batches(request: Request) -> ReissueBatches:
    """The app's re-issue batches (one set per process, made on first use)."""
    if not hasattr(request.app.state, "reissue_batches"):
        request.app.state.reissue_batches = ReissueBatches()
    return request.app.state.reissue_batches


def _answer(issued: manifests.Issued) -> Response:
    headers = {"ETag": issued.etag, "Cache-Control": "no-cache"}
    if issued.body is None:
        return Response(status_code=304, headers=headers)
    return JSONResponse(issued.body, headers=headers)


@router.get("/{tenant}/{name}/manifest", response_model=ReleasePublic, responses={
    304: {"description": "Not Modified: the ETag in If-None-Match is current (after `wait` seconds, with wait)"},
    **responses(*AUTHENTICATED, NotFoundError, ConflictError, ServiceUnavailableError)})
async def get_manifest(
    request: Request, tenant: TenantName, name: ModelName, token: BearerTokenDep, container: ContainerDep,
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

    Only approved, unrevoked versions are released: 409 ``revoked`` or ``not-approved`` otherwise. An
    adapter's release names the base it is served with (``adapter_of``); 409 ``adapter-base-moved`` when its
    base's alias of the same name points at other weights, ``adapter-base-revoked`` when its base is revoked.
    Each 200 answer is recorded (principal, version, serial, time) for provenance.
    """
    settings = container.settings
    kwargs = dict(tenant=tenant, name=name, ref=ref, for_tenant=for_tenant,
                  if_none_match=if_none_match, keyring=container.keyring, blob_store=container.blob_store,
                  clock=container.clock,
                  config=manifests.ReleaseConfig.from_settings(
                      settings, log_key=container.log_key,
                      cosign=container.collect_cosignatures if settings.log_witnesses else None),
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
        # Authenticated again: a token revoked while it waited gets nothing new. Woken together with
        # the other waiters on this release, re-issued with them.
        principal, issued = await _batches(request).issue(container, token, kwargs)
    return _answer(issued)


def _watch_keys(tenant: str, name: str, issued: manifests.Issued) -> set[str]:
    """What may change this release: the alias (when ``ref`` is one), the version served, the trust root, and
    for an adapter its base's alias and versions."""
    keys = {watch.subject_key(tenant, name, issued.version), watch.TRUST_ROOT, *issued.watch.also}
    if issued.watch.alias is not None:
        keys.add(watch.subject_key(tenant, name, issued.watch.alias))
    return keys
