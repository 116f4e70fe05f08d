"""oci_referrer_digests: the manifest and document digests of each released version's referrers, recorded when
they are built, so a /v2 lookup by a digest that names nothing costs one indexed query

Versions approved before this revision are recorded when their referrers are first listed, or a few at a
time by the first lookups that miss (registry/services/oci_referrers.py).

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-05 07:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: Union[str, None] = "0028"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "oci_referrer_digests",
        sa.Column("id", BigId, nullable=False),
        sa.Column("version_id", BigId, nullable=False),
        sa.Column("model_id", BigId, nullable=False),
        sa.Column("artifact_type", sa.String(length=128), nullable=False),
        sa.Column("manifest_digest", sa.String(length=71), nullable=False),
        sa.Column("layer_digest", sa.String(length=71), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["version_id"], ["versions.id"],
                                name=op.f("fk_oci_referrer_digests_version_id_versions"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_oci_referrer_digests_model_id_models"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_oci_referrer_digests")),
        sa.UniqueConstraint("version_id", "manifest_digest",
                            name=op.f("uq_oci_referrer_digests_version_id_manifest_digest")),
    )
    op.create_index("ix_oci_referrer_digests_model_manifest", "oci_referrer_digests", ["model_id", "manifest_digest"])
    op.create_index("ix_oci_referrer_digests_model_layer", "oci_referrer_digests", ["model_id", "layer_digest"])


def downgrade() -> None:
    op.drop_table("oci_referrer_digests")
