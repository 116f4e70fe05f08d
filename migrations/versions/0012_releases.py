"""trust roots, release serials and release issuances

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-30 18:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: Union[str, None] = "0011"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "trust_roots",
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("envelope", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("version", name=op.f("pk_trust_roots")),
    )
    op.create_table(
        "release_serials",
        sa.Column("model_id", BigId, nullable=False),
        sa.Column("ref", sa.String(length=64), nullable=False),
        sa.Column("serial", sa.BigInteger(), nullable=False),
        sa.Column("target_digest", sa.String(length=64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_release_serials_model_id_models"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("model_id", "ref", name=op.f("pk_release_serials")),
    )
    op.create_table(
        "release_issuances",
        sa.Column("id", BigId, nullable=False),
        sa.Column("principal", sa.String(length=128), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("ref", sa.String(length=64), nullable=False),
        sa.Column("for_tenant", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("serial", sa.BigInteger(), nullable=False),
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_release_issuances")),
    )
    op.create_index("ix_release_issuances_model_ref_at", "release_issuances", ["model", "ref", "at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_release_issuances_model_ref_at", table_name="release_issuances")
    op.drop_table("release_issuances")
    op.drop_table("release_serials")
    op.drop_table("trust_roots")
