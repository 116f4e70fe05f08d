from __future__ import annotations

from fastapi import APIRouter, status

from api.deps import ContainerDep, PrincipalDep, SessionDep
from api.problems import responses
from registry.domain.errors import AuthenticationError, PermissionDeniedError
from registry.scanning import SCANNER_NAME, SCANNER_VERSION
from registry.services import scans

router = APIRouter(prefix="/v1/scans", tags=["scans"])


@router.post("/rescan", status_code=status.HTTP_202_ACCEPTED,
             responses=responses(AuthenticationError, PermissionDeniedError))
def rescan(session: SessionDep, principal: PrincipalDep, container: ContainerDep) -> dict[str, object]:
    """Queue a scan, with the current scanner version, of every stored file not yet scanned by it."""
    queued = scans.rescan_all(session, principal, ports=container.ports)
    return {"queued": queued, "scanner": SCANNER_NAME, "scanner_version": SCANNER_VERSION}
