"""aliases and their history; revocation of versions

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30 11:40:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: Union[str, None] = "0009"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("versions") as batch:
        batch.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("revoked_by", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("revoke_reason", sa.Text(), nullable=True))
    op.create_table(
        "aliases",
        sa.Column("id", BigId, nullable=False),
        sa.Column("model_id", BigId, nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("version_id", BigId, nullable=False),
        sa.Column("canary_version_id", BigId, nullable=True),
        sa.Column("canary_tenants", sa.JSON(), nullable=False),
        sa.Column("updated_by", sa.String(length=128), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_aliases_model_id_models"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["version_id"], ["versions.id"], name=op.f("fk_aliases_version_id_versions")),
        sa.ForeignKeyConstraint(["canary_version_id"], ["versions.id"],
                                name=op.f("fk_aliases_canary_version_id_versions")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_aliases")),
        sa.UniqueConstraint("model_id", "name", name=op.f("uq_aliases_model_id_name")),
    )
    op.create_index(op.f("ix_aliases_model_id"), "aliases", ["model_id"], unique=False)
    op.create_table(
        "alias_history",
        sa.Column("id", BigId, nullable=False),
        sa.Column("alias_id", BigId, nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("from_version", sa.Integer(), nullable=True),
        sa.Column("from_canary", sa.JSON(), nullable=True),
        sa.Column("to_version", sa.Integer(), nullable=False),
        sa.Column("to_canary", sa.JSON(), nullable=True),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("bundle_digest", sa.String(length=64), nullable=False),
        sa.Column("input_digest", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["alias_id"], ["aliases.id"], name=op.f("fk_alias_history_alias_id_aliases"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alias_history")),
    )
    op.create_index(op.f("ix_alias_history_alias_id"), "alias_history", ["alias_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_alias_history_alias_id"), table_name="alias_history")
    op.drop_table("alias_history")
    op.drop_index(op.f("ix_aliases_model_id"), table_name="aliases")
    op.drop_table("aliases")
    with op.batch_alter_table("versions") as batch:
        batch.drop_column("revoke_reason")
        batch.drop_column("revoked_by")
        batch.drop_column("revoked_at")
