"""Incident response as an administrator does it: `modelreg principal disable/enable/tokens/revoke-token/revoke`
against a real `modelreg serve` (two worker processes, so no answer comes from one process's memory)."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.support.server import start_server

CSRF_RE = re.compile(r'name="csrf" value="([^"]*)"')


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("incident") / "data")
    s.cli("tenant", "create", "team", check=True)
    for name in ("eve", "bob"):
        s.cli("principal", "create", name, check=True)
        s.cli("principal", "grant", name, "--tenant", "team", "--role", "approver", "--capacity", "security",
              check=True)
    yield s
    s.stop()


def token_of(server, name: str) -> dict:
    return json.loads(server.cli("principal", "token", name, "--json", check=True).stdout)


def whoami(server, token: str) -> int:
    return httpx.get(server.url + "/v1/whoami", headers={"Authorization": f"Bearer {token}"}).status_code


def events(server, action: str) -> list[dict]:
    r = httpx.get(server.url + "/v1/audit/events", params={"limit": 1000},
                  headers={"Authorization": f"Bearer {server.admin_token}"})
    assert r.status_code == 200, r.text
    return [e for e in r.json() if e["action"] == action]


def console(server, token: str) -> httpx.Client:
    """A browser signed in to the console with ``token``."""
    browser = httpx.Client(base_url=server.url)
    page = browser.get("/ui/sign-in")
    r = browser.post("/ui/sign-in", data={"token": token, "csrf": CSRF_RE.search(page.text).group(1), "next": "/ui"})
    assert r.status_code == 303, r.text
    assert browser.get("/ui/approvals").status_code == 200
    return browser


def test_disable_refuses_every_token_at_once_and_ends_console_sessions_for_good(server):
    first, second = token_of(server, "eve")["token"], token_of(server, "eve")["token"]
    browser = console(server, first)
    assert whoami(server, first) == 200 and whoami(server, second) == 200
    result = server.cli("principal", "disable", "eve", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["disabled"] is True
    # Every request after, on either worker: each token refused, the console session gone.
    assert [whoami(server, t) for t in (first, second) * 3] == [401] * 6
    refused = server.cli("whoami", token=first)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert browser.get("/ui/approvals").status_code == 303
    event = events(server, "principal.disabled")[-1]
    assert event["subject"] == "principal/eve" and event["details"]["console_sessions_ended"] == 1
    # Enabled again, the tokens work; the session that was open stays ended.
    enabled = server.cli("principal", "enable", "eve", "--json", check=True)
    assert json.loads(enabled.stdout)["disabled"] is False
    assert whoami(server, first) == 200
    assert browser.get("/ui/approvals").status_code == 303
    assert events(server, "principal.enabled")[-1]["subject"] == "principal/eve"


def test_tokens_lists_without_secrets_and_revoke_token_refuses_that_one(server):
    kept, revoked = token_of(server, "bob"), token_of(server, "bob")
    browser = console(server, revoked["token"])
    listed = json.loads(server.cli("principal", "tokens", "bob", "--json", check=True).stdout)
    assert {revoked["id"], kept["id"]} <= {t["id"] for t in listed}
    assert all("token" not in t and t["prefix"] for t in listed)
    assert revoked["token"] not in server.cli("principal", "tokens", "bob", check=True).stdout
    result = server.cli("principal", "revoke-token", str(revoked["id"]), "--json")
    assert result.returncode == 0 and json.loads(result.stdout) == {"revoked": True, "token_id": revoked["id"]}
    assert whoami(server, revoked["token"]) == 401 and whoami(server, kept["token"]) == 200
    assert browser.get("/ui/approvals").status_code == 303
    listed = {t["id"]: t for t in json.loads(server.cli("principal", "tokens", "bob", "--json", check=True).stdout)}
    assert listed[revoked["id"]]["revoked_at"] and not listed[kept["id"]]["revoked_at"]
    assert events(server, "token.revoked")[-1]["details"] == {"token_id": revoked["id"], "console_sessions_ended": 1}


def test_revoke_takes_a_role_back(server):
    server.cli("principal", "create", "ann", check=True)
    server.cli("principal", "grant", "ann", "--tenant", "team", "--role", "auditor", check=True)
    token = token_of(server, "ann")["token"]
    result = server.cli("principal", "revoke", "ann", "--tenant", "team", "--role", "auditor", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["revoked"] is True
    me = json.loads(server.cli("whoami", "--json", token=token, check=True).stdout)
    assert me["roles"] == {}
    assert events(server, "role.revoked")[-1]["subject"] == "principal/ann"
    again = server.cli("principal", "revoke", "ann", "--tenant", "team", "--role", "auditor")
    assert again.returncode == 1 and "has no role" in again.stderr


@pytest.mark.parametrize("args, says", [
    (("principal", "disable", "nobody"), "does not exist"),
    (("principal", "enable", "nobody"), "does not exist"),
    (("principal", "tokens", "nobody"), "does not exist"),
    (("principal", "revoke-token", "999999"), "does not exist"),
    (("principal", "revoke-token", "0"), ""),
    (("principal", "revoke-token", "x"), ""),
    (("principal", "disable", "admin"), "cannot disable yourself"),
])
def test_bad_requests_exit_non_zero_in_one_line(server, args, says):
    result = server.cli(*args)
    assert result.returncode != 0 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert says in result.stderr


def test_only_an_administrator_may(server):
    token = token_of(server, "bob")["token"]
    for args in (("principal", "disable", "eve"), ("principal", "enable", "eve"), ("principal", "tokens", "eve"),
                 ("principal", "revoke-token", "1"),
                 ("principal", "revoke", "eve", "--tenant", "team", "--role", "approver", "--capacity", "security")):
        result = server.cli(*args, token=token)
        assert result.returncode == 1 and "not an administrator" in result.stderr, (args, result.stderr)
    assert whoami(server, token) == 200
    me = httpx.get(server.url + "/v1/principals/eve", headers={"Authorization": f"Bearer {server.admin_token}"})
    assert me.json()["disabled"] is False and me.json()["roles"]
