"""eval results record whether the runner ran isolated

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01 22:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: Union[str, None] = "0014"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column("eval_results", sa.Column("isolated", sa.Boolean(), nullable=True))


def downgrade() -> None:
    op.drop_column("eval_results", "isolated")
