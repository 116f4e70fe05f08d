"""approvals: each person's decision on a version, in a capacity

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30 11:40:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: Union[str, None] = "0008"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("version_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("principal_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("capacity", sa.String(length=32), nullable=False),
        sa.Column("decision", sa.String(length=16), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["principal_id"], ["principals.id"], name=op.f("fk_approvals_principal_id_principals")
        ),
        sa.ForeignKeyConstraint(
            ["version_id"], ["versions.id"], name=op.f("fk_approvals_version_id_versions"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_approvals")),
        sa.UniqueConstraint("version_id", "principal_id", name=op.f("uq_approvals_version_id_principal_id")),
    )
    op.create_index(op.f("ix_approvals_version_id"), "approvals", ["version_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_approvals_version_id"), table_name="approvals")
    op.drop_table("approvals")
