"""Seeded worlds: a module's starting state built once per worker and database, copied for each test.

A module whose tests all begin from the same registry state (versions through the real pipeline,
approvals, aliases, tokens) marks itself with its builder::

    def build(container, root):        # root: a directory the builder may write its model sources in
        admin = make_admin(container, "acme")
        awaiting_version(container, admin, root / "v1", "acme", "llm")
        return {"admin": admin, "node": role_token(container, "nod", "acme", "node")}

    pytestmark = pytest.mark.seeded(builder=build)

and asks for the ``seeded`` fixture (what ``build`` returned, deep-copied for the test) beside ``container``.
The first test of the module on each database runs ``build`` against a database and blob directory of its own;
every test then gets a fresh copy: the SQLite file copied, a PostgreSQL ``CREATE DATABASE ... TEMPLATE``, and
the blob, data and source directories copied into its ``tmp_path`` (real copies, not links: a test that tampers
with a blob in place must not reach the next test's). Nothing a test can change is shared. A test on
``store_container``'s SeaweedFS bucket starts from its own world, whose blobs were written to a bucket of
its own; the test's fresh bucket gets a copy of every object.
"""

from __future__ import annotations

import copy
import queue
import shutil
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import psycopg
from sqlalchemy.engine import make_url

from tests.support import db as dbsupport

Builder = Callable[[Any, Path], Any]
SQLITE_FILE = "registry.db"  # what dbsupport.sqlite_copy writes


@dataclass
class Built:
    root: Path          # where the builder's blobs, data and sources live
    database: str       # the SQLite file, or the PostgreSQL template database's URL
    value: Any          # what the builder returned
    bucket: str | None  # the SeaweedFS bucket holding its blobs, for a test on ``store_container``'s s3


_BUILT: dict[tuple[str, str, str], Built] = {}  # (builder, database kind, blob store)


def database_for_test(request, builder: Builder, kind: str, tmp_path: Path) -> str:
    """A database URL holding the seeded world for this test (built first if this worker has none yet).

    Everything the builder wrote under its root (the blob and data directories, the model sources it
    submitted) is copied to the same place under ``tmp_path``."""
    built = _world(request, builder, kind)
    for entry in built.root.iterdir():
        if entry.name == SQLITE_FILE:
            continue
        if entry.is_dir():
            shutil.copytree(entry, tmp_path / entry.name, symlinks=True)
        else:
            shutil.copy2(entry, tmp_path / entry.name)
    if kind == "sqlite":
        return dbsupport.sqlite_copy(Path(built.database), tmp_path)
    return _pg_copy(built.database)


def bucket_for_test(request) -> str | None:
    """The bucket of the seeded world this test starts from, when it runs on the S3 blob store (else None)."""
    marker = request.node.get_closest_marker("seeded")
    if marker is None or "seeded" not in request.fixturenames:
        return None
    kind = "postgres" if request.node.callspec.params["database_url"] == "postgres" else "sqlite"
    return _world(request, marker.kwargs["builder"], kind).bucket


def value_for_test(request, builder: Builder, kind: str) -> Any:
    """What the builder returned, deep-copied: a test may change its own copy."""
    return copy.deepcopy(_world(request, builder, kind).value)


def drop_copy(url: str) -> None:
    """Drop a PostgreSQL copy made by ``database_for_test`` (SQLite copies go with ``tmp_path``).

    The drop runs on this process's dropper thread: ``DROP DATABASE`` waits 0.5 to 1 s on the server (every
    backend must let go of the files), time the next test need not spend. Nothing uses the copy afterwards."""
    if url.startswith("postgresql"):
        _dropper().put(url)


def drop_templates() -> None:
    """Drop this process's PostgreSQL template databases, once its copies are dropped (end of the session)."""
    global _DROPS
    if _DROPS is not None:
        _DROPS.put(None)
        _DROPS.join()
        _DROPS = None
    for key, built in list(_BUILT.items()):
        if key[1] == "postgres":
            dbsupport.drop_pg_database(built.database)
        del _BUILT[key]
    if _DROP_FAILURES:
        raise RuntimeError(f"world copies not dropped: {_DROP_FAILURES}")


_DROPS: queue.Queue | None = None
_DROP_FAILURES: list[str] = []


def _dropper() -> queue.Queue:
    global _DROPS
    if _DROPS is None:
        _DROPS = queue.Queue()
        threading.Thread(target=_drop_each, args=(_DROPS,), name="world-copy-dropper", daemon=True).start()
    return _DROPS


def _drop_each(drops: queue.Queue) -> None:
    while True:
        url = drops.get()
        try:
            if url is None:
                return
            dbsupport.drop_pg_database(url)
        except Exception as exc:  # noqa: BLE001 (reported at the end of the session, the thread goes on)
            _DROP_FAILURES.append(f"{url}: {exc}")
        finally:
            drops.task_done()


def _store(request) -> str:
    """The blob store the test runs on: ``store_container``'s parameter, else the local directory."""
    callspec = getattr(request.node, "callspec", None)
    return callspec.params.get("store_container", "local") if callspec is not None else "local"


def _world(request, builder: Builder, kind: str) -> Built:
    store = _store(request)
    key = (f"{builder.__module__}.{builder.__qualname__}", kind, store)
    if key not in _BUILT:
        _BUILT[key] = _build(request, builder, kind, store)
    return _BUILT[key]


def _build(request, builder: Builder, kind: str, store: str) -> Built:
    from registry.bootstrap import bootstrap
    from tests.support.registry import make_settings

    root = request.getfixturevalue("tmp_path_factory").mktemp(f"world-{builder.__module__.rpartition('.')[2]}")
    if kind == "sqlite":
        database = dbsupport.sqlite_copy(request.getfixturevalue("sqlite_template"), root)
    else:
        database = dbsupport.create_pg_database()
    container = bootstrap(make_settings(root, database, request.getfixturevalue("signing_key_pem")))
    bucket = None
    if store == "s3":
        server = request.getfixturevalue("s3_server")
        bucket = f"w-{uuid.uuid4().hex[:20]}"
        server.client().create_bucket(Bucket=bucket)
        container.__dict__["blob_store"] = server.blob_store(bucket)
    try:
        value = builder(container, root)
    finally:
        container.dispose()
    if kind == "sqlite":
        database = make_url(database).database
    return Built(root, database, value, bucket)


def _pg_copy(template_url: str) -> str:
    name = f"modelreg_test_copy_{uuid.uuid4().hex[:12]}"
    template = make_url(template_url).database
    with psycopg.connect(dbsupport.admin_dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        dbsupport.no_flush_wait(conn, name)
    return make_url(template_url).set(database=name).render_as_string(hide_password=False)
