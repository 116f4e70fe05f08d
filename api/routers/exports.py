"""Exports of a version for auditors: a CycloneDX 1.6 ML-BOM, or an SLSA provenance statement in a DSSE envelope."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response

from api.deps import ContainerDep, PrincipalDep, SessionDep
from api.params import ModelName, TenantName, VersionNumber
from api.problems import AUTHENTICATED, responses
from registry.domain.errors import ConflictError, NotFoundError, ServiceUnavailableError
from registry.domain.exports import ExportFormat
from registry.services import exports

router = APIRouter(prefix="/v1/provenance", tags=["provenance"], responses=responses(*AUTHENTICATED))


_DOCUMENT = {"type": "object", "required": ["bomFormat", "specVersion", "components"],
             "description": "a CycloneDX 1.6 BOM, validated against the 1.6 schema"}
_ENVELOPE = {"type": "object", "required": ["payload", "payloadType", "signatures"],
             "description": "a DSSE envelope over an in-toto Statement v1 (payload type application/vnd.in-toto+json)"
                            " with an SLSA provenance v1 predicate"}


@router.get("/{tenant}/{name}/versions/{number}/export", response_class=Response, responses={
    200: {"description": "the export: `cyclonedx` as application/vnd.cyclonedx+json (version=1.6), `slsa` as "
                         "application/vnd.dsse.envelope.v1+json",
          "content": {exports.CYCLONEDX_MEDIA_TYPE: {"schema": _DOCUMENT},
                      exports.DSSE_MEDIA_TYPE: {"schema": _ENVELOPE}}},
    **responses(NotFoundError, ConflictError, ServiceUnavailableError)})
def export_version(tenant: TenantName, name: ModelName, number: VersionNumber, session: SessionDep,
                   principal: PrincipalDep, container: ContainerDep,
                   format: Annotated[ExportFormat, Query(description="cyclonedx or slsa")]) -> Response:
    """Export a sealed version (auditors of the tenant, administrators): its CycloneDX 1.6 ML-BOM (files with
    their SHA-256, license, model card with the eval metrics), or its SLSA provenance signed by the registry
    (verify it with a key of ``GET /v1/keys``). 409 ``invalid-state`` before the version is sealed."""
    done = exports.export(session, principal, tenant, name, number, format.value, keyring=container.keyring,
                          blob_store=container.blob_store, clock=container.clock,
                          root_expiry=dt.timedelta(days=container.settings.trust_root_expiry_days))
    return Response(done.content, media_type=done.media_type,
                    headers={"Content-Disposition": f'attachment; filename="{done.filename}"'})
