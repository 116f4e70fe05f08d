"""blob_chunks: the SHA-256 of each aligned chunk of a blob (per blob digest), which releases sign a root of

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-02 16:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: Union[str, None] = "0024"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "blob_chunks",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("chunk_size", sa.Integer(), nullable=False),
        sa.Column("digests", sa.LargeBinary(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["digest"], ["blobs.digest"], name=op.f("fk_blob_chunks_digest_blobs"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_blob_chunks")),
    )


def downgrade() -> None:
    op.drop_table("blob_chunks")
