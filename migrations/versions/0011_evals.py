"""eval sets and eval results

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-30 14:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: Union[str, None] = "0010"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "eval_sets",
        sa.Column("id", BigId, nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("cases", sa.Integer(), nullable=False),
        sa.Column("categories", sa.JSON(), nullable=False),
        sa.Column("languages", sa.JSON(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["digest"], ["blobs.digest"], name=op.f("fk_eval_sets_digest_blobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_eval_sets")),
        sa.UniqueConstraint("name", "digest", name=op.f("uq_eval_sets_name_digest")),
        sa.UniqueConstraint("name", "number", name=op.f("uq_eval_sets_name_number")),
    )
    op.create_table(
        "eval_results",
        sa.Column("id", BigId, nullable=False),
        sa.Column("version_id", BigId, nullable=False),
        sa.Column("suite", sa.String(length=64), nullable=False),
        sa.Column("suite_version", sa.String(length=64), nullable=False),
        sa.Column("runner", sa.String(length=64), nullable=False),
        sa.Column("runner_version", sa.String(length=32), nullable=False),
        sa.Column("definition", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("breakdown", sa.JSON(), nullable=False),
        sa.Column("cases", sa.JSON(), nullable=False),
        sa.Column("log_digest", sa.String(length=64), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["version_id"], ["versions.id"], name=op.f("fk_eval_results_version_id_versions"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_eval_results")),
        sa.UniqueConstraint("version_id", "suite", name=op.f("uq_eval_results_version_id_suite")),
    )
    op.create_index(op.f("ix_eval_results_version_id"), "eval_results", ["version_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_eval_results_version_id"), table_name="eval_results")
    op.drop_table("eval_results")
    op.drop_table("eval_sets")
