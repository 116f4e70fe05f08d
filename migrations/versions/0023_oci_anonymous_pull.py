"""tenants.oci_anonymous_pull: an administrator may let callers without credentials pull a tenant's
released versions through /v2 (off unless turned on)

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-02 16:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: Union[str, None] = "0022"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    # A plain ADD COLUMN: a batch copy of tenants would drop a table every other table refers to (SQLite).
    op.add_column("tenants", sa.Column("oci_anonymous_pull", sa.Boolean(), nullable=False,
                                       server_default=sa.text("false")))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("oci_anonymous_pull")
