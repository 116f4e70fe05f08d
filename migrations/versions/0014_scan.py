"""scan waits (settling a version in O(1) per scan) and tenant-fair job claims

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01 21:30:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: Union[str, None] = "0013"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
QUEUED = "state = 'queued'"


def upgrade() -> None:
    # Jobs queued before this revision belong to no tenant; new ones always say.
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("tenant", sa.String(length=64), server_default="", nullable=False))
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("tenant", server_default=None)
    op.create_index("ix_jobs_tenant_queued_order", "jobs", ["tenant", "priority", "id"], unique=False,
                    postgresql_where=sa.text(QUEUED), sqlite_where=sa.text(QUEUED))
    op.create_table(
        "job_turns",
        sa.Column("tenant", sa.String(length=64), nullable=False),
        sa.Column("served_turn", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", name=op.f("pk_job_turns")),
    )
    op.create_table(
        "scan_waits",
        sa.Column("version_id", BigId, nullable=False),
        sa.Column("blob_digest", sa.String(length=64), nullable=False),
        sa.Column("scan_key", sa.String(length=1100), nullable=False),
        sa.ForeignKeyConstraint(["version_id"], ["versions.id"], name=op.f("fk_scan_waits_version_id_versions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("version_id", "blob_digest", "scan_key", name=op.f("pk_scan_waits")),
    )
    op.create_index("ix_scan_waits_blob", "scan_waits", ["blob_digest", "scan_key"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_scan_waits_blob", table_name="scan_waits")
    op.drop_table("scan_waits")
    op.drop_table("job_turns")
    op.drop_index("ix_jobs_tenant_queued_order", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("tenant")
