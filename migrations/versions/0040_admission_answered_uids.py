"""admission_answered_uids: the request uids of the answered reviews the registry recorded, so a report the
webhook sends again after a timeout records none of them twice (issue 35, ``registry/services/admission.py``)

Revision ID: 0040
Revises: 0039
Create Date: 2026-12-07 12:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0040"
down_revision: Union[str, None] = "0039"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "admission_answered_uids",
        sa.Column("uid", sa.String(length=64), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("uid", name=op.f("pk_admission_answered_uids")),
    )
    op.create_index(op.f("ix_admission_answered_uids_recorded_at"), "admission_answered_uids", ["recorded_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_admission_answered_uids_recorded_at"), table_name="admission_answered_uids")
    op.drop_table("admission_answered_uids")
