"""eval_sets.prompt_templates: the unit's prompt templates an eval set's cases render, so a change to one asks for
the suites that read it again (null for eval sets added before, whose cases could render none)

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-06 05:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0034"
down_revision: Union[str, None] = "0033"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column("eval_sets", sa.Column("prompt_templates", sa.JSON(), nullable=True))


def downgrade() -> None:
    # In place on both databases (SQLite 3.35 and later): a batch copy would drop a table others refer to.
    op.execute("ALTER TABLE eval_sets DROP COLUMN prompt_templates")
