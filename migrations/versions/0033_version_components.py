"""version_components: each sealed version's release-unit components (name, digest, members, registry-held part
detail), recorded at seal and looked up by digest ("which units share these weights")

Versions sealed before get their rows here, from their files and the parts their facts recorded: the same
components the registry computed from them on every read before this revision (``registry.domain.components``,
pure code), in batches of versions. Their registry-held parts' ``detail`` stays null (a migration reads no blob):
version detail reads those few parts from the store as it did before.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-06 04:00:00
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0033"
down_revision: Union[str, None] = "0032"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

BATCH = 200
"""Versions read and written at a time."""


def upgrade() -> None:
    op.create_table(
        "version_components",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("version_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("member_count", sa.Integer(), nullable=False),
        sa.Column("members", sa.JSON(), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["version_id"], ["versions.id"],
                                name=op.f("fk_version_components_version_id_versions"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_version_components")),
        sa.UniqueConstraint("version_id", "name", name=op.f("uq_version_components_version_id_name")),
    )
    op.create_index("ix_version_components_digest_id", "version_components", ["digest", "id"])
    _record_sealed_versions()


def _record_sealed_versions() -> None:
    from registry.domain.components import unit_components
    from registry.domain.files import FileEntry

    conn = op.get_bind()
    versions = sa.table("versions", sa.column("id"), sa.column("sealed_at"))
    facts = sa.table("version_facts", sa.column("version_id"), sa.column("facts", sa.JSON()))
    files = sa.table("version_files", sa.column("version_id"), sa.column("path"), sa.column("size"),
                     sa.column("sha256"))
    components = sa.table("version_components", sa.column("version_id"), sa.column("name"), sa.column("digest"),
                          sa.column("member_count"), sa.column("members", sa.JSON()), sa.column("detail", sa.JSON()))
    # A version whose seal ran (it has facts, or a seal time): one awaiting its seal gets its rows from the seal.
    sealed = sa.or_(versions.c.sealed_at.isnot(None),
                    sa.exists().where(facts.c.version_id == versions.c.id))
    after = 0
    while True:
        ids = list(conn.scalars(sa.select(versions.c.id).where(versions.c.id > after, sealed)
                                .order_by(versions.c.id).limit(BATCH)))
        if not ids:
            return
        after = ids[-1]
        listed: dict[int, list[FileEntry]] = {i: [] for i in ids}
        unstored: set[int] = set()
        for version_id, path, size, sha256 in conn.execute(
                sa.select(files.c.version_id, files.c.path, files.c.size, files.c.sha256)
                .where(files.c.version_id.in_(ids))):
            if sha256 is None:
                unstored.add(version_id)
            else:
                listed[version_id].append(FileEntry(path, size, sha256))
        parts = {version_id: (doc or {}).get("parts") or {} for version_id, doc in conn.execute(
            sa.select(facts.c.version_id, facts.c.facts).where(facts.c.version_id.in_(ids)))}
        rows = [{"version_id": version_id, "name": c.name, "digest": c.digest, "member_count": len(c.members),
                 "members": [[m.path, m.sha256, m.part] for m in c.members], "detail": None}
                for version_id in ids if version_id not in unstored and listed[version_id]
                for c in unit_components(listed[version_id], parts.get(version_id) or {})]
        if rows:
            conn.execute(components.insert(), rows)


def downgrade() -> None:
    op.drop_index("ix_version_components_digest_id", table_name="version_components")
    op.drop_table("version_components")
