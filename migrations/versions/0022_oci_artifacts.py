"""oci_artifacts, oci_tar_layers: each shape of a released version as served through /v2 (raw ModelPack,
image), its manifest and config bytes stored once when it is approved, and the tar layers generated from
its files when served

Versions approved before this revision get theirs when first pulled (registry/services/oci.py).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-02 16:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: Union[str, None] = "0021"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "oci_artifacts",
        sa.Column("id", BigId, nullable=False),
        sa.Column("version_id", BigId, nullable=False),
        sa.Column("model_id", BigId, nullable=False),
        sa.Column("shape", sa.String(length=8), nullable=False),
        sa.Column("media_type", sa.String(length=128), nullable=False),
        sa.Column("manifest_digest", sa.String(length=71), nullable=False),
        sa.Column("manifest", sa.LargeBinary(), nullable=False),
        sa.Column("config_digest", sa.String(length=71), nullable=False),
        sa.Column("config", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["version_id"], ["versions.id"], name=op.f("fk_oci_artifacts_version_id_versions"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_oci_artifacts_model_id_models"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_oci_artifacts")),
        sa.UniqueConstraint("version_id", "shape", name=op.f("uq_oci_artifacts_version_id_shape")),
        sa.UniqueConstraint("model_id", "manifest_digest", name=op.f("uq_oci_artifacts_model_id_manifest_digest")),
    )
    op.create_index("ix_oci_artifacts_model_config", "oci_artifacts", ["model_id", "config_digest"])
    op.create_table(
        "oci_tar_layers",
        sa.Column("id", BigId, nullable=False),
        sa.Column("artifact_id", BigId, nullable=False),
        sa.Column("model_id", BigId, nullable=False),
        sa.Column("root", sa.String(length=16), nullable=False),
        sa.Column("digest", sa.String(length=71), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("paths", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["artifact_id"], ["oci_artifacts.id"],
                                name=op.f("fk_oci_tar_layers_artifact_id_oci_artifacts"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_oci_tar_layers_model_id_models"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_oci_tar_layers")),
    )
    op.create_index(op.f("ix_oci_tar_layers_artifact_id"), "oci_tar_layers", ["artifact_id"])
    op.create_index("ix_oci_tar_layers_model_digest", "oci_tar_layers", ["model_id", "digest"])


def downgrade() -> None:
    op.drop_table("oci_tar_layers")
    op.drop_table("oci_artifacts")
