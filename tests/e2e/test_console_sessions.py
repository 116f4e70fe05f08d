"""Console sessions end server-side, hostile cookie and CSRF values are refused in words, and every console
form refuses a missing, stale or foreign CSRF token.

The form list is generated from the router: every POST route under ``/ui`` must have an entry in ``FORMS``
(how to post it validly), so a new form is covered or fails the test for lack of one.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass
from typing import Callable
from urllib.parse import quote

import httpx
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.routers import ui
from registry.auth import authenticate
from registry.db.models import Approval, AuditEvent, ConsoleSession, Principal
from registry.domain.aliases import make_target
from registry.services import aliases
from tests.support.console import awaiting_upload, csrf_of, person, sign_in
from tests.support.live_app import serve_in_thread
from tests.support.tiny_model import tiny_model_files

REFUSED = "did not come from this console"


def build_world(container, root):
    """Tenant ``acme``: a submitter, a security and an ml approver, an auditor; an administrator; ``acme/tiny``
    version 1 awaiting approval."""
    tokens = {
        "sam": person(container, "sam", "acme", ("submitter", "")),
        "sec": person(container, "sec", "acme", ("approver", "security")),
        "mia": person(container, "mia", "acme", ("approver", "ml")),
        "aud": person(container, "aud", "acme", ("auditor", "")),
        "root": person(container, "root", "acme"),
    }
    with container.session_factory() as session:
        session.query(Principal).filter_by(name="root").update({"is_admin": True})
        session.commit()
        sam = authenticate(session, tokens["sam"])
    number = awaiting_upload(container, sam, "acme", "tiny", tiny_model_files(3))
    return {"tokens": tokens, "number": number, "sam": sam}


pytestmark = pytest.mark.seeded(builder=build_world)


@pytest.fixture
def world(seeded):
    return seeded


@pytest.fixture
def client(container):
    with TestClient(create_app(container), raise_server_exceptions=False) as c:
        yield c


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def approvals(container) -> int:
    with container.session_factory() as session:
        return session.query(Approval).count()


def audited(container) -> int:
    with container.session_factory() as session:
        return session.query(AuditEvent).count()


def decision_url(world) -> str:
    return f"/ui/models/acme/tiny/versions/{world['number']}/decision"


def recorded_form(client, world) -> tuple[str, str]:
    """Sign in as the security approver; the session cookie and the CSRF token of the version page's form."""
    sign_in(client, world["tokens"]["sec"])
    page = client.get(f"/ui/models/acme/tiny/versions/{world['number']}")
    return client.cookies.get("mr_session"), csrf_of(page.text)


def replay(client, world, cookie: str, csrf: str):
    """Another browser posting a recorded cookie and CSRF token to the approve form."""
    attacker = TestClient(client.app)
    attacker.cookies.set("mr_session", cookie, path="/ui")
    return attacker.post(decision_url(world), data={"csrf": csrf, "decision": "approve", "capacity": "security"},
                         follow_redirects=False)


# --- sessions end server-side ---------------------------------------------------------------------


def test_a_replayed_cookie_after_sign_out_records_no_approval(client, world, container):
    cookie, csrf = recorded_form(client, world)
    page = client.get("/ui/approvals")
    assert client.post("/ui/sign-out", data={"csrf": csrf_of(page.text)}, follow_redirects=False).status_code == 303
    r = replay(client, world, cookie, csrf)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/sign-in")
    assert approvals(container) == 0
    with container.session_factory() as session:
        row = session.get(ConsoleSession, int(cookie.split(".")[0]))
        assert row.ended_at is not None and row.ended_why == "signed-out"


def test_a_replayed_cookie_after_its_token_is_revoked_records_no_approval(client, world, container):
    cookie, csrf = recorded_form(client, world)
    with container.session_factory() as session:
        token_id = session.get(ConsoleSession, int(cookie.split(".")[0])).token_id
    assert client.delete(f"/v1/tokens/{token_id}", headers=bearer(world["tokens"]["root"])).status_code == 204
    r = replay(client, world, cookie, csrf)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/sign-in")
    assert approvals(container) == 0
    with container.session_factory() as session:
        assert session.get(ConsoleSession, int(cookie.split(".")[0])).ended_why == "token-revoked"


