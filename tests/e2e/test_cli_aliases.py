"""`modelreg promote`, `rollback`, `alias list` and `revoke` against a live API (SQLite and PostgreSQL).

Versions reach ``approved`` through ``approve_standin``, a stand-in for the approvals flow.
"""

from __future__ import annotations

import json
import os
import subprocess

from api.app import create_app
from tests.support.live_app import serve_in_thread
from tests.support.registry import make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version
from tests.support.server import MODELREG


def test_promote_canary_rollback_list_and_revoke_from_the_cli(container, tmp_path):
    admin = make_admin(container, "acme")
    for seed in (1, 2):
        awaiting_version(container, admin, tmp_path / f"v{seed}", "acme", "llm", seed=seed)
        approve_standin(container, "acme", "llm", seed)
    ml = role_token(container, "mia", "acme", "approver", "ml")
    security = role_token(container, "sam", "acme", "approver", "security")

    with serve_in_thread(create_app(container)) as url:
        def cli(*args: str, token: str = ml) -> subprocess.CompletedProcess:
            env = {**os.environ, "MODELREG_URL": url, "MODELREG_TOKEN": token}
            return subprocess.run([MODELREG, *args], capture_output=True, text=True, timeout=120,
                                  cwd=tmp_path, env=env)

        def ok(*args: str, token: str = ml):
            r = cli(*args, "--json", token=token)
            assert r.returncode == 0, r.stderr
            return json.loads(r.stdout)

        assert ok("promote", "acme/llm", "prod", "1", "--comment", "first")["version"] == 1
        moved = ok("promote", "acme/llm", "prod", "1", "--canary-version", "2", "--canary-tenant", "beta",
                   "--canary-tenant", "gamma", "--comment", "try 2")
        assert moved["canary"] == {"version": 2, "tenants": ["beta", "gamma"]}
        assert ok("promote", "acme/llm", "prod", "2")["canary"] is None
        back = ok("rollback", "acme/llm", "prod", "--comment", "2 is slow")
        assert (back["version"], back["canary"]["version"]) == (1, 2)
        listed = ok("alias", "list", "acme/llm")
        assert [(m["action"], m["to_version"], m["comment"]) for m in listed[0]["history"]] == [
            ("rollback", 1, "2 is slow"), ("promote", 2, ""), ("promote", 1, "try 2"),
            ("promote", 1, "first")]
        human = cli("alias", "list", "acme/llm")
        assert human.returncode == 0 and human.stdout.startswith("prod -> 1 (canary 2 for beta, gamma)")
        assert "rollback" in human.stdout and "by mia: 2 is slow" in human.stdout

        denied = cli("promote", "acme/llm", "prod", "2", token=security)
        assert denied.returncode == 1 and len(denied.stderr.strip().splitlines()) == 1
        assert "promotion-denied" in denied.stderr and "may not move alias prod" in denied.stderr
        usage = cli("promote", "acme/llm", "prod", "2", "--canary-tenant", "beta")
        assert usage.returncode == 1 and "go together" in usage.stderr

        revoked = ok("revoke", "acme/llm", "1", "--reason", "CVE-2099-7", token=security)
        assert revoked["state"] == "revoked" and revoked["revocation"]["reason"] == "CVE-2099-7"
        again = cli("promote", "acme/llm", "staging", "1")
        assert again.returncode == 1 and "version 1 is revoked" in again.stderr
        refused = cli("revoke", "acme/llm", "2", "--reason", "no", token=ml)
        assert refused.returncode == 1 and "permission-denied" in refused.stderr
