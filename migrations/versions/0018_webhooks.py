"""webhook_subscriptions and webhook_deliveries: tenants' webhooks, their cursors and delivery attempts

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02 12:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: Union[str, None] = "0017"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "webhook_subscriptions",
        sa.Column("id", BigId, nullable=False),
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("types", sa.JSON(), nullable=False),
        sa.Column("model_glob", sa.String(length=256), nullable=True),
        sa.Column("secret", sa.String(length=128), nullable=False),
        sa.Column("previous_secret", sa.String(length=128), nullable=True),
        sa.Column("previous_secret_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cursor", sa.BigInteger(), nullable=False),
        sa.Column("cursor_part", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("paused_reason", sa.String(length=1024), nullable=True),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failed_attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.String(length=1024), nullable=True),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_subscriptions")),
    )
    op.create_index("ix_webhook_subscriptions_tenant", "webhook_subscriptions", ["tenant"])
    op.create_index("ix_webhook_subscriptions_status", "webhook_subscriptions", ["status"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", BigId, nullable=False),
        sa.Column("subscription_id", BigId, nullable=False),
        sa.Column("event_id", sa.String(length=128), nullable=False),
        sa.Column("event_type", sa.String(length=128), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(length=1024), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["subscription_id"], ["webhook_subscriptions.id"],
                                name=op.f("fk_webhook_deliveries_subscription_id_webhook_subscriptions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
    )
    op.create_index("ix_webhook_deliveries_subscription", "webhook_deliveries", ["subscription_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_subscription", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_index("ix_webhook_subscriptions_status", table_name="webhook_subscriptions")
    op.drop_index("ix_webhook_subscriptions_tenant", table_name="webhook_subscriptions")
    op.drop_table("webhook_subscriptions")
