"""licenses: findings per version (where each license was read), the declared license, the upstream card

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30 11:20:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: Union[str, None] = "0007"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column("versions", sa.Column("declared_license", sa.String(length=256), nullable=True))
    op.add_column("versions", sa.Column("upstream_card", sa.JSON(), nullable=True))
    op.create_table(
        "license_findings",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("version_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("source", sa.String(length=1100), nullable=False),
        sa.Column("raw", sa.Text(), nullable=True),
        sa.Column("raw_length", sa.Integer(), nullable=True),
        sa.Column("normalized", sa.String(length=128), nullable=True),
        sa.Column("problem", sa.Text(), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["version_id"], ["versions.id"], name=op.f("fk_license_findings_version_id_versions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_license_findings")),
    )
    op.create_index(op.f("ix_license_findings_version_id"), "license_findings", ["version_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_license_findings_version_id"), table_name="license_findings")
    op.drop_table("license_findings")
    with op.batch_alter_table("versions") as batch:
        batch.drop_column("upstream_card")
        batch.drop_column("declared_license")
