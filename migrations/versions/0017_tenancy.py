"""hf_downloads: file downloads through /hf per version, principal and day, for provenance

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-01 21:30:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: Union[str, None] = "0016"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "hf_downloads",
        sa.Column("version_id", BigId, nullable=False),
        sa.Column("principal", sa.String(length=128), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["version_id"], ["versions.id"], name=op.f("fk_hf_downloads_version_id_versions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("version_id", "principal", "day", name=op.f("pk_hf_downloads")),
    )


def downgrade() -> None:
    op.drop_table("hf_downloads")
