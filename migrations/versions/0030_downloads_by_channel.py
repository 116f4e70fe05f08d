"""downloads: hf_downloads renamed for what it holds, the downloads of every distribution channel ("hf", "oci",
"manifest", "s3"), each row naming its channel (no default: every writer says which)

Every row is kept with its channel: the rows of hf_downloads already carry one ("hf" files through /hf, "oci"
manifests through /v2, since 0021). The table is copied rather than renamed in place so its constraints take
the names the naming convention gives the new table, on SQLite too; the downgrade copies the rows back.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-05 16:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: Union[str, None] = "0029"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
COLUMNS = "version_id, principal, day, channel, count, first_at, last_at"


def _create(name: str, channel_default: str | None) -> None:
    op.create_table(
        name,
        sa.Column("version_id", BigId, nullable=False),
        sa.Column("principal", sa.String(length=128), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("channel", sa.String(length=8), nullable=False, server_default=channel_default),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("first_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["version_id"], ["versions.id"], name=op.f(f"fk_{name}_version_id_versions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("version_id", "principal", "day", "channel", name=op.f(f"pk_{name}")),
    )


def upgrade() -> None:
    _create("downloads", None)
    # A channel 0021's default left empty cannot be told apart: it was a file through /hf.
    op.execute(f"INSERT INTO downloads ({COLUMNS}) SELECT version_id, principal, day, "
               "COALESCE(NULLIF(channel, ''), 'hf'), count, first_at, last_at FROM hf_downloads")
    op.drop_table("hf_downloads")


def downgrade() -> None:
    _create("hf_downloads", "hf")
    op.execute(f"INSERT INTO hf_downloads ({COLUMNS}) SELECT {COLUMNS} FROM downloads")
    op.drop_table("downloads")
