"""node_bindings.role: a service account bound as a tenant's serving node (``node``, every binding made before) or
as the admission webhook (``admission``), so the webhook authenticates with its projected token (issue 35)

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-07 12:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0037"
down_revision: Union[str, None] = "0036"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column("node_bindings", sa.Column("role", sa.String(length=16), nullable=False, server_default="node"))


def downgrade() -> None:
    # In place on both databases (SQLite 3.35 and later): a batch copy would drop a table others refer to.
    op.execute("ALTER TABLE node_bindings DROP COLUMN role")
