"""The console's sessions through the app: sign-in and its cookie, CSRF on the sign-in and sign-out forms, a
session never outliving its token, forged cookies, the security headers and a next path that stays inside.
A real app over a real database (SQLite and PostgreSQL), driven by Starlette's TestClient."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from fastapi.testclient import TestClient

from registry.auth import issue_token, load_principal
from registry.db.models import ConsoleSession, Principal
from registry.services import identity
from tests.support.console import build_console_world, cookie_header, csrf_of, sign_in

pytestmark = pytest.mark.seeded(builder=build_console_world)


def test_sign_in_sets_a_session_cookie_httponly_strict_and_expiring(client, world):
    r = sign_in(client, world["tokens"]["sec"], "/ui/approvals")
    assert r.status_code == 303 and r.headers["location"] == "/ui/approvals"
    cookie = cookie_header(r, "mr_session").lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
    assert "max-age=" in cookie and "expires=" in cookie
    assert "secure" not in cookie.split(";")[1:].__str__()  # plain HTTP: a Secure cookie would never return
    # The cookie holds no token: only an id, an expiry, a nonce and a seal.
    value = cookie.split(";")[0].split("=", 1)[1]
    assert world["tokens"]["sec"].lower() not in value and "mr_" not in value
    page = client.get("/ui/approvals")
    assert page.status_code == 200 and "sec" in page.text


def test_behind_an_https_proxy_the_cookie_is_secure(client, world):
    page = client.get("/ui/sign-in", headers={"X-Forwarded-Proto": "https"})
    assert "; secure" in cookie_header(page, "mr_sign_in").lower()
    # The browser sends a Secure cookie back over HTTPS only: the whole sign-in, as it would be seen.
    tls = TestClient(client.app, base_url="https://testserver")
    r = sign_in(tls, world["tokens"]["sec"])
    assert r.status_code == 303
    assert "; secure" in cookie_header(r, "mr_session").lower()
    assert tls.get("/ui/approvals", follow_redirects=False).status_code == 200


def test_sign_in_needs_the_sign_in_forms_csrf_token(client, world):
    client.get("/ui/sign-in")
    r = client.post("/ui/sign-in", data={"token": world["tokens"]["sec"], "csrf": "0" * 64}, follow_redirects=False)
    assert r.status_code == 403 and "did not come from this console" in r.text
    assert "mr_session" not in r.headers.get("set-cookie", "")
    # Without the pre-session cookie the form's token checks against nothing.
    fresh = TestClient(client.app)
    token = csrf_of(client.get("/ui/sign-in").text)
    r = fresh.post("/ui/sign-in", data={"token": world["tokens"]["sec"], "csrf": token}, follow_redirects=False)
    assert r.status_code == 403


def test_a_second_sign_in_tab_does_not_void_the_first(client, world):
    first = csrf_of(client.get("/ui/sign-in").text)
    client.get("/ui/sign-in")
    r = client.post("/ui/sign-in", data={"token": world["tokens"]["sec"], "csrf": first}, follow_redirects=False)
    assert r.status_code == 303


@pytest.mark.parametrize("token", ["mr_" + "x" * 43, ""])
def test_a_bad_token_cannot_sign_in(client, world, token):
    r = sign_in(client, token)
    assert r.status_code == 401 and "not valid" in r.text
    assert client.get("/ui/approvals", follow_redirects=False).status_code == 303


def test_a_node_token_cannot_sign_in(client, world):
    r = sign_in(client, world["tokens"]["node"])
    assert r.status_code == 403 and "a node cannot sign in" in r.text
    assert "mr_session" not in r.headers.get("set-cookie", "")


def test_every_page_without_a_session_goes_to_sign_in(client, world):
    for path in ("/ui", "/ui/approvals", "/ui/audit", "/ui/provenance", "/ui/models/acme/tiny",
                 f"/ui/models/acme/tiny/versions/{world['number']}"):
        r = client.get(path, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/sign-in?next=/ui"), path
    r = client.post(f"/ui/models/acme/tiny/versions/{world['number']}/decision",
                    data={"decision": "approve", "capacity": "security"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/sign-in?next=/ui"


def test_a_session_never_outlives_its_token(client, world, container):
    with container.session_factory() as session:
        sec = session.query(Principal).filter_by(name="sec").one()
        short = issue_token(session, sec, expires_in=dt.timedelta(minutes=30)).token
        session.commit()
    r = sign_in(client, short)
    max_age = int(re.search(r"max-age=(\d+)", cookie_header(r, "mr_session").lower()).group(1))
    assert 0 < max_age <= 30 * 60


def test_a_forged_or_tampered_cookie_is_no_session(client, world):
    sign_in(client, world["tokens"]["sec"])
    value = client.cookies.get("mr_session")
    token_id, expiry, nonce, mac = value.split(".")
    # Another token's id, or a later expiry, under the same seal.
    client.cookies.clear()
    client.cookies.set("mr_session", value)
    assert client.get("/ui/approvals", follow_redirects=False).status_code == 200  # the genuine one, set so
    for forged in (f"{int(token_id) + 1}.{expiry}.{nonce}.{mac}", f"{token_id}.{int(expiry) + 3600}.{nonce}.{mac}"):
        client.cookies.clear()
        client.cookies.set("mr_session", forged)
        assert client.get("/ui/approvals", follow_redirects=False).status_code == 303


def test_a_revoked_token_ends_its_session(client, world, container):
    sign_in(client, world["tokens"]["sec"])
    assert client.get("/ui/approvals").status_code == 200
    session_id = int(client.cookies.get("mr_session").split(".")[0])
    with container.session_factory() as session:
        token_id = session.get(ConsoleSession, session_id).token_id
        identity.revoke_token(session, load_principal(Principal(id=0, name="root", is_admin=True)), token_id,
                              clock=container.clock)
    r = client.get("/ui/approvals", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/sign-in")


def test_an_expired_session_ends(client, world, container, monkeypatch):
    sign_in(client, world["tokens"]["sec"])
    later = container.clock.now() + dt.timedelta(hours=9)
    monkeypatch.setattr(container.clock, "now", lambda: later)
    assert client.get("/ui/approvals", follow_redirects=False).status_code == 303


def test_sign_out_ends_the_session_and_needs_its_csrf_token(client, world):
    sign_in(client, world["tokens"]["sec"])
    page = client.get("/ui/approvals")
    refused = client.post("/ui/sign-out", data={"csrf": "nope"}, follow_redirects=False)
    assert refused.status_code == 403
    assert client.get("/ui/approvals", follow_redirects=False).status_code == 200
    r = client.post("/ui/sign-out", data={"csrf": csrf_of(page.text)}, follow_redirects=False)
    assert r.status_code == 303 and 'mr_session=""' in cookie_header(r, "mr_session")
    assert client.get("/ui/approvals", follow_redirects=False).status_code == 303


def test_every_console_answer_carries_the_security_headers(client, world):
    sign_in(client, world["tokens"]["sec"])
    for path in ("/ui/sign-in", "/ui/approvals", f"/ui/models/acme/tiny/versions/{world['number']}",
                 "/ui/models/acme/nothing", "/ui/static/console.css", "/ui/models/ACME/x"):
        r = client.get(path)
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp, path
        assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff", path
    page = client.get("/ui/approvals").text
    # No inline script or handler: the only script is the console's file.
    assert re.findall(r"<script[^>]*>", page) == ['<script src="/ui/static/console.js" defer>']
    assert not re.search(r"\son[a-z]+=", page) and "style=" not in page
    assert "content-security-policy" not in client.get("/healthz").headers


def test_a_next_path_never_leaves_the_console(client, world):
    r = sign_in(client, world["tokens"]["sec"], "https://evil.example/")
    assert r.headers["location"] == "/ui"
    r = sign_in(client, world["tokens"]["sec"], "//evil.example/ui")
    assert r.headers["location"] == "/ui"
