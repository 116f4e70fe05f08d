from __future__ import annotations

from fastapi import APIRouter

from api.deps import ContainerDep

router = APIRouter(prefix="/v1", tags=["keys"])


@router.get("/keys")
def list_keys(container: ContainerDep) -> dict[str, list[dict[str, str]]]:
    """The registry's public signing keys (PEM), by key id. Public: verifiers need no token."""
    key = container.signing_key.public_key
    return {"keys": [{"key_id": key.key_id, "algorithm": "ecdsa-p256-sha256",
                      "public_key_pem": key.public_pem().decode()}]}
