"""A real OpenID provider for the tests: ``oidc-provider`` (npm, a certified implementation) under Node, on loopback.

:func:`start_provider` installs it from the committed lockfile (``npm ci``) into
``tests/support/oidc_provider/node_modules`` when absent, then starts ``provider.mjs`` with the clients given.
A missing ``node`` or ``npm``, or a failed install, fails the test: it is never skipped.
:func:`start_provider`'s ``users`` adds users (a login, also its ``preferred_username``, and its groups);
:meth:`Provider.set_groups` moves one between groups while the provider runs.
:func:`log_in` drives the provider's devInteractions login and consent pages with httpx, as a browser would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from typing import Iterator
from urllib.parse import urljoin

import httpx
import pytest

from tests.support.interprocess import exclusive
from tests.support.server import free_port

HERE = Path(__file__).resolve().parent / "oidc_provider"

CONSOLE_CLIENT = {"client_id": "modelreg", "client_secret": "modelreg-console-secret-for-tests",
                  "redirect_uris": ["http://testserver/ui/sign-in/oidc/callback"],
                  "grant_types": ["authorization_code"], "response_types": ["code"]}
OTHER_CLIENT = {"client_id": "other-app", "client_secret": "other-app-secret-for-tests",
                "redirect_uris": ["http://127.0.0.1/other/callback"],
                "grant_types": ["authorization_code"], "response_types": ["code"]}
CLI_CLIENT = {"client_id": "modelreg-cli", "token_endpoint_auth_method": "none", "application_type": "native",
              "redirect_uris": ["http://127.0.0.1/callback"], "grant_types": ["authorization_code"],
              "response_types": ["code"]}


def ensure_installed() -> None:
    """``npm ci`` the provider once (the lockfile pins every package)."""
    with exclusive(HERE / "node_modules.lock"):
        if (HERE / "node_modules" / "oidc-provider" / "package.json").exists():
            return
        for tool in ("node", "npm"):
            if shutil.which(tool) is None:
                pytest.fail(f"the OIDC tests need `{tool}` on PATH (the provider is npm's oidc-provider)",
                            pytrace=False)
        done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=HERE, capture_output=True, text=True,
                              timeout=600)
        if done.returncode != 0:
            pytest.fail(f"npm ci of the test OIDC provider failed: {done.stderr[-2000:]}", pytrace=False)


@dataclass
class Provider:
    issuer: str
    users_file: Path

    def set_groups(self, user: str, groups: list[str]) -> None:
        """Put ``user`` in exactly ``groups`` from its next sign-in on (a new user if it was none)."""
        users = json.loads(self.users_file.read_text())
        users[user] = groups
        self.users_file.write_text(json.dumps(users))


@contextmanager
def start_provider(clients: list[dict], *, id_token_ttl: int = 3600,
                   users: dict[str, list[str]] | None = None) -> Iterator[Provider]:
    """Run the provider with ``clients`` (and ``users`` besides alice, bob and carol) until the block ends;
    yield its issuer URL."""
    ensure_installed()
    port = free_port()
    users_dir = tempfile.TemporaryDirectory(prefix="oidc-users-")
    users_file = Path(users_dir.name) / "users.json"
    users_file.write_text(json.dumps(users or {}))
    env = {**os.environ, "PORT": str(port), "OIDC_CLIENTS": json.dumps(clients), "ID_TOKEN_TTL": str(id_token_ttl),
           "OIDC_USERS_FILE": str(users_file)}
    proc = subprocess.Popen(["node", "provider.mjs"], cwd=HERE, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            line = proc.stdout.readline()
            if not line:
                pytest.fail(f"the OIDC provider exited: {''.join(lines)[-2000:]}", pytrace=False)
            lines.append(line)
            if line.startswith("listening "):
                break
            if time.monotonic() > deadline:
                pytest.fail("the OIDC provider did not start", pytrace=False)
        # Its log goes on to stderr, where a failing test shows it.
        threading.Thread(target=lambda: [sys.stderr.write(f"oidc-provider: {x}") for x in proc.stdout],
                         daemon=True).start()
        yield Provider(issuer=line.split()[1], users_file=users_file)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        users_dir.cleanup()


_FORM = re.compile(r'<form[^>]*action="([^"]+)"[^>]*>(.*?)</form>', re.S)
_INPUT = re.compile(r'<input([^>]*)>')
_ATTR = re.compile(r'(\w+)="([^"]*)"')


def log_in(browser: httpx.Client, authorize_url: str, user: str, *, stop_at: str) -> str:
    """Follow ``authorize_url`` at the provider as ``user`` (log in, consent) until a redirect to a URL starting
    with ``stop_at``; return that URL (the callback with ``code`` and ``state``), unfollowed."""
    url = authorize_url
    for _ in range(20):
        if url.startswith(stop_at):
            return url
        response = browser.get(url)
        if response.is_redirect:
            url = urljoin(url, response.headers["location"])
            continue
        forms = _FORM.findall(response.text)
        assert response.status_code == 200 and forms, f"unexpected provider page {response.status_code}: " \
                                                      f"{response.text[:500]}"
        action, body = forms[0]
        inputs = [dict(_ATTR.findall(tag)) for tag in _INPUT.findall(body)]
        data = {i["name"]: unescape(i.get("value", "")) for i in inputs if "name" in i}
        if "login" in data:
            data.update(login=user, password="any password")
        response = browser.post(urljoin(url, unescape(action)), data=data)
        assert response.is_redirect, f"the provider did not redirect after its form: {response.text[:500]}"
        url = urljoin(url, response.headers["location"])
    raise AssertionError("the provider never redirected back")
