"""model facts: what the headers of a version's files say (weights, architecture, quantization, tokenizer)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30 11:10:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: Union[str, None] = "0006"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "version_facts",
        sa.Column("version_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("reader_version", sa.String(length=16), nullable=False),
        sa.Column("facts", sa.JSON(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["version_id"], ["versions.id"], name=op.f("fk_version_facts_version_id_versions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("version_id", name=op.f("pk_version_facts")),
    )


def downgrade() -> None:
    op.drop_table("version_facts")
