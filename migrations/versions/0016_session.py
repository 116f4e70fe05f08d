"""console sessions, kept server-side so that sign-out, token revocation and disabling end them

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01 21:20:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: Union[str, None] = "0015"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id", BigId, nullable=False),
        sa.Column("token_id", BigId, nullable=False),
        sa.Column("principal_id", BigId, nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_why", sa.String(length=32), nullable=True),
        sa.ForeignKeyConstraint(["token_id"], ["api_tokens.id"], name=op.f("fk_console_sessions_token_id_api_tokens"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["principal_id"], ["principals.id"],
                                name=op.f("fk_console_sessions_principal_id_principals"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_console_sessions")),
    )
    op.create_index(op.f("ix_console_sessions_token_id"), "console_sessions", ["token_id"], unique=False)
    op.create_index(op.f("ix_console_sessions_principal_id"), "console_sessions", ["principal_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_console_sessions_principal_id"), table_name="console_sessions")
    op.drop_index(op.f("ix_console_sessions_token_id"), table_name="console_sessions")
    op.drop_table("console_sessions")
