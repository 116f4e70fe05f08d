"""`modelreg login` against a real OpenID provider (npm's oidc-provider) and a live registry.

The CLI prints the provider's URL and waits on its loopback listener; the test plays the browser with httpx
(the provider's own login and consent forms), which the provider redirects to that listener. The token the
registry answers is kept 0600 in the config dir, and later commands use it without ``--token``. carol, in no
mapped group, is refused in one line and nothing is kept.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from pydantic import SecretStr

from api.app import create_app
from tests.support.console import person
from tests.support.live_app import serve_in_thread
from tests.support.oidc import CLI_CLIENT, CONSOLE_CLIENT, log_in, start_provider
from tests.support.server import MODELREG

URL_LINE = re.compile(r"at: (http\S+)")


@pytest.fixture(scope="module")
def provider():
    with start_provider([CONSOLE_CLIENT, CLI_CLIENT]) as p:
        yield p


@pytest.fixture
def settings(settings, provider):
    return settings.model_copy(update={
        "oidc_issuer": provider.issuer, "oidc_client_id": CONSOLE_CLIENT["client_id"],
        "oidc_client_secret": SecretStr(CONSOLE_CLIENT["client_secret"]), "oidc_cli_client_id": "modelreg-cli",
        "oidc_group_roles": {"security-approvers": {"tenant": "acme", "role": "approver", "capacity": "security"}},
        "oidc_cli_token_minutes": 30})


def login_as(url: str, user: str, config_dir) -> subprocess.CompletedProcess:
    env = {**os.environ, "MODELREG_CONFIG_DIR": str(config_dir)}
    env.pop("MODELREG_TOKEN", None)
    proc = subprocess.Popen([MODELREG, "login", "--url", url, "--no-browser", "--timeout", "60", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stderr.readline()
        found = URL_LINE.search(line)
        assert found, line + proc.stderr.read()
        authorize = found.group(1)
        assert parse_qs(urlsplit(authorize).query)["code_challenge_method"] == ["S256"]
        redirect = parse_qs(urlsplit(authorize).query)["redirect_uri"][0]
        with httpx.Client(timeout=20) as browser:
            landed = browser.get(log_in(browser, authorize, user, stop_at=redirect))
            assert landed.status_code == 200 and "Signed in" in landed.text
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, line + err)


def test_login_keeps_a_short_lived_token_that_later_commands_use(container, tmp_path):
    person(container, "root", "acme")
    with serve_in_thread(create_app(container)) as url:
        done = login_as(url, "alice", tmp_path / "cfg")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["principal"] == "alice"
        kept = tmp_path / "cfg" / "logins.json"
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        entry = json.loads(kept.read_text())[url]
        assert entry["token"].startswith("mr_") and entry["principal"] == "alice"
        env = {**os.environ, "MODELREG_CONFIG_DIR": str(tmp_path / "cfg")}
        env.pop("MODELREG_TOKEN", None)
        me = subprocess.run([MODELREG, "whoami", "--url", url, "--json"], capture_output=True, text=True, env=env,
                            timeout=60)
        assert me.returncode == 0, me.stderr
        assert json.loads(me.stdout)["name"] == "alice"
        assert json.loads(me.stdout)["roles"]["acme"] == [{"role": "approver", "capacity": "security"}]


def test_login_of_a_user_in_no_mapped_group_is_refused_in_one_line(container, tmp_path):
    person(container, "root", "acme")
    with serve_in_thread(create_app(container)) as url:
        done = login_as(url, "carol", tmp_path / "cfg")
    assert done.returncode != 0
    assert "in no group this registry maps to a role" in done.stderr
    assert not (tmp_path / "cfg" / "logins.json").exists()


def test_a_made_up_code_is_refused_as_a_problem_and_not_audited(container):
    from fastapi.testclient import TestClient
    from sqlalchemy import select

    from registry.db.models import AuditEvent

    with TestClient(create_app(container)) as client:
        r = client.post("/v1/auth/oidc/token", json={"code": "made-up", "code_verifier": "v" * 43,
                                                     "redirect_uri": "http://127.0.0.1:9/callback", "nonce": "n" * 16})
        assert r.status_code == 401 and r.json()["type"].endswith("sign-in-refused"), r.text
        assert "refused the authorization code" in r.json()["detail"]
        r = client.post("/v1/auth/oidc/token", json={"code": "c", "code_verifier": "v" * 43,
                                                     "redirect_uri": "http://evil.example/callback", "nonce": "n" * 16})
        assert r.status_code == 422, r.text
    with container.session_factory() as session:
        assert session.scalars(select(AuditEvent).where(AuditEvent.action == "auth.oidc_refused")).all() == []
