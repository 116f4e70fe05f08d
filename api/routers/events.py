"""The event stream over HTTP: ``GET /v1/events`` (CloudEvents read by cursor; see registry.services.events).

With ``wait``, a read that finds nothing holds (no thread, no connection) until the process's event
watcher (:mod:`registry.watch`) sees an event of a tenant the caller may read, then reads once more.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from api.deps import BearerTokenDep, ContainerDep, EventWatcherDep
from api.params import AfterId, TenantName
from api.problems import AUTHENTICATED, responses
from registry.auth import AuthenticatedPrincipal, authenticate
from registry.bootstrap import Container
from registry.domain import events as catalogue
from registry.domain.errors import InvalidInputError
from registry.services import events as events_service

router = APIRouter(prefix="/v1/events", tags=["events"], responses=responses(*AUTHENTICATED))


def _read(container: Container, token: str, **kwargs: Any) -> tuple[AuthenticatedPrincipal, list[catalogue.Event], int]:
    """Authenticate and read in one session, closed before it returns.

    A bound service account's projected token is accepted as on the manifest routes: a node that
    authenticates so must learn of revocations like one with a registry token.
    """
    with container.session_factory() as session:
        principal = authenticate(session, token, workload=container.workload_verifier)
        # Reads after authentication start a fresh transaction, not one opened by the lookup.
        session.rollback()
        found, cursor = events_service.read(session, principal, **kwargs)
        return principal, found, cursor


@router.get("")
async def read_events(
    token: BearerTokenDep,
    container: ContainerDep,
    watcher: EventWatcherDep,
    after: AfterId = 0,
    type: Annotated[list[str], Query(description="event types to read (short `version.revoked` or "
                                                 "`dev.modelreg.version.revoked`); all when none")] = [],  # noqa: B006
    tenant: TenantName | None = None,
    limit: int = Query(100, ge=1, le=events_service.MAX_LIMIT),
    wait: Annotated[int, Query(ge=0, le=events_service.MAX_WAIT_SECONDS, description=(
        "when no event is there yet: wait up to this many seconds for one; the answer comes as soon as "
        "one arrives (else no events, and the cursor to read on from)"))] = 0,
) -> dict[str, Any]:
    """Catalogue events after an audit id, oldest first, as CloudEvents 1.0 (structured JSON).

    Read on from ``cursor``: it is past every event returned and every row passed over.
    """
    try:
        types = catalogue.parse_types(type)
    except ValueError as exc:
        raise InvalidInputError(str(exc), field="type") from None
    kwargs = dict(limit=limit, types=types, tenant=tenant)
    if wait:
        await watcher.start()
    # Taken before reading: whatever is committed after the read has a larger id (registry.watch).
    since = watcher.head
    principal, found, cursor = await run_in_threadpool(_read, container, token, after=after, **kwargs)
    deadline = time.monotonic() + wait
    keys = events_service.watch_keys(principal, tenant)
    while not found and (remaining := deadline - time.monotonic()) > 0:
        if await watcher.wait(keys, since, remaining) != "news":
            break
        since = watcher.head
        principal, found, cursor = await run_in_threadpool(_read, container, token, after=cursor, **kwargs)
    return {"events": [e.as_cloudevent() for e in found], "cursor": cursor}
