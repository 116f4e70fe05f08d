"""Receipts: node programs say which releases they hold and drop (``POST /v1/receipts``, node identities).

The body is read here up to :data:`registry.domain.receipts.MAX_REPORT_BYTES` and checked by
:func:`registry.domain.receipts.parse_report`; the service decides who may report what.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from api.deps import ContainerDep, PrincipalDep, SessionDep
from api.problems import AUTHENTICATED, responses
from registry.domain import receipts as domain
from registry.domain.errors import InvalidInputError, LimitExceededError, ReceiptsRateLimitedError
from registry.services import receipts

router = APIRouter(prefix="/v1/receipts", tags=["receipts"])


class ReceiptRejected(BaseModel):
    index: int
    type: str
    detail: str


class ReceiptsRecorded(BaseModel):
    recorded: int = Field(description="places held, as reported")
    dropped: int = Field(description="places newly dropped (by this report or its snapshot)")
    rejected: list[ReceiptRejected] = Field(description="places naming no version: not retried")
    stale_after_seconds: float


@router.post("", response_model=ReceiptsRecorded,
             responses=responses(*AUTHENTICATED, LimitExceededError, ReceiptsRateLimitedError),
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                 "schema": domain.REPORT_SCHEMA}}}})
async def report(request: Request, session: SessionDep, principal: PrincipalDep,
                 container: ContainerDep) -> dict[str, Any]:
    """Record which releases a node program holds (node tokens and bound service accounts, for their tenants):
    idempotent; bounded in size and, per principal, in rate."""
    settings = container.settings
    container.receipt_limiter.check(principal.name)  # before the body is read
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > domain.MAX_REPORT_BYTES:
            raise LimitExceededError(f"a receipt report holds at most {domain.MAX_REPORT_BYTES} bytes",
                                     limit=domain.MAX_REPORT_BYTES)
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        raise InvalidInputError("body: not JSON", field="body") from None
    parsed = domain.parse_report(doc)
    return await run_in_threadpool(receipts.report, session, principal, parsed, clock=container.clock,
                                   stale_after=settings.receipts_stale_after_seconds)
