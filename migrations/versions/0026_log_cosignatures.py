"""log_cosignatures: witness cosignatures collected for the log's checkpoints (ADR 0011, Witnesses)

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-03 09:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: Union[str, None] = "0025"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "log_cosignatures",
        sa.Column("checkpoint_size", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("root", sa.LargeBinary(), nullable=False),
        sa.Column("witness_key", sa.String(length=512), nullable=False),
        sa.Column("line", sa.Text(), nullable=False),
        sa.Column("collected_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("checkpoint_size", "root", "witness_key", name=op.f("pk_log_cosignatures")),
    )
    op.create_index(op.f("ix_log_cosignatures_witness_key"), "log_cosignatures", ["witness_key", "checkpoint_size"])


def downgrade() -> None:
    op.drop_index(op.f("ix_log_cosignatures_witness_key"), table_name="log_cosignatures")
    op.drop_table("log_cosignatures")
