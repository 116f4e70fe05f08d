"""node_bindings: Kubernetes service accounts of trusted issuers bound to a tenant's node role

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02 01:40:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: Union[str, None] = "0018"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "node_bindings",
        sa.Column("id", BigId, nullable=False),
        sa.Column("issuer", sa.String(length=512), nullable=False),
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("service_account", sa.String(length=253), nullable=False),
        sa.Column("tenant_id", BigId, nullable=False),
        sa.Column("principal_id", BigId, nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], name=op.f("fk_node_bindings_tenant_id_tenants"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["principal_id"], ["principals.id"],
                                name=op.f("fk_node_bindings_principal_id_principals"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_node_bindings")),
        sa.UniqueConstraint("issuer", "namespace", "service_account", "tenant_id",
                            name=op.f("uq_node_bindings_issuer_namespace_service_account_tenant_id")),
    )
    op.create_index("ix_node_bindings_subject", "node_bindings", ["issuer", "namespace", "service_account"])
    op.create_index(op.f("ix_node_bindings_tenant_id"), "node_bindings", ["tenant_id"])
    op.create_index(op.f("ix_node_bindings_principal_id"), "node_bindings", ["principal_id"])


def downgrade() -> None:
    op.drop_table("node_bindings")
