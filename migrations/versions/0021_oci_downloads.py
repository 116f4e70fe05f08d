"""hf_downloads.channel: downloads are counted per channel, "hf" (files through /hf) or "oci" (manifests
through /v2), so provenance names OCI pullers beside Hub clients

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-02 05:10:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: Union[str, None] = "0020"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("hf_downloads") as batch:
        batch.add_column(sa.Column("channel", sa.String(length=8), nullable=False, server_default="hf"))
        batch.drop_constraint(op.f("pk_hf_downloads"), type_="primary")
        batch.create_primary_key(op.f("pk_hf_downloads"), ["version_id", "principal", "day", "channel"])


def downgrade() -> None:
    # The old key cannot hold two channels of one (version, principal, day): the OCI counts go.
    op.execute("DELETE FROM hf_downloads WHERE channel <> 'hf'")
    with op.batch_alter_table("hf_downloads") as batch:
        batch.drop_constraint(op.f("pk_hf_downloads"), type_="primary")
        batch.drop_column("channel")
        batch.create_primary_key(op.f("pk_hf_downloads"), ["version_id", "principal", "day"])
