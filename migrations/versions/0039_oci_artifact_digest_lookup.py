"""oci_artifacts: indexes on manifest_digest and config_digest alone, so the digest a kubelet reports for an
image volume (containerd: the config's, CRI-O: the manifest's; KEP-5365) finds its version in one indexed query
without the model being known (issue 36, ``registry/services/image_digests.py``)

Both digests of every stored shape, raw and image, are recorded since 0022: nothing to fill in.

Revision ID: 0039
Revises: 0038
Create Date: 2026-12-07 10:00:00
"""
from typing import Sequence, Union

from alembic import op

revision: str = "0039"
down_revision: Union[str, None] = "0038"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_index("ix_oci_artifacts_manifest_digest", "oci_artifacts", ["manifest_digest"])
    op.create_index("ix_oci_artifacts_config_digest", "oci_artifacts", ["config_digest"])


def downgrade() -> None:
    op.drop_index("ix_oci_artifacts_config_digest", table_name="oci_artifacts")
    op.drop_index("ix_oci_artifacts_manifest_digest", table_name="oci_artifacts")
