"""Content-addressed blob upload (for `modelreg submit ./dir` to a remote registry)."""

from __future__ import annotations

import tempfile

from fastapi import APIRouter, Header, Query, Request, Response, status
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from api.deps import ContainerDep, PrincipalDep, SessionDep
from api.params import Sha256Hex, TenantName
from api.problems import AUTHENTICATED, responses
from api.ranges import byte_range, content_range
from registry.domain.errors import (
    IntegrityError,
    InvalidInputError,
    LimitExceededError,
    NotFoundError,
    PresignedUrlError,
    RangeNotSatisfiableError,
    UpstreamError,
)
from registry.domain.files import require_sha256
from registry.services import versions

router = APIRouter(prefix="/v1/blobs", tags=["blobs"])

SPOOL_IN_MEMORY = 8 * 1024 * 1024


_BYTES = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}


@router.get("/sha256/{digest}", response_class=Response, responses={
    200: {"description": "the blob's bytes", "content": _BYTES},
    206: {"description": "the bytes of the requested range", "content": _BYTES},
    **responses(PresignedUrlError, NotFoundError, RangeNotSatisfiableError, InvalidInputError, UpstreamError)})
def get_blob(
    digest: Sha256Hex, container: ContainerDep,
    expires: str | None = Query(None), signature: str | None = Query(None),
    range_header: str | None = Header(None, alias="Range"),
) -> Response:
    """Serve a blob to the holder of a presigned URL (the local store's equivalent of S3 presigning).

    Supports one ``Range: bytes=a-b`` so interrupted downloads resume.
    """
    store = container.blob_store
    store.verify_presigned(require_sha256(digest), expires, signature)
    size = store.stat(digest).size
    requested = byte_range(range_header, size)
    start, end = requested or (0, size)
    headers = {"Content-Length": str(end - start), "Accept-Ranges": "bytes", "ETag": f'"{digest}"',
               "Cache-Control": "private, max-age=31536000, immutable"}
    if requested is not None:
        headers["Content-Range"] = content_range(start, end, size)
    return StreamingResponse(store.open_range(digest, start, end), status_code=206 if requested else 200,
                             headers=headers,
                             media_type="application/octet-stream")


@router.head("/sha256/{digest}", response_class=Response, responses={
    200: {"description": "the blob is stored; Content-Length is its size"},
    **responses(*AUTHENTICATED, NotFoundError, UpstreamError)})
def head_blob(
    digest: Sha256Hex, session: SessionDep, container: ContainerDep, principal: PrincipalDep,
    tenant: TenantName = Query(..., description="the tenant the upload is for (needs the submitter role)"),
) -> Response:
    """200 with the size when ``tenant`` owns the blob, else 404: lets an uploader skip what it sent before.

    Only submitters ask, and only of their tenant: whether another tenant stores some bytes is never told.
    """
    info = versions.stat_uploaded_blob(session, principal, tenant, digest, blob_store=container.blob_store)
    return Response(status_code=200, headers={"Content-Length": str(info.size), "ETag": f'"{digest}"'})


@router.put("/sha256/{digest}", status_code=status.HTTP_201_CREATED, responses=responses(
    *AUTHENTICATED, NotFoundError, LimitExceededError, IntegrityError, UpstreamError))
async def put_blob(
    digest: Sha256Hex, request: Request, session: SessionDep, principal: PrincipalDep, container: ContainerDep,
    tenant: TenantName = Query(..., description="the tenant the upload is for (needs the submitter role)"),
) -> dict[str, object]:
    """Upload a blob; it is committed, and ``tenant`` made its owner, only if its bytes hash to ``digest``.

    ``created`` is false only when ``tenant`` owned the blob already.
    """
    require_sha256(digest)
    declared = request.headers.get("content-length")
    size = int(declared) if declared and declared.isdigit() else None
    limits = container.limits()
    # Before a byte is read: a caller who may not upload here, or says it sends too much, is refused.
    await run_in_threadpool(versions.authorize_upload, session, principal, tenant, size, limits)
    session.rollback()
    # The body is spooled (in memory, then on disk past 8 MiB) so the blocking store reads it in a thread.
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as spool:
        received = 0
        async for chunk in request.stream():
            received += len(chunk)
            # Content-Length is optional (chunked bodies) and may lie: count what actually arrives.
            if received > limits.max_file_size:
                raise LimitExceededError(f"the upload is over the limit of {limits.max_file_size} bytes",
                                         limit=limits.max_file_size)
            spool.write(chunk)
        spool.seek(0)
        created = await run_in_threadpool(
            versions.upload_blob, session, principal, tenant, digest, spool, size, blob_store=container.blob_store
        )
    return {"digest": digest, "created": created}
