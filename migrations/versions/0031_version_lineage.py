"""versions.derived_from_id: the version a derived unit was made from (``modelreg derive``), its lineage

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

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


FK = "fk_versions_derived_from_id_versions"


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # A plain ADD COLUMN with its named reference inline (SQLite allows it for a nullable column): a batch
        # copy of versions would drop a table every other table refers to, and SQLite has no ADD CONSTRAINT.
        op.execute(f"ALTER TABLE versions ADD COLUMN derived_from_id INTEGER CONSTRAINT {FK} REFERENCES versions (id)")
        return
    op.add_column("versions", sa.Column("derived_from_id", BigId, nullable=True))
    op.create_foreign_key(FK, "versions", "versions", ["derived_from_id"], ["id"])


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("versions") as batch:  # the copy leaves the column and its reference out
            batch.drop_column("derived_from_id")
        return
    op.drop_constraint(FK, "versions", type_="foreignkey")
    op.drop_column("versions", "derived_from_id")
