"""Adapters submitted through the API in-process (``TestClient``), for the adapter integration tests: blobs uploaded
as the tenant's, the version submitted ``adapter_of`` a base, shown, and judged by the three approvers of the
release-unit world (``tests/support/release_unit.py``).

Example:
    >>> with api(container) as client:  # doctest: +SKIP
    ...     r = submit_adapter(client, token, tiny_adapter_files("lora"), "acme/llm@1")
"""

from __future__ import annotations

import hashlib

from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from registry.db.models import AuditEvent
from registry.services import adapters, approvals, versions
from tests.support.release_unit import NAME, TENANT

ADAPTER = "llm-support"
PROBLEMS = "https://modelreg.dev/problems/"


def api(container) -> TestClient:
    """The API in-process on the container (server exceptions answered, as a real server does)."""
    return TestClient(create_app(container), raise_server_exceptions=False)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def submit_adapter(client: TestClient, token: str, files: dict[str, bytes], adapter_of: str | None, *,
                   tenant: str = TENANT, name: str = ADAPTER, label: str = "adapter"):
    """Upload ``files`` as blobs of ``tenant``; submit them as a version of ``tenant/name`` bound to ``adapter_of``."""
    entries = []
    for path, data in sorted(files.items()):
        digest = hashlib.sha256(data).hexdigest()
        r = client.put(f"/v1/blobs/sha256/{digest}", params={"tenant": tenant}, content=data, headers=auth(token))
        assert r.status_code in (200, 201), r.text
        entries.append({"path": path, "size": len(data), "sha256": digest})
    body = {"source": f"upload:{label}", "files": entries, **({} if adapter_of is None else {"adapter_of": adapter_of})}
    return client.post(f"/v1/models/{tenant}/{name}/versions", json=body, headers=auth(token))


def shown(client: TestClient, token: str, number: int, name: str = ADAPTER) -> dict:
    r = client.get(f"/v1/models/{TENANT}/{name}/versions/{number}", headers=auth(token))
    assert r.status_code == 200, r.text
    return r.json()


def base_row(container, number: int = 1) -> tuple[str, str]:
    """acme/llm@number's weights component digest and statement digest."""
    with container.session_factory() as session:
        version = versions.find_version_unchecked(session, TENANT, NAME, number)
        return adapters.weights_digest_of(session, version), version.manifest_digest


def events(container, action: str, subject: str) -> list[dict]:
    with container.session_factory() as session:
        return [e.details for e in session.scalars(select(AuditEvent).where(
            AuditEvent.action == action, AuditEvent.subject == subject).order_by(AuditEvent.id))]


def approve_adapter(container, people, number: int) -> str:
    """The security, ML and legal approvers of the world approve adapter ``number``; its state after."""
    for who, capacity in (("sec", "security"), ("mia", "ml"), ("lex", "legal")):
        with container.session_factory() as session:
            status = approvals.decide(session, people[who], TENANT, ADAPTER, number,
                                      approvals.ApprovalRequest("approve", capacity, "", []), ports=container.ports)
    return status.state


def version_digest(container, tenant: str, name: str, number: int) -> tuple[str, str]:
    """A version's state and the digest of its signed statement."""
    with container.session_factory() as session:
        version = versions.find_version_unchecked(session, tenant, name, number)
        return version.state, version.manifest_digest
