"""scan results

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 18:56:21.673211
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0002'
down_revision: Union[str, None] = '0001'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:

    op.create_table('scan_results',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('blob_digest', sa.String(length=64), nullable=False),
    sa.Column('path', sa.String(length=1024), nullable=False),
    sa.Column('scanner', sa.String(length=64), nullable=False),
    sa.Column('scanner_version', sa.String(length=64), nullable=False),
    sa.Column('format', sa.String(length=64), nullable=False),
    sa.Column('verdict', sa.String(length=16), nullable=False),
    sa.Column('findings', sa.JSON(), nullable=False),
    sa.Column('duration_ms', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_scan_results')),
    sa.UniqueConstraint('blob_digest', 'scanner', 'scanner_version', 'path', name=op.f('uq_scan_results_blob_digest_scanner_scanner_version_path'))
    )
    op.create_index(op.f('ix_scan_results_blob_digest'), 'scan_results', ['blob_digest'], unique=False)
    op.add_column('versions', sa.Column('flagged_at', sa.DateTime(timezone=True), nullable=True))
    op.add_column('versions', sa.Column('flag_reason', sa.String(length=256), nullable=True))



def downgrade() -> None:

    op.drop_column('versions', 'flag_reason')
    op.drop_column('versions', 'flagged_at')
    op.drop_index(op.f('ix_scan_results_blob_digest'), table_name='scan_results')
    op.drop_table('scan_results')