def test_a_replayed_cookie_after_the_principal_is_disabled_records_no_approval_even_once_enabled(
        client, world, container):
    cookie, csrf = recorded_form(client, world)
    root = bearer(world["tokens"]["root"])
    assert client.post("/v1/principals/sec/disable", headers=root).status_code == 200
    assert replay(client, world, cookie, csrf).status_code == 303
    # Enabling the principal again gives back their tokens, never the sessions that were open.
    assert client.post("/v1/principals/sec/enable", headers=root).json()["disabled"] is False
    r = replay(client, world, cookie, csrf)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/sign-in")
    assert approvals(container) == 0
    # The cookie still replays perfectly well while the session lives: the refusals above are the server's.
    fresh = TestClient(client.app)
    sign_in(fresh, world["tokens"]["sec"])
    live_cookie = fresh.cookies.get("mr_session")
    live_csrf = csrf_of(fresh.get(f"/ui/models/acme/tiny/versions/{world['number']}").text)
    assert replay(client, world, live_cookie, live_csrf).status_code == 303
    assert approvals(container) == 1


# --- sign-in and sign-out are audited -------------------------------------------------------------


def test_sign_in_and_sign_out_are_audited(client, world, container):
    sign_in(client, world["tokens"]["sec"])
    session_id = int(client.cookies.get("mr_session").split(".")[0])
    page = client.get("/ui/approvals")
    client.post("/ui/sign-out", data={"csrf": csrf_of(page.text)}, follow_redirects=False)
    # A sign-out without a session, or a refused sign-in, records nothing more.
    client.post("/ui/sign-out", data={"csrf": "x"}, follow_redirects=False)
    sign_in(client, "mr_" + "x" * 43)
    events = client.get("/v1/audit/events", params={"limit": 1000}, headers=bearer(world["tokens"]["root"])).json()
    console = [(e["actor"], e["action"], e["subject"], e["details"].get("session_id"))
               for e in events if e["action"].startswith("console.")]
    assert console == [("sec", "console.signed_in", "principal/sec", session_id),
                       ("sec", "console.signed_out", "principal/sec", session_id)]


# --- hostile cookie and CSRF values, over real HTTP -----------------------------------------------

NON_ASCII = ["é", "\u00ff" * 64, "ü.1.2.3", "1.2.3.é", "1.2.3." + "é" * 64, "١.٢.٣." + "0" * 64]


def bad_values(seed: int, count: int) -> list[bytes]:
    """Cookie and field values as raw bytes: non-ASCII (UTF-8 and not), dotted shapes, long ones, random ones."""
    rng = random.Random(seed)
    values = [v.encode() for v in NON_ASCII] + [v.encode("latin-1") for v in ("\xe9", "1.2.3.\xff")]
    values += [b"\xff\xfe", b"1.2.3.\xc3", b"0.0.0." + b"0" * 64, b"-1.0.0.x", b"9" * 30 + b".1.1.x",
               b"1" * 199 + b"\xe9", b"1.1.1.1.1", b"...", b"%C3%A9", b"\"\xe9\""]
    alphabet = b"0123456789abcdef.-_%\"" + bytes(range(0x80, 0x100))
    values += [bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 120))) for _ in range(count)]
    return values


@pytest.fixture
def live(container, world):
    with serve_in_thread(create_app(container)) as url:
        yield url


def test_non_ascii_session_cookies_and_csrf_values_are_refused_never_a_500(live, world, container):
    signed_in = httpx.Client(base_url=live)
    sign_in(signed_in, world["tokens"]["sec"])
    cookie = signed_in.cookies.get("mr_session")
    sign_in_page = httpx.Client(base_url=live)
    nonce = sign_in_page.get("/ui/sign-in").cookies.get("mr_sign_in")
    form = (b"content-type", b"application/x-www-form-urlencoded")
    with httpx.Client(base_url=live) as raw:
        for value in bad_values(seed=18, count=40):
            csrf_field = b"csrf=" + value
            # A bad session cookie: back to sign-in, for a page and for each form alike.
            for method, path in (("GET", "/ui/approvals"), ("POST", "/ui/sign-out"), ("POST", decision_url(world))):
                r = raw.request(method, path, headers=[(b"cookie", b"mr_session=" + value), form],
                                content=csrf_field if method == "POST" else None)
                assert r.status_code == 303 and "/ui/sign-in" in r.headers["location"], (value, path, r.status_code)
            # A bad CSRF field (raw and percent-encoded) over a genuine session: 403 in words.
            for body in (csrf_field, b"csrf=" + quote(value).encode()):
                for path, extra in (("/ui/sign-out", b""),
                                    (decision_url(world), b"&decision=approve&capacity=security")):
                    r = raw.post(path, content=body + extra,
                                 headers=[(b"cookie", f"mr_session={cookie}".encode()), form])
                    assert r.status_code == 403 and REFUSED in r.text, (value, path, r.status_code)
            # The sign-in form: a bad pre-session cookie, and a bad CSRF field over a genuine one.
            genuine_token = b"token=" + world["tokens"]["sec"].encode() + b"&"
            for header, body in ((b"mr_sign_in=" + value, genuine_token + csrf_field),
                                 (f"mr_sign_in={nonce}".encode(), b"token=x&" + csrf_field)):
                r = raw.post("/ui/sign-in", content=body,
                             headers=[(b"cookie", header), form])
                assert r.status_code == 403 and REFUSED in r.text, (value, r.status_code)
                assert "mr_session" not in r.headers.get("set-cookie", "")
    assert approvals(container) == 0
    assert signed_in.get("/ui/approvals").status_code == 200  # nothing above ended the genuine session


