"""principals.oidc_identity: the "<issuer> <sub>" a single sign-on principal is linked to

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-02 02:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: Union[str, None] = "0019"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("principals") as batch:
        batch.add_column(sa.Column("oidc_identity", sa.String(length=512), nullable=True))
        batch.create_unique_constraint(op.f("uq_principals_oidc_identity"), ["oidc_identity"])


def downgrade() -> None:
    with op.batch_alter_table("principals") as batch:
        batch.drop_constraint(op.f("uq_principals_oidc_identity"), type_="unique")
        batch.drop_column("oidc_identity")
