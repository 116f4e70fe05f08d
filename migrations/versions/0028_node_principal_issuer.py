"""node_principal_issuer: a bound service account's principal is named by its whole issuer, not its host

Before, ``sa:NS/SA@<issuer host>``: two issuers on one host (EKS and GKE serve many clusters' issuers from
one host, told apart by the path) made one principal. Now ``sa:NS/SA@<issuer without its scheme>``. For
each (issuer, namespace, service account) bound under another name, its bindings move to the principal
of the new name (made, with the old one's ``disabled``, when none exists). The old principal stays, as
history (issuances, audit) names it. An issuer without a path keeps its name: nothing moves.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-05 07:00:00
"""
from typing import Sequence, Union
from urllib.parse import urlsplit

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: Union[str, None] = "0027"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def _name(issuer: str, namespace: str, service_account: str, *, with_path: bool) -> str:
    """The name ``registry.workload_identity.principal_name`` gives (with_path), or gave before (without);
    written out here so this revision keeps its meaning whatever that module becomes."""
    parts = urlsplit(issuer)
    host = (parts.hostname or "").lower()
    label = f"{host}:{parts.port}" if parts.port else host
    if with_path:
        label += parts.path.rstrip("/")
    return f"sa:{namespace}/{service_account}@{label}"


def _move(with_path: bool) -> None:
    conn = op.get_bind()
    subjects = conn.execute(sa.text(
        "SELECT DISTINCT b.issuer, b.namespace, b.service_account, b.principal_id, p.name, p.disabled "
        "FROM node_bindings b JOIN principals p ON p.id = b.principal_id")).all()
    for issuer, namespace, account, principal_id, name, disabled in subjects:
        wanted = _name(issuer, namespace, account, with_path=with_path)
        if name == wanted:
            continue
        target = conn.execute(sa.text("SELECT id FROM principals WHERE name = :name"), {"name": wanted}).scalar()
        if target is None:
            conn.execute(sa.text(
                "INSERT INTO principals (name, is_admin, disabled, created_at) "
                "VALUES (:name, :false, :disabled, CURRENT_TIMESTAMP)"),
                {"name": wanted, "false": False, "disabled": bool(disabled)})
            target = conn.execute(sa.text("SELECT id FROM principals WHERE name = :name"), {"name": wanted}).scalar()
        conn.execute(sa.text(
            "UPDATE node_bindings SET principal_id = :target WHERE issuer = :issuer AND namespace = :namespace "
            "AND service_account = :account AND principal_id = :old"),
            {"target": target, "issuer": issuer, "namespace": namespace, "account": account, "old": principal_id})


def upgrade() -> None:
    _move(with_path=True)


def downgrade() -> None:
    # Back to one principal per issuer host (what the older code looks up by name when it binds).
    _move(with_path=False)
