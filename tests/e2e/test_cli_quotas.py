"""`modelreg quota`, `retention`, `usage` against a live API, and `modelreg gc` against the same database
and store (SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess

from sqlalchemy import select, update

from api.app import create_app
from registry.auth import issue_token
from registry.db.models import Blob, Principal, Version
from registry.evals.workdirs import eval_workdir
from tests.support.live_app import serve_in_thread
from tests.support.registry import make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version
from tests.support.server import MODELREG


def test_quota_retention_usage_and_gc_from_the_cli(container, tmp_path, signing_key_pem):
    admin = make_admin(container, "acme")
    for seed in (1, 2, 3):
        awaiting_version(container, admin, tmp_path / f"v{seed}", "acme", "llm", seed=seed)
        approve_standin(container, "acme", "llm", seed)
    with container.session_factory() as session:
        root = issue_token(session, session.scalars(select(Principal).where(Principal.name == admin.name)).one())
        session.commit()
    tadmin = role_token(container, "tad", "acme", "admin")
    auditor = role_token(container, "aud", "acme", "auditor")
    submitter = role_token(container, "sub", "acme", "submitter")
    settings = container.settings
    server_env = {"MODELREG_DATABASE_URL": settings.database_url, "MODELREG_BLOB_STORE_URL": settings.blob_store_url,
                  "MODELREG_SIGNING_KEY_PEM": signing_key_pem, "MODELREG_DATA_DIR": str(settings.data_dir),
                  "MODELREG_EVAL_WORK_DIR": str(tmp_path / "evals")}

    with serve_in_thread(create_app(container)) as url:
        def cli(*args: str, token: str = tadmin) -> subprocess.CompletedProcess:
            env = {**os.environ, **server_env, "MODELREG_URL": url, "MODELREG_TOKEN": token}
            return subprocess.run([MODELREG, *args], capture_output=True, text=True, timeout=120,
                                  cwd=tmp_path, env=env)

        def ok(*args: str, token: str = tadmin):
            r = cli(*args, "--json", token=token)
            assert r.returncode == 0, r.stderr
            return json.loads(r.stdout)

        # Quotas: administrators set them, readers see them; over the quota is one readable line.
        used = ok("quota", "show", "acme", token=submitter)["used"]
        assert ok("quota", "set", "acme", str(used + 10), token=root.token)["limit"] == used + 10
        refused = cli("quota", "set", "acme", "5")
        assert refused.returncode == 1 and "permission-denied" in refused.stderr
        big = tmp_path / "big"
        big.mkdir()
        (big / "w.bin").write_bytes(b"w" * 100)
        over = cli("submit", str(big), "--model", "acme/llm", token=submitter)
        # The CLI uploads the directory: the upload is refused before its bytes are read, in one error line.
        errors = [line for line in over.stderr.splitlines() if line.startswith("error:")]
        assert over.returncode == 1 and len(errors) == 1, over.stderr
        assert "quota-exceeded" in over.stderr and f"{used} of {used + 10} bytes used, 100 more needed" in over.stderr
        assert ok("quota", "set", "acme", "2G", token=root.token)["limit"] == 2 * 1024 ** 3
        assert ok("quota", "set", "acme", "none", token=root.token)["limit"] is None
        assert cli("quota", "set", "acme", "lots", token=root.token).returncode == 1

        # Retention: keep the last one; 1 and 2 go, their audit trail stays.
        shown = ok("retention", "show", "acme/llm", token=submitter)
        assert shown["rule"] is None and shown["deleted"] == []
        planned = ok("retention", "set", "acme/llm", "--keep-last", "1")
        assert planned["deleted"] == [1, 2]
        assert cli("retention", "apply", "acme/llm", token=submitter).returncode == 1
        applied = ok("retention", "apply", "acme/llm")
        assert applied["deleted"] == [1, 2] and [k["version"] for k in applied["kept"]] == [3]
        human = cli("retention", "show", "acme/llm")
        assert human.returncode == 0
        assert "keep the last 1" in human.stdout and "apply would delete: none" in human.stdout

        # Usage: auditors and tenant administrators.
        usage = ok("usage", "--tenant", "acme", "--since", "2020-01-01T00:00:00Z", token=auditor)
        assert [v["deleted"] for v in usage["stored"]["models"][0]["versions"]] == [True, True, False]
        assert usage["mirrored"]["bytes"] > 0
        assert cli("usage", "--tenant", "acme", token=submitter).returncode == 1
        naive = cli("usage", "--tenant", "acme", "--since", "2020-01-01T00:00:00", token=auditor)
        assert naive.returncode == 1 and "time zone" in naive.stderr

    # gc: blobs only versions 1 and 2 used go once past the grace period; version 3's stay.
    with container.session_factory() as session:
        three = {f.sha256 for f in session.scalars(select(Version).where(Version.number == 3)).one().files}
        before = set(session.scalars(select(Blob.digest)))
    # gc also sweeps the eval root it is configured with: a killed run's copy goes, a live run's stays.
    evals = tmp_path / "evals"
    killed = evals / "eval-00000000000000aa"
    (killed / "model").mkdir(parents=True)
    (evals / "eval-00000000000000aa.lock").touch()
    with eval_workdir(evals) as live:
        young = cli("gc", "--json")
        assert young.returncode == 0, young.stderr
        assert live.is_dir()
    assert json.loads(young.stdout)["deleted"] == 0
    assert json.loads(young.stdout)["eval_dirs_swept"] == 1 and not killed.exists()
    with container.session_factory() as session:
        session.execute(update(Blob).values(last_used_at=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=2)))
        session.commit()
    swept = cli("gc", "--grace-hours", "24", "--json")
    report = json.loads(swept.stdout)
    assert set(report) >= {"swept", "deleted", "deleted_bytes", "kept_referenced", "kept_young", "orphans_deleted"}
    with container.session_factory() as session:
        after = set(session.scalars(select(Blob.digest)))
    assert report["deleted"] == len(before - after) > 0 and three <= after
    assert all(container.blob_store.exists(d) for d in three)
    assert not any(container.blob_store.exists(d) for d in before - after)
