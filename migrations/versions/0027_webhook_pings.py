"""webhook_deliveries.pending_event: a test ping waits for the delivery workers (issue 30)

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-05 07:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: Union[str, None] = "0026"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column("webhook_deliveries", sa.Column("pending_event", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("webhook_deliveries", "pending_event")
