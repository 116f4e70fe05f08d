"""blob ownership: which tenants may put a stored blob into their versions

Bytes stay stored once; a tenant owns a blob it uploaded or mirrored itself. Existing blobs go to
the tenants whose versions already use them (a blob uploaded but never put into a version goes to
nobody: its uploader proves possession by sending the bytes again).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 10:30:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: Union[str, None] = "0003"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "blob_owners",
        sa.Column("tenant_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("via", sa.String(length=16), nullable=False),
        sa.Column("granted_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["digest"], ["blobs.digest"], name=op.f("fk_blob_owners_digest_blobs"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name=op.f("fk_blob_owners_tenant_id_tenants"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("tenant_id", "digest", name=op.f("pk_blob_owners")),
    )
    # CURRENT_TIMESTAMP is UTC on both databases (SQLite stores it naive, as the models do).
    op.execute(sa.text(
        "INSERT INTO blob_owners (tenant_id, digest, via, granted_at) "
        "SELECT DISTINCT models.tenant_id, version_files.sha256, 'migration', CURRENT_TIMESTAMP "
        "FROM version_files "
        "JOIN versions ON versions.id = version_files.version_id "
        "JOIN models ON models.id = versions.model_id "
        "JOIN blobs ON blobs.digest = version_files.sha256"
    ))


def downgrade() -> None:
    op.drop_table("blob_owners")
