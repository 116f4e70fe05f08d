"""Engines and sessions for PostgreSQL (psycopg 3) and SQLite (the embedded default)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker


def make_engine(url: str, **kwargs: Any) -> Engine:
    """Build an engine; SQLite gets WAL, a busy timeout and foreign keys on every connection.

    ``postgresql://`` URLs are routed to psycopg 3.
    """
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:" and not parsed.database.startswith("file:"):
            _create_private(Path(parsed.database))
        engine = create_engine(
            parsed, connect_args={"timeout": 30, "check_same_thread": False}, **kwargs
        )
        _configure_sqlite(engine)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(parsed, **kwargs)


def _create_private(path: Path) -> None:
    """Create an empty database file readable by its owner only, if there is none yet.

    SQLite would create it with the umask's mode (often 0644), and gives its ``-wal`` and ``-shm``
    files the mode of the database file, so creating it 0600 first keeps all three private.
    """
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # pysqlite's own transaction handling defers BEGIN; take control so that a claim can say
        # BEGIN IMMEDIATE and take the write lock before it reads.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql(conn.get_execution_options().get("sqlite_begin", "BEGIN"))


def make_session_factory(engine: Engine, info: dict[str, Any] | None = None) -> sessionmaker[Session]:
    """Sessions on ``engine``; each starts with a copy of ``info`` (settings that services read)."""
    return sessionmaker(engine, expire_on_commit=False, info=info)


@contextmanager
def one_statement_session(session_factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session for a read that is one statement (which sees one snapshot by itself): on PostgreSQL it
    runs outside a transaction (AUTOCOMMIT), so the read is one round trip, without BEGIN and ROLLBACK.
    Nothing may be written through it."""
    with session_factory() as session:
        if is_postgres(session):
            session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
        yield session


def is_postgres(session_or_engine: Session | Engine) -> bool:
    bind = session_or_engine.get_bind() if isinstance(session_or_engine, Session) else session_or_engine
    return bind.dialect.name == "postgresql"


def begin_write(session: Session) -> None:
    """Start the session's transaction as a writer.

    On SQLite a deferred transaction that reads and then writes fails at once ("database is
    locked") when another writer committed in between; ``BEGIN IMMEDIATE`` takes the write lock
    first. A read-only transaction already open is ended for that, so reads done before (say, a
    tenant looked up before a slow upstream call) never turn into a failing upgrade. PostgreSQL
    needs nothing here: callers lock the rows they depend on with ``FOR UPDATE``.

    Call it before the transaction's first write.

    Raises:
        RuntimeError: the session holds pending changes (ending the transaction would lose them).
    """
    if is_postgres(session):
        return
    if session.in_transaction():
        if session.new or session.dirty or session.deleted:
            raise RuntimeError("begin_write called with changes pending in this session")
        session.rollback()
    session.connection(execution_options={"sqlite_begin": "BEGIN IMMEDIATE"})



def lock_digest(session: Session, lock_class: int, digest: str) -> None:
    """Take the ``lock_class`` lock of ``digest`` until the transaction ends.

    PostgreSQL: an advisory transaction lock keyed (class, the digest's first 32 bits). SQLite: nothing
    to do, its one writer at a time (``begin_write``) is the same lock.
    """
    if is_postgres(session):
        key = int.from_bytes(bytes.fromhex(digest[:8]), "big", signed=True)
        session.execute(text("SELECT pg_advisory_xact_lock(:c, :k)"), {"c": lock_class, "k": key})
