"""Test databases: a fresh PostgreSQL database per run, and a migrated SQLite file copied per test.

Both schemas come from ``alembic upgrade head``, never ``create_all``.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import psycopg
from sqlalchemy import text
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
    url = make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    engine = make_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    return url


def drop_pg_database(url: str) -> None:
    name = make_url(url).database
    with psycopg.connect(_psycopg_dsn(PG_ADMIN_URL), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def truncate_all(url: str) -> None:
    """Empty every table (ids restart) between tests; real commits by workers make rollback useless."""
    engine = make_engine(url)
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    engine.dispose()


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
