from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

from api.deps import ContainerDep
from api.problems import responses
from registry.db import migrate
from registry.domain.errors import ServiceUnavailableError as NotReadyError

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses=responses(NotReadyError))
def readyz(container: ContainerDep) -> dict[str, str]:
    """Ready when the database answers with the schema this code expects and the blob store can be reached."""
    try:
        with container.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
            current = migrate.is_current(conn)
    except Exception as exc:
        raise NotReadyError(f"database unreachable: {type(exc).__name__}", component="database") from exc
    if not current:
        raise NotReadyError("database schema is not at this version's revision: run `modelreg migrate`",
                            component="database")
    try:
        container.blob_store.check()
    except Exception as exc:
        raise NotReadyError(f"blob store unreachable: {type(exc).__name__}", component="blob_store") from exc
    return {"status": "ready", "database": "ok", "blob_store": "ok"}
