"""Revision 0030 renames ``hf_downloads`` to ``downloads``: every row survives the upgrade with its channel, and
the downgrade gives them back (on SQLite and on PostgreSQL, with rows in the table)."""

from __future__ import annotations

import datetime as dt

from alembic import command
from sqlalchemy import inspect, select, text
from sqlalchemy.orm import Session

from registry.db import migrate
from registry.db.models import Download
from registry.db.session import make_engine

NOW = "2026-11-01 00:00:00"
ROWS = [  # version_id, principal, day, channel, count
    (1, "trainer", "2026-11-01", "hf", 3),
    (1, "node-1", "2026-11-01", "oci", 2),
    (1, "node-1", "2026-11-01", "hf", 1),
    (2, "trainer", "2026-11-02", "hf", 7),
]


def _downgrade(engine, revision: str) -> None:
    config = migrate.alembic_config(str(engine.url))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)


def test_0030_keeps_every_download_with_its_channel(empty_database_url):
    engine = make_engine(empty_database_url)
    try:
        migrate.upgrade(engine, "0029")
        with engine.begin() as conn:
            for statement in [
                "INSERT INTO tenants (id, name, created_at) VALUES (1, 'acme', :now)",
                "INSERT INTO models (id, tenant_id, name, next_version, created_at) VALUES (1, 1, 'llm', 3, :now)",
                "INSERT INTO versions (id, model_id, number, state, source_kind, source_repo, include, exclude, "
                "created_at, updated_at) VALUES (1, 1, 1, 'approved', 'upload', 'x', '[]', '[]', :now, :now), "
                "(2, 1, 2, 'approved', 'upload', 'x', '[]', '[]', :now, :now)",
            ]:
                conn.execute(text(statement), {"now": NOW})
            for version_id, principal, day, channel, count in ROWS:
                conn.execute(text("INSERT INTO hf_downloads (version_id, principal, day, channel, count, first_at, "
                                  "last_at) VALUES (:v, :p, :d, :c, :n, :now, :now)"),
                             {"v": version_id, "p": principal, "d": day, "c": channel, "n": count, "now": NOW})

        migrate.upgrade(engine)
        tables = set(inspect(engine).get_table_names())
        assert "downloads" in tables and "hf_downloads" not in tables
        with Session(engine) as session:
            found = sorted((d.version_id, d.principal, d.day.isoformat(), d.channel, d.count)
                           for d in session.scalars(select(Download)))
            first = session.scalars(select(Download).limit(1)).one()
        assert found == sorted(ROWS)
        assert first.first_at.replace(tzinfo=None) == dt.datetime(2026, 11, 1)

        _downgrade(engine, "0029")
        tables = set(inspect(engine).get_table_names())
        assert "hf_downloads" in tables and "downloads" not in tables
        with engine.connect() as conn:
            back = sorted(tuple(r) for r in conn.execute(text(
                "SELECT version_id, principal, day, channel, count FROM hf_downloads")))
        assert [(v, p, str(d), c, n) for v, p, d, c, n in back] == sorted(ROWS)
    finally:
        engine.dispose()
