"""`modelreg chunks backfill` against a registry's database and store (SQLite and PostgreSQL): versions
sealed before chunk digests were kept get them from the jobs it queues, once."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

from sqlalchemy import delete, select

from registry.db.models import BlobChunks, Version
from registry.domain.chunks import CHUNK_SIZE
from tests.support.registry import drain, make_admin
from tests.support.releases import awaiting_version
from tests.support.server import MODELREG


def test_backfill_queues_each_missing_list_once_and_the_workers_record_them(container, tmp_path, signing_key_pem):
    admin = make_admin(container, "acme")
    awaiting_version(container, admin, tmp_path / "v1", "acme", "llm", seed=1)
    with container.session_factory() as session:
        digests = {f.sha256 for f in session.scalars(select(Version)).one().files}
        session.execute(delete(BlobChunks))  # as sealed before the lists were recorded
        session.commit()
    settings = container.settings
    env = {**os.environ, "MODELREG_DATABASE_URL": settings.database_url,
           "MODELREG_BLOB_STORE_URL": settings.blob_store_url, "MODELREG_SIGNING_KEY_PEM": signing_key_pem,
           "MODELREG_DATA_DIR": str(settings.data_dir)}

    def backfill() -> dict:
        r = subprocess.run([MODELREG, "chunks", "backfill", "--json"], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path, env=env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    assert backfill() == {"queued": len(digests)}
    drain(container)
    with container.session_factory() as session:
        lists = {r.digest: r for r in session.scalars(select(BlobChunks))}
    assert set(lists) == digests
    for digest, row in lists.items():
        data = b"".join(container.blob_store.open_range(digest))
        assert row.chunk_size == CHUNK_SIZE
        assert row.digests == b"".join(hashlib.sha256(data[i:i + CHUNK_SIZE]).digest()
                                       for i in range(0, len(data), CHUNK_SIZE))
    assert backfill() == {"queued": 0}
    unknown = subprocess.run([MODELREG, "chunks", "backfill", "--data-dir", str(tmp_path / "nothing-here")],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path,
                             env={k: v for k, v in env.items() if k != "MODELREG_DATABASE_URL"})
    assert unknown.returncode != 0 and len(unknown.stderr.strip().splitlines()) == 1, unknown.stderr
