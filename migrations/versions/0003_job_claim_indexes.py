"""job claim indexes: queued jobs by priority, running jobs by lease expiry

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 20:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: Union[str, None] = "0002"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_index(
        "ix_jobs_queued_order", "jobs", ["priority", "id"], unique=False,
        postgresql_where=sa.text("state = 'queued'"), sqlite_where=sa.text("state = 'queued'"),
    )
    op.create_index(
        "ix_jobs_running_lease", "jobs", ["lease_expires_at"], unique=False,
        postgresql_where=sa.text("state = 'running'"), sqlite_where=sa.text("state = 'running'"),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_running_lease", table_name="jobs")
    op.drop_index("ix_jobs_queued_order", table_name="jobs")
