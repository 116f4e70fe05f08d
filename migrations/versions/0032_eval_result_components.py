"""eval_results.components: the unit's component digests each eval ran on, so a result never covers a unit it
did not run on (null for results recorded before)

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-06 02:50:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: Union[str, None] = "0031"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column("eval_results", sa.Column("components", sa.JSON(), nullable=True))


def downgrade() -> None:
    # In place on both databases (SQLite 3.35 and later): a batch copy would drop a table others refer to.
    op.execute("ALTER TABLE eval_results DROP COLUMN components")
