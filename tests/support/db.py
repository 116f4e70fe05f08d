"""Test databases: a fresh PostgreSQL database per run, and a migrated SQLite file copied per test.

Both schemas come from ``alembic upgrade head``, never ``create_all``. Test databases on PostgreSQL commit
without waiting for the WAL flush (``synchronous_commit = off``, set on the database, so the API and worker
processes a test starts get it too): a commit stays atomic and ordered, only a crash of the PostgreSQL server
itself could lose the last ones, which no test does. It saves about 2 ms per commit (``fsync`` on this disk).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

from registry.db import migrate
from registry.db.models import Base
from registry.db.session import make_engine

PG_ADMIN_URL = os.environ.get("MODELREG_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _psycopg_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def admin_dsn() -> str:
    """The DSN of the PostgreSQL server's maintenance database, for CREATE and DROP DATABASE."""
    return _psycopg_dsn(PG_ADMIN_URL)


def create_pg_database() -> str:
    """Create and migrate a fresh database beside ``PG_ADMIN_URL``; return its URL."""
    name = f"modelreg_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(_psycopg_dsn(PG_ADMIN_URL), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        no_flush_wait(conn, name)
    url = make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    return url


def no_flush_wait(conn: psycopg.Connection, database: str) -> None:
    """Connections to ``database`` commit without waiting for the WAL flush (see the module's comment)."""
    conn.execute(f'ALTER DATABASE "{database}" SET synchronous_commit = off')


def drop_pg_database(url: str) -> None:
    name = make_url(url).database
    with psycopg.connect(_psycopg_dsn(PG_ADMIN_URL), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def truncate_all(url: str) -> None:
    """Empty every table and restart its ids between tests (real commits by workers make rollback useless).

    ``DELETE`` rather than ``TRUNCATE``: a test leaves a few rows in a few of the 40-odd tables, and
    ``TRUNCATE`` gives every table and index a new file (0.3 to 0.6 s each time, against 5 to 12 ms). Foreign
    keys are not checked meanwhile (``session_replication_role``; the tests' role is a superuser), so the
    order does not matter; only the sequences a test used are restarted (``last_value`` is set)."""
    tables = [t.name for t in Base.metadata.sorted_tables]
    with psycopg.connect(_psycopg_dsn(url)) as conn, conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        for table in reversed(tables):
            conn.execute(f'DELETE FROM "{table}"')
        used = conn.execute(
            "SELECT format('%I.%I', schemaname, sequencename), start_value FROM pg_sequences "
            "WHERE last_value IS NOT NULL").fetchall()
        for sequence, start in used:
            conn.execute("SELECT setval(%s::regclass, %s, false)", (sequence, start))


def create_sqlite_template(directory: Path) -> Path:
    path = directory / "template.db"
    engine = make_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    engine.dispose()
    return path


def sqlite_copy(template: Path, directory: Path) -> str:
    target = directory / "registry.db"
    shutil.copyfile(template, target)
    return f"sqlite:///{target}"