# --- every console form, generated from the router ------------------------------------------------


@dataclass
class Form:
    """How to post one console form validly: who signs in, what to set up first, the URL and the body."""

    who: str
    url: Callable[[dict], str]
    body: Callable[[dict], dict[str, str]] = lambda w: {}
    setup: Callable[[object, dict], None] = lambda container, w: None
    signed_in: bool = True


def _approved(container, world) -> None:
    """Versions 2 and 3 of acme/tiny, approved by security and ml, for the alias forms."""
    from registry.services import approvals as approvals_service

    with container.session_factory() as session:
        sec, mia = (authenticate(session, world["tokens"][who]) for who in ("sec", "mia"))
    for files in (4, 5):
        number = awaiting_upload(container, world["sam"], "acme", "tiny", tiny_model_files(files))
        for who, capacity in ((sec, "security"), (mia, "ml")):
            with container.session_factory() as session:
                approvals_service.decide(session, who, "acme", "tiny", number,
                                         approvals_service.ApprovalRequest(decision="approve", capacity=capacity),
                                         ports=container.ports)
        world.setdefault("approved", []).append(number)


def _approved_by_security(container, world) -> None:
    """``sec``'s security approval of version 1, for the form that adds file reviews to it."""
    from registry.services import approvals as approvals_service

    with container.session_factory() as session:
        sec = authenticate(session, world["tokens"]["sec"])
    with container.session_factory() as session:
        approvals_service.decide(session, sec, "acme", "tiny", world["number"],
                                 approvals_service.ApprovalRequest(decision="approve", capacity="security"),
                                 ports=container.ports)


def _promoted_twice(container, world) -> None:
    _approved(container, world)
    with container.session_factory() as session:
        mia = authenticate(session, world["tokens"]["mia"])
    for number in world["approved"]:
        with container.session_factory() as session:
            aliases.promote(session, mia, "acme", "tiny", "prod", make_target(number), policy=container.policy,
                            clock=container.clock)


FORMS: dict[str, Form] = {
    "/ui/sign-in": Form("sec", lambda w: "/ui/sign-in", lambda w: {"token": w["tokens"]["sec"], "next": "/ui"},
                        signed_in=False),
    "/ui/sign-out": Form("sec", lambda w: "/ui/sign-out"),
    "/ui/models/{tenant}/{name}/versions/{number}/decision": Form(
        "sec", decision_url, lambda w: {"decision": "approve", "capacity": "security", "comment": "fine"}),
    "/ui/models/{tenant}/{name}/aliases": Form(
        "mia", lambda w: "/ui/models/acme/tiny/aliases",
        lambda w: {"alias": "prod", "version": str(w["approved"][0]), "comment": "go"}, setup=_approved),
    "/ui/models/{tenant}/{name}/aliases/{alias}/rollback": Form(
        "mia", lambda w: "/ui/models/acme/tiny/aliases/prod/rollback", lambda w: {"comment": "back"},
        setup=_promoted_twice),
    "/ui/models/{tenant}/{name}/versions/{number}/approval-files": Form(
        "sec", lambda w: f"/ui/models/acme/tiny/versions/{w['number']}/approval-files",
        lambda w: {"files": "config.json"}, setup=_approved_by_security),
    "/ui/models/{tenant}/{name}/versions/{number}/revoke": Form(
        "sec", lambda w: f"/ui/models/acme/tiny/versions/{w['approved'][0]}/revoke",
        lambda w: {"reason": "withdrawn"}, setup=_approved),
}
"""Every POST route of the console, with how to post it validly (a new form needs its entry here)."""

