"""adapter_bindings: an adapter version bound to its base version and the digest of the base's weights component
(issue 34), looked up by that digest ("which adapters are bound to these weights"); and versions looked up by
the digest of their signed statement (``adapter_of: sha256:...`` names a base so)

A table of its own rather than columns on versions: only adapters have a row, and it is created and dropped on
both databases without copying versions (which every other table refers to).

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-07 01:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0035"
down_revision: Union[str, None] = "0034"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "adapter_bindings",
        sa.Column("version_id", big_id, nullable=False),
        sa.Column("base_version_id", big_id, nullable=False),
        sa.Column("weights_digest", sa.String(length=64), nullable=False),
        sa.Column("base_manifest_digest", sa.String(length=64), nullable=False),
        sa.Column("requested", sa.String(length=256), nullable=False),
        sa.Column("check", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["version_id"], ["versions.id"],
                                name=op.f("fk_adapter_bindings_version_id_versions"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["base_version_id"], ["versions.id"],
                                name=op.f("fk_adapter_bindings_base_version_id_versions")),
        sa.PrimaryKeyConstraint("version_id", name=op.f("pk_adapter_bindings")),
    )
    op.create_index(op.f("ix_adapter_bindings_base_version_id"), "adapter_bindings", ["base_version_id"])
    op.create_index(op.f("ix_adapter_bindings_weights_digest"), "adapter_bindings", ["weights_digest"])
    op.create_index("ix_versions_manifest_digest", "versions", ["manifest_digest"])


def downgrade() -> None:
    op.drop_index("ix_versions_manifest_digest", table_name="versions")
    op.drop_index(op.f("ix_adapter_bindings_weights_digest"), table_name="adapter_bindings")
    op.drop_index(op.f("ix_adapter_bindings_base_version_id"), table_name="adapter_bindings")
    op.drop_table("adapter_bindings")
