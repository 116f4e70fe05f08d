"""The verifiable audit log, public, in the C2SP tlog-tiles layout under ``/log/`` (ADR 0011).

``/log/checkpoint`` is the newest signed checkpoint (cached a few seconds); ``/log/tile/<L>/<N>[.p/<W>]``
and ``/log/tile/entries/<N>[.p/<W>]`` the tiles and entry bundles (the events' 32-byte commitments),
immutable; ``/log/proof/inclusion`` and ``/log/proof/consistency`` RFC 9162 proofs computed from a few
tiles, for clients that want one request. Only commitments are public, so no token is asked: an event
itself stays behind ``/v1/audit``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from api.deps import ContainerDep, SessionDep
from api.problems import responses
from api.schemas import ConsistencyProofPublic, InclusionProofPublic
from registry.bootstrap import Container
from registry.db.session import one_statement_session
from registry.domain.errors import (
    InvalidInputError,
    LogCheckpointNotFoundError,
    LogProofRequestError,
    LogTileNotFoundError,
    LogTreeNotFoundError,
)
from registry.services import tlog
from registry.tlog.merkle import MAX_TREE_SIZE

router = APIRouter(prefix="/log", tags=["log"])

TreeSize = Annotated[int, Query(ge=0, le=MAX_TREE_SIZE)]
# tlog-tiles: the checkpoint is mutable (a few seconds at most), tiles are immutable.
CHECKPOINT_CACHE = "public, max-age=5"
TILE_CACHE = "public, max-age=31536000, immutable"


@router.get("/checkpoint", response_class=Response, responses={
    **responses(LogCheckpointNotFoundError), 200: {"content": {"text/plain": {}}}})
def checkpoint(session: SessionDep) -> Response:
    """The newest C2SP checkpoint, a signed note by the log key (``modelreg keys export`` has its verifier key)."""
    signed = tlog.served_checkpoint(session)
    if signed is None:
        raise LogCheckpointNotFoundError("the log has no checkpoint yet")
    return Response(signed.encode(), media_type="text/plain; charset=utf-8",
                    headers={"Cache-Control": CHECKPOINT_CACHE})


@router.get("/tile/{path:path}", response_class=Response, responses={
    **responses(LogTileNotFoundError, InvalidInputError), 200: {"content": {"application/octet-stream": {}}}})
def tile(path: str, session: SessionDep) -> Response:
    """A tile (``<L>/<N>[.p/<W>]``) or entry bundle (``entries/<N>[.p/<W>]``), in tlog-tiles' canonical
    spelling only; 404 for any other path or a tile the log has not reached."""
    return Response(tlog.read_tile_path(session, f"tile/{path}"), media_type="application/octet-stream",
                    headers={"Cache-Control": TILE_CACHE})


@router.get("/proof/inclusion", response_model=InclusionProofPublic,
            responses=responses(LogProofRequestError, LogTreeNotFoundError))
async def inclusion_proof(container: ContainerDep, index: TreeSize, size: TreeSize) -> InclusionProofPublic:
    """RFC 9162 inclusion proof of leaf ``index`` in the tree of ``size`` leaves (hashes base64, leaf end first)."""
    proof = await run_in_threadpool(_read, container, tlog.inclusion, index=index, size=size)
    return InclusionProofPublic(index=index, size=size, leaf_hash=_b64(proof["leaf_hash"]),
                                root=_b64(proof["root"]), hashes=[_b64(h) for h in proof["hashes"]])


@router.get("/proof/consistency", response_model=ConsistencyProofPublic,
            responses=responses(LogProofRequestError, LogTreeNotFoundError))
async def consistency_proof(container: ContainerDep, first: TreeSize, second: TreeSize) -> ConsistencyProofPublic:
    """RFC 9162 consistency proof from the tree of ``first`` leaves to the tree of ``second`` (hashes base64)."""
    proof = await run_in_threadpool(_read, container, tlog.consistency, first=first, second=second)
    return ConsistencyProofPublic(first=first, second=second, first_root=_b64(proof["first_root"]),
                                  second_root=_b64(proof["second_root"]), hashes=[_b64(h) for h in proof["hashes"]])


def _read(container: Container, proof: Callable[..., dict[str, Any]], **kwargs: int) -> dict[str, Any]:
    """A proof in one thread hop and one statement (``tlog`` reads the head and its tiles together)."""
    with one_statement_session(container.session_factory) as session:
        return proof(session, **kwargs)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
