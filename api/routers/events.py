"""The event stream over HTTP: ``GET /v1/events`` (CloudEvents read by cursor; see registry.services.events)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from api.deps import PrincipalDep, SessionDep
from api.params import AfterId, TenantName
from api.problems import AUTHENTICATED, responses
from registry.domain import events as catalogue
from registry.domain.errors import InvalidInputError
from registry.services import events as events_service

router = APIRouter(prefix="/v1/events", tags=["events"], responses=responses(*AUTHENTICATED))


@router.get("")
def read_events(
    session: SessionDep,
    principal: PrincipalDep,
    after: AfterId = 0,
    type: Annotated[list[str], Query(description="event types to read (short `version.revoked` or "
                                                 "`dev.modelreg.version.revoked`); all when none")] = [],  # noqa: B006
    tenant: TenantName | None = None,
    limit: int = Query(100, ge=1, le=events_service.MAX_LIMIT),
) -> dict[str, Any]:
    """Catalogue events after an audit id, oldest first, as CloudEvents 1.0 (structured JSON).

    Read on from ``cursor``: it is past every event returned and every row passed over.
    """
    try:
        types = catalogue.parse_types(type)
    except ValueError as exc:
        raise InvalidInputError(str(exc), field="type") from None
    found, cursor = events_service.read(session, principal, after=after, limit=limit, types=types, tenant=tenant)
    return {"events": [e.as_cloudevent() for e in found], "cursor": cursor}
