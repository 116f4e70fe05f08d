"""Eval sets (deployment-wide JSONL blobs) and the eval results of a version."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from api.deps import ContainerDep, PrincipalDep, SessionDep
from api.params import INT32_MAX, ModelName, TenantName, VersionNumber
from api.problems import AUTHENTICATED, responses
from registry.domain.errors import LimitExceededError, NotFoundError, UpstreamError
from registry.evals.cases import MAX_EVALSET_BYTES
from registry.evals.suites import EVALSET_NAME, SUITE_NAME
from registry.services import evals
from registry.services.loaders import version_ref

router = APIRouter(tags=["evals"], responses=responses(*AUTHENTICATED))

EvalSetName = Annotated[str, Field(pattern=f"^{EVALSET_NAME.pattern}$", min_length=1, max_length=64,
                                   description="eval set name (a lowercase slug)")]
EvalSetNumber = Annotated[int, Field(ge=1, le=INT32_MAX, description="version of the eval set")]
SuiteName = Annotated[str, Field(pattern=f"^{SUITE_NAME.pattern}$", min_length=1, max_length=64,
                                 description="suite name, as in the policy data")]
_JSONL = {"application/x-ndjson": {"schema": {"type": "string"}}}
# The request body is read raw, whatever its Content-Type: the CLI sends application/x-ndjson. The schema
# names octet-stream, which OpenAPI tools (schemathesis included) know how to send.
_JSONL_BODY = {"application/octet-stream": {"schema": {"type": "string", "format": "binary",
                                                       "description": "the eval set: UTF-8 JSONL, a case per line"}}}


@router.put("/v1/evalsets/{name}", status_code=status.HTTP_201_CREATED, responses={
    200: {"description": "these bytes are a version of the eval set already: that version"},
    **responses(LimitExceededError, UpstreamError)},
    openapi_extra={"requestBody": {"required": True, "content": _JSONL_BODY}})
async def put_evalset(name: EvalSetName, request: Request, response: Response, session: SessionDep,
                      principal: PrincipalDep, container: ContainerDep,
                      description: str = Query("", max_length=1024, description="what the set measures")
                      ) -> dict[str, object]:
    """Add a version of an eval set (administrators): its JSONL bytes, checked case by case, stored as a blob."""
    declared = request.headers.get("content-length")
    # Before a byte is read: a caller who may not add eval sets, or says it sends too much, is refused.
    await run_in_threadpool(evals.authorize_evalset_upload, principal, name,
                            int(declared) if declared and declared.isdigit() else None)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_EVALSET_BYTES:
            raise LimitExceededError(f"an eval set holds at most {MAX_EVALSET_BYTES} bytes", limit=MAX_EVALSET_BYTES)
    row, created = await run_in_threadpool(evals.add_evalset, session, principal, name, bytes(body), description,
                                           blob_store=container.blob_store, clock=container.clock)
    if not created:
        response.status_code = status.HTTP_200_OK
    return {**row.as_dict(), "created": created}


@router.get("/v1/evalsets")
def list_evalsets(session: SessionDep, principal: PrincipalDep) -> dict[str, object]:
    """The newest version of every eval set."""
    return {"evalsets": [r.as_dict() for r in evals.list_evalsets(session, principal)]}


@router.get("/v1/evalsets/{name}", responses=responses(NotFoundError))
def get_evalset(name: EvalSetName, session: SessionDep, principal: PrincipalDep) -> dict[str, object]:
    """Every version of one eval set."""
    return {"name": name, "versions": [r.as_dict() for r in evals.evalset_versions(session, principal, name)]}


@router.get("/v1/evalsets/{name}/versions/{number}", responses=responses(NotFoundError))
def get_evalset_version(name: EvalSetName, number: EvalSetNumber, session: SessionDep,
                        principal: PrincipalDep) -> dict[str, object]:
    return evals.get_evalset(session, principal, name, number).as_dict()


@router.get("/v1/evalsets/{name}/versions/{number}/cases", response_class=Response,
            responses={200: {"description": "the eval set's JSONL", "content": _JSONL},
                       **responses(NotFoundError, UpstreamError)})
def get_evalset_cases(name: EvalSetName, number: EvalSetNumber, session: SessionDep, principal: PrincipalDep,
                      container: ContainerDep) -> Response:
    """The eval set's bytes, checked against its digest."""
    row = evals.get_evalset(session, principal, name, number)
    return Response(evals.evalset_bytes(container.blob_store, row), media_type="application/x-ndjson",
                    headers={"ETag": f'"{row.digest}"'})


_VERSION = "/v1/models/{tenant}/{name}/versions/{number}/evals"


@router.get(_VERSION, responses=responses(NotFoundError))
def version_evals(tenant: TenantName, name: ModelName, number: VersionNumber, session: SessionDep,
                  principal: PrincipalDep) -> dict[str, object]:
    """Each suite's eval of the version: status, reason, metrics and breakdowns (cases: per suite)."""
    version, docs = evals.version_evals(session, principal, tenant, name, number)
    return {"version": version_ref(version), "state": version.state, "evals": docs}


@router.get(_VERSION + "/{suite}", responses=responses(NotFoundError))
def version_eval(tenant: TenantName, name: ModelName, number: VersionNumber, suite: SuiteName,
                 session: SessionDep, principal: PrincipalDep) -> dict[str, object]:
    """One suite's eval of the version, with every case outcome."""
    return evals.version_eval(session, principal, tenant, name, number, suite)


@router.get(_VERSION + "/{suite}/log", response_class=Response,
            responses={200: {"description": "the runner's log", "content": {"text/plain": {}}},
                       **responses(NotFoundError, UpstreamError)})
def version_eval_log(tenant: TenantName, name: ModelName, number: VersionNumber, suite: SuiteName,
                     session: SessionDep, principal: PrincipalDep, container: ContainerDep) -> Response:
    """The runner's output (both streams, bounded), as recorded."""
    data = evals.eval_log(session, principal, tenant, name, number, suite, blob_store=container.blob_store)
    return Response(data, media_type="text/plain; charset=utf-8")
