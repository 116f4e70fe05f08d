"""Content-addressed blob upload (for `modelreg submit ./dir` to a remote registry)."""

from __future__ import annotations

import tempfile

from fastapi import APIRouter, Query, Request, Response, status
from starlette.concurrency import run_in_threadpool

from api.deps import ContainerDep, PrincipalDep, SessionDep
from registry.domain.files import require_sha256
from registry.services import versions

router = APIRouter(prefix="/v1/blobs", tags=["blobs"])

SPOOL_IN_MEMORY = 8 * 1024 * 1024


@router.head("/sha256/{digest}")
def head_blob(digest: str, container: ContainerDep, principal: PrincipalDep) -> Response:
    """200 with the size when the blob is stored, else 404: lets an uploader skip what the registry has."""
    info = container.blob_store.stat(require_sha256(digest))
    return Response(status_code=200, headers={"Content-Length": str(info.size), "ETag": f'"{digest}"'})


@router.put("/sha256/{digest}", status_code=status.HTTP_201_CREATED)
async def put_blob(
    digest: str, request: Request, session: SessionDep, principal: PrincipalDep, container: ContainerDep,
    tenant: str = Query(..., description="the tenant the upload is for (needs the submitter role)"),
) -> dict[str, object]:
    """Upload a blob; it is committed only if its bytes hash to ``digest``."""
    require_sha256(digest)
    declared = request.headers.get("content-length")
    size = int(declared) if declared and declared.isdigit() else None
    # The body is spooled (in memory, then on disk past 8 MiB) so the blocking store reads it in a thread.
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY) as spool:
        async for chunk in request.stream():
            spool.write(chunk)
        spool.seek(0)
        created = await run_in_threadpool(
            versions.upload_blob, session, principal, tenant, digest, spool, size, blob_store=container.blob_store
        )
    return {"digest": digest, "created": created}
