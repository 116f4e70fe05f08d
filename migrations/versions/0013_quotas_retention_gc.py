"""quotas, retention rules, deleted versions and blob use times for garbage collection

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-30 17:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: Union[str, None] = "0012"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
OLD_LIVE = "state NOT IN ('failed', 'rejected', 'revoked')"
NEW_LIVE = "state NOT IN ('failed', 'rejected', 'revoked') AND deleted_at IS NULL"


def upgrade() -> None:
    op.add_column("blobs", sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("versions", sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("versions", sa.Column("deleted_by", sa.String(length=128), nullable=True))
    # A deleted version leaves the live index, so its source can be submitted again.
    op.drop_index("uq_versions_live_source", table_name="versions")
    op.create_index("uq_versions_live_source", "versions", ["model_id", "source_key"], unique=True,
                    postgresql_where=sa.text(NEW_LIVE), sqlite_where=sa.text(NEW_LIVE))
    op.create_index(op.f("ix_eval_results_log_digest"), "eval_results", ["log_digest"], unique=False)
    op.create_table(
        "tenant_quotas",
        sa.Column("tenant_id", BigId, nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("updated_by", sa.String(length=128), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name=op.f("fk_tenant_quotas_tenant_id_tenants"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_tenant_quotas")),
    )
    op.create_table(
        "retention_rules",
        sa.Column("model_id", BigId, nullable=False),
        sa.Column("keep_last", sa.Integer(), nullable=False),
        sa.Column("approved_within_days", sa.Integer(), nullable=True),
        sa.Column("updated_by", sa.String(length=128), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_retention_rules_model_id_models"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("model_id", name=op.f("pk_retention_rules")),
    )


def downgrade() -> None:
    op.drop_table("retention_rules")
    op.drop_table("tenant_quotas")
    op.drop_index(op.f("ix_eval_results_log_digest"), table_name="eval_results")
    op.drop_index("uq_versions_live_source", table_name="versions")
    with op.batch_alter_table("versions") as batch:
        batch.drop_column("deleted_by")
        batch.drop_column("deleted_at")
    op.create_index("uq_versions_live_source", "versions", ["model_id", "source_key"], unique=True,
                    postgresql_where=sa.text(OLD_LIVE), sqlite_where=sa.text(OLD_LIVE))
    with op.batch_alter_table("blobs") as batch:
        batch.drop_column("last_used_at")
