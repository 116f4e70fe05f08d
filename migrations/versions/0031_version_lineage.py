"""versions.derived_from: the number of the version of the same model a derived unit was made from
(``modelreg derive``), its lineage

A plain integer column, not a foreign key: versions are never deleted as rows, and on SQLite a column with a
reference can only be dropped by copying the table, which drops the table every other table refers to (and
cascades the deletes). This one is added and dropped in place on both databases.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-06 02:40:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: Union[str, None] = "0030"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column("versions", sa.Column("derived_from", sa.Integer(), nullable=True))


def downgrade() -> None:
    # SQLite 3.35 and later drop a plain column in place (no batch copy of versions).
    op.execute("ALTER TABLE versions DROP COLUMN derived_from")
