"""receipts and receipt_reporters: the places holding a version, as node programs, admission decisions and
``cluster watch`` report them (issue 36)

Revision ID: 0038
Revises: 0037
Create Date: 2026-12-07 04:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0038"
down_revision: Union[str, None] = "0037"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "receipt_reporters",
        sa.Column("id", big_id, nullable=False),
        sa.Column("principal", sa.String(length=128), nullable=False),
        sa.Column("program", sa.String(length=16), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("scope", sa.String(length=256), nullable=False),
        sa.Column("first_report_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_report_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_receipt_reporters")),
        sa.UniqueConstraint("principal", "program", "node", "scope",
                            name=op.f("uq_receipt_reporters_principal_program_node_scope")),
    )
    op.create_table(
        "receipts",
        sa.Column("id", big_id, nullable=False),
        sa.Column("reporter_id", big_id, nullable=False),
        sa.Column("version_id", big_id, nullable=False),
        sa.Column("principal", sa.String(length=128), nullable=False),
        sa.Column("program", sa.String(length=16), nullable=False),
        sa.Column("place_digest", sa.String(length=64), nullable=False),
        sa.Column("place", sa.JSON(), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("namespace", sa.String(length=253), nullable=True),
        sa.Column("pod", sa.String(length=253), nullable=True),
        sa.Column("since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("dropped_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("alerted_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["reporter_id"], ["receipt_reporters.id"],
                                name=op.f("fk_receipts_reporter_id_receipt_reporters"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["version_id"], ["versions.id"],
                                name=op.f("fk_receipts_version_id_versions"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_receipts")),
        sa.UniqueConstraint("principal", "place_digest", "version_id",
                            name=op.f("uq_receipts_principal_place_digest_version_id")),
    )
    op.create_index("ix_receipts_version_held", "receipts", ["version_id", "dropped_at"])
    op.create_index("ix_receipts_reporter_held", "receipts", ["reporter_id", "dropped_at"])


def downgrade() -> None:
    op.drop_index("ix_receipts_reporter_held", table_name="receipts")
    op.drop_index("ix_receipts_version_held", table_name="receipts")
    op.drop_table("receipts")
    op.drop_table("receipt_reporters")
