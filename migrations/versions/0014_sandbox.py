"""eval results record whether the runner ran isolated

Revision ID: 0014_sandbox
Revises: 0013
Create Date: 2026-12-01 22:00:00
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa

revision: str = "0014_sandbox"
down_revision: Union[str, None] = "0013"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column("eval_results", sa.Column("isolated", sa.Boolean(), nullable=True))


def downgrade() -> None:
    op.drop_column("eval_results", "isolated")
