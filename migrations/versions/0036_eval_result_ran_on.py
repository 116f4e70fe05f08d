"""eval_results.ran_on: for an adapter's eval, the base it ran on (the base version and the digest of its weights
component) and the adapter's own weights digest, so a result never covers a base it did not run on (issue 34)

Null for a version that is no adapter, and for results recorded before: those of an adapter were run on the adapter
alone (no runner loaded its base), so none is filled in here and the policies count none of them for any base.

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-07 03:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0036"
down_revision: Union[str, None] = "0035"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column("eval_results", sa.Column("ran_on", sa.JSON(), nullable=True))


def downgrade() -> None:
    # In place on both databases (SQLite 3.35 and later): a batch copy would drop a table others refer to.
    op.execute("ALTER TABLE eval_results DROP COLUMN ran_on")
