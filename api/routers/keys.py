"""The registry's public keys and its trust roots: public, because nodes need them before they trust anything."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse

from api.deps import ContainerDep, SessionDep
from api.params import INT32_MAX
from api.problems import responses
from api.schemas import EnvelopePublic, KeysPublic
from registry.domain.errors import InvalidInputError
from registry.services import trust_roots
from registry.services.trust_roots import TrustRootNotFoundError
from registry.signing.trust_root import ALGORITHM, TrustRoot

router = APIRouter(prefix="/v1", tags=["keys"])


def _newest(session: SessionDep, container: ContainerDep) -> TrustRoot:
    import datetime as dt

    return trust_roots.ensure_root(session, container.keyring.primary, clock=container.clock,
                                   expires_in=dt.timedelta(days=container.settings.trust_root_expiry_days))


@router.get("/keys", response_model=KeysPublic)
def list_keys(session: SessionDep, container: ContainerDep) -> KeysPublic:
    """Every key of the newest trust root (PEM), by key id, and the audit log's verifier key. Public:
    verifiers need no token."""
    root = _newest(session, container)
    log_key = container.log_key
    return KeysPublic(keys=[{"key_id": key_id, "algorithm": ALGORITHM, "public_key_pem": key.public_pem().decode()}
                            for key_id, key in sorted(root.keys.items())],
                      log={"origin": log_key.name, "verifier_key": log_key.verifier().vkey})


@router.get("/trust-root", response_model=EnvelopePublic)
def newest_trust_root(session: SessionDep, container: ContainerDep) -> JSONResponse:
    """The newest trust root: a DSSE envelope of ``application/vnd.modelreg.root+json`` (version, expiry,
    threshold, keys). Pin it once; then walk forward from it with ``/v1/trust-root/{version}``."""
    root = _newest(session, container)
    return JSONResponse(root.envelope, headers={"Cache-Control": "no-cache"})


@router.get("/trust-root/{version}", response_model=EnvelopePublic,
            responses=responses(TrustRootNotFoundError, InvalidInputError))
def trust_root(version: Annotated[int, Path(ge=1, le=INT32_MAX, description="trust root version")],
               session: SessionDep, container: ContainerDep) -> JSONResponse:
    """Trust root ``version``; 404 (``trust-root-not-found``) past the newest, where a node's walk stops.
    A published root never changes."""
    _newest(session, container)
    envelope = trust_roots.get_root(session, version)
    return JSONResponse(envelope, headers={"Cache-Control": "public, max-age=86400, immutable"})