def post_routes(routes, prefix: str = "") -> list[str]:
    """The paths of the POST routes among ``routes``, into included routers too."""
    found = []
    for route in routes:
        if hasattr(route, "original_router"):  # FastAPI keeps an included router as one route
            found += post_routes(route.original_router.routes, prefix + route.include_context.prefix)
        elif "POST" in (getattr(route, "methods", None) or ()):
            found.append(prefix + route.path)
    return sorted(found)


CONSOLE_FORMS = post_routes(ui.router.routes)


def test_the_form_list_is_the_apps(client):
    assert [p for p in post_routes(client.app.routes) if p.startswith("/ui")] == CONSOLE_FORMS
    assert set(FORMS) <= set(CONSOLE_FORMS), f"entries for forms that are gone: {set(FORMS) - set(CONSOLE_FORMS)}"


@pytest.mark.parametrize("route", CONSOLE_FORMS)
def test_every_console_form_refuses_a_missing_stale_or_foreign_csrf_token(route, client, world, container):
    form = FORMS.get(route)
    assert form is not None, f"the console form POST {route} has no entry in FORMS: add how to post it validly"
    form.setup(container, world)
    url, body = form.url(world), form.body(world)
    other = TestClient(client.app)
    if form.signed_in:
        # Stale: this person's own token from a session ended since (signed out, then in again).
        sign_in(client, world["tokens"][form.who])
        stale = csrf_of(client.get("/ui/approvals").text)
        client.post("/ui/sign-out", data={"csrf": stale}, follow_redirects=False)
        sign_in(client, world["tokens"][form.who])
        sign_in(other, world["tokens"]["aud"])
        foreign = csrf_of(other.get("/ui/approvals").text)
    else:
        stale = csrf_of(client.get("/ui/sign-in").text)
        client.cookies.delete("mr_sign_in")
        client.get("/ui/sign-in")  # a new pre-session cookie: the old page's token is stale
        foreign = csrf_of(other.get("/ui/sign-in").text)
    for csrf in (None, stale, foreign, ""):
        before = audited(container)
        data = body if csrf is None else {**body, "csrf": csrf}
        r = client.post(url, data=data, follow_redirects=False)
        assert r.status_code == 403 and REFUSED in r.text, (route, csrf, r.status_code, r.text[:300])
        assert audited(container) == before, (route, csrf, "the refused form changed something")
    # With the page's own token the same body goes through: the entry posts the form validly.
    own = csrf_of(client.get("/ui/approvals" if form.signed_in else "/ui/sign-in").text)
    before = audited(container)
    r = client.post(url, data={**body, "csrf": own}, follow_redirects=False)
    assert r.status_code == 303, (route, r.status_code, r.text[:500])
    assert audited(container) > before, (route, "the valid form recorded nothing")


def test_a_cookie_sealed_with_the_key_still_needs_the_sessions_secret(client, world, container):
    # The row keeps the secret's hash: a leaked console key alone cannot open someone's live session.
    sign_in(client, world["tokens"]["sec"])
    session_id, expiry, _secret, _mac = client.cookies.get("mr_session").split(".")
    body = f"{session_id}.{expiry}.{'0' * 32}"
    forged = TestClient(client.app)
    forged.cookies.set("mr_session", f"{body}.{container.console_key.mac('session', body)}", path="/ui")
    assert forged.get("/ui/approvals", follow_redirects=False).status_code == 303
    assert client.get("/ui/approvals", follow_redirects=False).status_code == 200


def test_sign_in_prunes_the_rows_of_sessions_ended_or_expired_over_a_day_ago(world, container):
    from registry.console.sessions import KEPT_AFTER_END, SESSION_LIFETIME, end_sessions
    from registry.console.sessions import sign_in as open_new

    key, token = container.console_key, world["tokens"]["sec"]
    t0 = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)

    def signed_in(at: dt.datetime) -> int:
        with container.session_factory() as session:
            return int(open_new(session, key, token, now=at)[0].split(".")[0])

    def end(session_id: int, at: dt.datetime) -> None:
        with container.session_factory() as session:
            end_sessions(session, why="signed-out", now=at, session_id=session_id)
            session.commit()

    ended_long_ago, expired_long_ago = signed_in(t0), signed_in(t0 - SESSION_LIFETIME)
    end(ended_long_ago, t0)
    later = t0 + KEPT_AFTER_END + dt.timedelta(minutes=1)
    ended_lately = signed_in(later - dt.timedelta(hours=1))
    end(ended_lately, later - dt.timedelta(hours=1))
    live = signed_in(later)
    with container.session_factory() as session:
        left = {row.id for row in session.query(ConsoleSession)}
    assert ended_long_ago not in left and expired_long_ago not in left
    assert {ended_lately, live} <= left
