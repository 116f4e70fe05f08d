"""A version uploaded through the API a real ``modelreg serve`` answers, for the e2e and browser tests.

``submit_upload`` puts each file's bytes as a blob of the tenant and submits the version
(``upload:LABEL``); ``wait_for_state`` polls the version until the pipeline brings it to a state.

Example:
    >>> number = submit_upload(api, "acme", "tiny", tiny_model_files(3), "one")  # doctest: +SKIP
    >>> wait_for_state(api, "acme", "tiny", number)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import time

from registry.client.api import RegistryApi


def submit_upload(api: RegistryApi, tenant: str, model: str, files: dict[str, bytes], label: str, *,
                  license: str = "mit") -> int:
    """Upload ``files`` (path -> bytes) and submit them as a version of ``tenant/model``; its number."""
    entries = []
    for path, data in files.items():
        digest = hashlib.sha256(data).hexdigest()
        api.put_blob(tenant, digest, data, len(data))
        entries.append({"path": path, "size": len(data), "sha256": digest})
    return api.submit(tenant, model, {"source": f"upload:{label}", "files": entries, "license": license})["version"]


def wait_for_state(api: RegistryApi, tenant: str, model: str, number: int, state: str = "awaiting_approval", *,
                   timeout: float = 240) -> None:
    """Poll the version until it is in ``state``; fail at once on ``failed`` or ``rejected``, or at ``timeout``."""
    deadline = time.monotonic() + timeout
    while (now := api.version(tenant, model, number)["state"]) != state:
        assert now not in ("failed", "rejected") and time.monotonic() < deadline, now
        time.sleep(0.05)
