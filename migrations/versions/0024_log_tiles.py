"""log_tiles and log_head: the verifiable audit log's tiles and head (ADR 0011)

The tree over the events that exist already is built by the first ``integrate_audit_log`` job, not here:
it runs in bounded batches that each commit (a migration would hold one transaction over every event and
block the deploy), and it is the one code path that builds the tree.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-02 16:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: Union[str, None] = "0023"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "log_tiles",
        sa.Column("level", sa.SmallInteger(), autoincrement=False, nullable=False),
        sa.Column("index", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("width", sa.SmallInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("level", "index", name=op.f("pk_log_tiles")),
    )
    op.create_table(
        "log_head",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("origin", sa.String(length=255), nullable=True),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("root", sa.LargeBinary(), nullable=False),
        sa.Column("edge", sa.LargeBinary(), nullable=False),
        sa.Column("checkpoint", sa.Text(), nullable=True),
        sa.Column("checkpoint_size", sa.BigInteger(), nullable=False),
        sa.Column("checkpoint_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_log_head")),
    )


def downgrade() -> None:
    op.drop_table("log_head")
    op.drop_table("log_tiles")
