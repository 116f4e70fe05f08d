"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-29 18:49:20.909202
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = '0001'
down_revision: Union[str, None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:

    op.create_table('audit_events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=False, nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('actor', sa.String(length=128), nullable=False),
    sa.Column('action', sa.String(length=64), nullable=False),
    sa.Column('subject', sa.String(length=512), nullable=False),
    sa.Column('tenant', sa.String(length=64), nullable=True),
    sa.Column('details', sa.JSON(), nullable=False),
    sa.Column('prev_hash', sa.String(length=64), nullable=False),
    sa.Column('hash', sa.String(length=64), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_events'))
    )
    op.create_index(op.f('ix_audit_events_action'), 'audit_events', ['action'], unique=False)
    op.create_index(op.f('ix_audit_events_subject'), 'audit_events', ['subject'], unique=False)
    op.create_table('audit_head',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('last_event_id', sa.BigInteger(), nullable=False),
    sa.Column('last_hash', sa.String(length=64), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_head'))
    )
    op.create_table('blobs',
    sa.Column('digest', sa.String(length=64), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('digest', name=op.f('pk_blobs'))
    )
    op.create_table('jobs',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('kind', sa.String(length=64), nullable=False),
    sa.Column('payload', sa.JSON(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('max_attempts', sa.Integer(), nullable=False),
    sa.Column('run_after', sa.DateTime(timezone=True), nullable=False),
    sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('locked_by', sa.String(length=128), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('idempotency_key', sa.String(length=256), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_jobs')),
    sa.UniqueConstraint('idempotency_key', name=op.f('uq_jobs_idempotency_key'))
    )
    op.create_index('ix_jobs_claim', 'jobs', ['state', 'run_after'], unique=False)
    op.create_table('principals',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('is_admin', sa.Boolean(), nullable=False),
    sa.Column('disabled', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_principals')),
    sa.UniqueConstraint('name', name=op.f('uq_principals_name'))
    )
    op.create_table('tenants',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_tenants')),
    sa.UniqueConstraint('name', name=op.f('uq_tenants_name'))
    )
    op.create_table('api_tokens',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('principal_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('prefix', sa.String(length=16), nullable=False),
    sa.Column('description', sa.String(length=256), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['principal_id'], ['principals.id'], name=op.f('fk_api_tokens_principal_id_principals'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_tokens')),
    sa.UniqueConstraint('token_hash', name=op.f('uq_api_tokens_token_hash'))
    )
    op.create_index(op.f('ix_api_tokens_principal_id'), 'api_tokens', ['principal_id'], unique=False)
    op.create_table('models',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('tenant_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('next_version', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], name=op.f('fk_models_tenant_id_tenants')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_models')),
    sa.UniqueConstraint('tenant_id', 'name', name=op.f('uq_models_tenant_id_name'))
    )
    op.create_index(op.f('ix_models_tenant_id'), 'models', ['tenant_id'], unique=False)
    op.create_table('role_bindings',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('principal_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('tenant_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('role', sa.String(length=32), nullable=False),
    sa.Column('capacity', sa.String(length=32), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['principal_id'], ['principals.id'], name=op.f('fk_role_bindings_principal_id_principals'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], name=op.f('fk_role_bindings_tenant_id_tenants'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_role_bindings')),
    sa.UniqueConstraint('principal_id', 'tenant_id', 'role', 'capacity', name=op.f('uq_role_bindings_principal_id_tenant_id_role_capacity'))
    )
    op.create_index(op.f('ix_role_bindings_principal_id'), 'role_bindings', ['principal_id'], unique=False)
    op.create_index(op.f('ix_role_bindings_tenant_id'), 'role_bindings', ['tenant_id'], unique=False)
    op.create_table('versions',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('model_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=32), nullable=False),
    sa.Column('source_kind', sa.String(length=16), nullable=False),
    sa.Column('source_repo', sa.String(length=1024), nullable=False),
    sa.Column('source_endpoint', sa.String(length=1024), nullable=True),
    sa.Column('requested_revision', sa.String(length=256), nullable=True),
    sa.Column('resolved_revision', sa.String(length=128), nullable=True),
    sa.Column('include', sa.JSON(), nullable=False),
    sa.Column('exclude', sa.JSON(), nullable=False),
    sa.Column('source_key', sa.String(length=64), nullable=True),
    sa.Column('license', sa.String(length=128), nullable=True),
    sa.Column('failure_reason', sa.String(length=64), nullable=True),
    sa.Column('failure_detail', sa.JSON(), nullable=True),
    sa.Column('submitted_by', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('manifest_digest', sa.String(length=64), nullable=True),
    sa.Column('manifest_bundle', sa.JSON(), nullable=True),
    sa.Column('signing_key_id', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('sealed_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['model_id'], ['models.id'], name=op.f('fk_versions_model_id_models')),
    sa.ForeignKeyConstraint(['submitted_by'], ['principals.id'], name=op.f('fk_versions_submitted_by_principals')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_versions')),
    sa.UniqueConstraint('model_id', 'number', name=op.f('uq_versions_model_id_number'))
    )
    op.create_index(op.f('ix_versions_model_id'), 'versions', ['model_id'], unique=False)
    op.create_index(op.f('ix_versions_state'), 'versions', ['state'], unique=False)
    op.create_index(
        'uq_versions_live_source', 'versions', ['model_id', 'source_key'], unique=True,
        postgresql_where=sa.text("state NOT IN ('failed', 'rejected', 'revoked')"),
        sqlite_where=sa.text("state NOT IN ('failed', 'rejected', 'revoked')"),
    )
    op.create_table('version_files',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('version_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('path', sa.String(length=1024), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=True),
    sa.Column('upstream_sha256', sa.String(length=64), nullable=True),
    sa.Column('upstream_git_sha1', sa.String(length=40), nullable=True),
    sa.Column('upstream_etag', sa.String(length=256), nullable=True),
    sa.Column('mirrored_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['version_id'], ['versions.id'], name=op.f('fk_version_files_version_id_versions'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_version_files')),
    sa.UniqueConstraint('version_id', 'path', name=op.f('uq_version_files_version_id_path'))
    )
    op.create_index(op.f('ix_version_files_sha256'), 'version_files', ['sha256'], unique=False)
    op.create_index(op.f('ix_version_files_version_id'), 'version_files', ['version_id'], unique=False)



def downgrade() -> None:

    op.drop_index(op.f('ix_version_files_version_id'), table_name='version_files')
    op.drop_index(op.f('ix_version_files_sha256'), table_name='version_files')
    op.drop_table('version_files')
    op.drop_index('uq_versions_live_source', table_name='versions')
    op.drop_index(op.f('ix_versions_state'), table_name='versions')
    op.drop_index(op.f('ix_versions_model_id'), table_name='versions')
    op.drop_table('versions')
    op.drop_index(op.f('ix_role_bindings_tenant_id'), table_name='role_bindings')
    op.drop_index(op.f('ix_role_bindings_principal_id'), table_name='role_bindings')
    op.drop_table('role_bindings')
    op.drop_index(op.f('ix_models_tenant_id'), table_name='models')
    op.drop_table('models')
    op.drop_index(op.f('ix_api_tokens_principal_id'), table_name='api_tokens')
    op.drop_table('api_tokens')
    op.drop_table('tenants')
    op.drop_table('principals')
    op.drop_index('ix_jobs_claim', table_name='jobs')
    op.drop_table('jobs')
    op.drop_table('blobs')
    op.drop_table('audit_head')
    op.drop_index(op.f('ix_audit_events_subject'), table_name='audit_events')
    op.drop_index(op.f('ix_audit_events_action'), table_name='audit_events')
    op.drop_table('audit_events')

