"""What the edge-input tests of the HTTP API (``tests/e2e/api_inputs/``) share: a token made in the database,
row counts, the problem types a refusal must carry, and an uploaded blob to name in a version."""

from __future__ import annotations

import hashlib

from sqlalchemy import func, select

from registry.auth import issue_token
from registry.db.models import Principal, RoleBinding, Tenant

PROBLEM = "https://modelreg.dev/problems/"


def make_token(container, name: str, *, admin: bool = False, submitter_in: str | None = None) -> str:
    with container.session_factory() as session:
        principal = Principal(name=name, is_admin=admin)
        session.add(principal)
        session.flush()
        if submitter_in:
            tenant = session.scalar(select(Tenant).where(Tenant.name == submitter_in))
            if tenant is None:
                tenant = Tenant(name=submitter_in)
                session.add(tenant)
                session.flush()
            session.add(RoleBinding(principal_id=principal.id, tenant_id=tenant.id, role="submitter", capacity=""))
        issued = issue_token(session, principal)
        session.commit()
        return issued.token


def count_rows(container, model) -> int:
    with container.session_factory() as session:
        return session.scalar(select(func.count()).select_from(model))


def assert_invalid_text(r, field: str) -> None:
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["type"] == PROBLEM + "invalid-text", body
    assert any(e["field"].startswith(field) for e in body["errors"]), body


def assert_refused_name(r, field: str) -> None:
    """Names, roles and capacities have a pattern, which a NUL or a surrogate fails first (invalid-input)."""
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["type"] in {PROBLEM + "invalid-input", PROBLEM + "invalid-text"}, body
    assert any(e["field"].startswith(field) for e in body["errors"]), body


def upload_weights(api, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    assert api.put(f"/v1/blobs/sha256/{digest}", params={"tenant": "acme"}, content=data).status_code == 201
    return {"path": "weights.bin", "size": len(data), "sha256": digest}
