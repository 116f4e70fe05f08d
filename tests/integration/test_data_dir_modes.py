"""A fresh embedded data directory is the owner's alone: the directory 0700, the database 0600.

The database holds token hashes and the audit log; SQLite would create it (and its -wal and -shm)
with the umask's mode, 0644 under the common 0022.
"""

from __future__ import annotations

import os
import stat

import pytest

from registry.bootstrap import bootstrap, ensure_initial_admin, load_settings, prepare_embedded


@pytest.fixture
def permissive_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_serve_style_setup_of_a_fresh_data_dir_is_private(tmp_path, permissive_umask):
    data = tmp_path / "nested" / "data"
    settings = load_settings(data_dir=data)
    prepare_embedded(settings)
    container = bootstrap(settings, migrate=True)
    try:
        ensure_initial_admin(container)
        with container.engine.connect() as conn:  # the -wal and -shm exist while a connection is open
            conn.exec_driver_sql("SELECT 1")
            assert _mode(data) == 0o700
            for name in ("registry.db", "registry.db-wal", "registry.db-shm", "admin-token", "presign-secret",
                         "console-key"):
                assert _mode(data / name) == 0o600, name
    finally:
        container.dispose()


def test_migrate_of_a_fresh_data_dir_is_private(tmp_path, permissive_umask):
    from registry.cli import main

    data = tmp_path / "data"
    assert main(["migrate", "--data-dir", str(data), "--json"]) == 0
    assert _mode(data) == 0o700 and _mode(data / "registry.db") == 0o600


def test_an_existing_data_dir_keeps_its_mode(tmp_path, permissive_umask):
    data = tmp_path / "data"
    data.mkdir(mode=0o750)
    prepare_embedded(load_settings(data_dir=data))
    assert _mode(data) == 0o750
