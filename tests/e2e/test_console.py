"""The web console's rules through the app: sessions, CSRF, security headers, and the pages' refusals.

A real app over a real database (SQLite and PostgreSQL), driven by Starlette's TestClient; the same
console in a real browser is tests/browser/.
"""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from registry.auth import authenticate, issue_token, load_principal
from registry.db.models import Approval, ConsoleSession, Principal
from registry.services import identity
from tests.support.console import awaiting_upload, csrf_of, person, sign_in
from tests.support.tiny_model import tiny_model_files


def build_world(container, root):
    """Tenant ``acme``: a submitter who is also a security approver, a security and an ml approver, an
    auditor, a serving node; one version of ``acme/tiny`` awaiting approval. Tenant ``other`` holds a model
    nobody of ``acme`` may see."""
    tokens = {
        "sam": person(container, "sam", "acme", ("submitter", ""), ("approver", "security")),
        "sec": person(container, "sec", "acme", ("approver", "security")),
        "mia": person(container, "mia", "acme", ("approver", "ml")),
        "aud": person(container, "aud", "acme", ("auditor", "")),
        "node": person(container, "node", "acme", ("node", "")),
        "olly": person(container, "olly", "other", ("submitter", "")),
    }
    with container.session_factory() as session:
        sam = authenticate(session, tokens["sam"])
        olly = authenticate(session, tokens["olly"])
    number = awaiting_upload(container, sam, "acme", "tiny", tiny_model_files(3), label="<script>alert(1)</script>")
    awaiting_upload(container, olly, "other", "secret-model", {"config.json": b'{"model_type": "x"}'})
    return {"tokens": tokens, "number": number}


pytestmark = pytest.mark.seeded(builder=build_world)


@pytest.fixture
def world(seeded):
    return seeded


@pytest.fixture
def client(container):
    with TestClient(create_app(container), raise_server_exceptions=False) as c:
        yield c


def cookie_header(response, name: str) -> str:
    found = [h for h in response.headers.get_list("set-cookie") if h.startswith(name + "=")]
    assert found, f"no {name} cookie set: {response.headers.get_list('set-cookie')}"
    return found[0]


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


def test_a_decision_without_the_sessions_csrf_token_is_refused_and_records_nothing(client, world, container):
    number = world["number"]
    # Another session's token is no better than none.
    other = TestClient(client.app)
    sign_in(other, world["tokens"]["mia"])
    stolen = csrf_of(other.get(f"/ui/models/acme/tiny/versions/{number}").text)
    sign_in(client, world["tokens"]["sec"])
    for csrf in ("", stolen):
        r = client.post(f"/ui/models/acme/tiny/versions/{number}/decision",
                        data={"csrf": csrf, "decision": "approve", "capacity": "security"}, follow_redirects=False)
        assert r.status_code == 403 and "did not come from this console" in r.text
    with container.session_factory() as session:
        assert session.query(Approval).count() == 0


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


def test_approve_and_separation_of_duties_through_the_same_service(client, world, container):
    number, url = world["number"], f"/ui/models/acme/tiny/versions/{world['number']}"
    sign_in(client, world["tokens"]["sam"])
    page = client.get(url)
    r = client.post(f"{url}/decision", data={"csrf": csrf_of(page.text), "decision": "approve",
                                             "capacity": "security"}, follow_redirects=False)
    assert r.status_code == 403 and "submitted" in r.text.lower()
    for who, capacity in (("sec", "security"), ("mia", "ml")):
        client.cookies.clear()
        sign_in(client, world["tokens"][who])
        page = client.get(url)
        r = client.post(f"{url}/decision", data={"csrf": csrf_of(page.text), "decision": "approve",
                                                 "capacity": capacity, "comment": "<b>fine</b>"})
        assert r.status_code == 200, r.text[:500]
    assert "state-approved" in r.text and "&lt;b&gt;fine&lt;/b&gt;" in r.text
    assert "Your approval is recorded." in r.text


def test_the_submitters_label_is_text(client, world):
    sign_in(client, world["tokens"]["aud"])
    page = client.get(f"/ui/models/acme/tiny/versions/{world['number']}").text
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_pages_show_only_what_the_principal_may_see(client, world):
    sign_in(client, world["tokens"]["sec"])
    home = client.get("/ui").text
    assert "acme/tiny" in home and "secret-model" not in home
    for path in ("/ui/models/other/secret-model", "/ui/models/other/secret-model/versions/1",
                 "/ui/models/other/no-such/versions/1"):
        r = client.get(path)
        assert r.status_code == 403 and "secret-model" not in r.text, path
    assert client.get("/ui/audit").status_code == 403  # an approver audits nothing
    assert client.get("/ui/provenance").status_code == 403
    queue = client.get("/ui/approvals").text
    assert f"acme/tiny@{world['number']}" in queue and "other/" not in queue
    client.cookies.clear()
    sign_in(client, world["tokens"]["aud"])
    assert "acme/tiny" not in client.get("/ui/approvals").text  # an auditor approves nothing
    assert client.get("/ui/audit").status_code == 200
    assert client.get("/ui/audit", params={"tenant": "other"}).status_code == 403


def test_progress_answers_json_for_the_refresher(client, world):
    sign_in(client, world["tokens"]["sec"])
    r = client.get(f"/ui/models/acme/tiny/versions/{world['number']}/progress")
    assert r.status_code == 200 and json.loads(r.text)["state"] == "awaiting_approval"


def test_a_next_path_never_leaves_the_console(client, world):
    r = sign_in(client, world["tokens"]["sec"], "https://evil.example/")
    assert r.headers["location"] == "/ui"
    r = sign_in(client, world["tokens"]["sec"], "//evil.example/ui")
    assert r.headers["location"] == "/ui"


def test_audit_page_filters_events_and_shows_the_chain(client, world):
    sign_in(client, world["tokens"]["aud"])
    page = client.get("/ui/audit", params={"tenant": "acme", "actor": "sam"}).text
    rows = re.findall(r"<tr><td>\d+</td><td>[^<]*</td><td>([^<]*)</td><td>([^<]*)</td>", page)
    assert rows and {actor for actor, _ in rows} == {"sam"}, rows
    page = client.get("/ui/audit", params={"tenant": "acme", "action": "version."}).text
    actions = {a for _, a in re.findall(r"<tr><td>\d+</td><td>[^<]*</td><td>([^<]*)</td><td>([^<]*)</td>", page)}
    assert actions and all(a.startswith("version.") for a in actions), actions
    assert "Intact:" in page
    assert f'<a href="/ui/models/acme/tiny/versions/{world["number"]}">acme/tiny@{world["number"]}</a>' in page
    bad = client.get("/ui/audit", params={"tenant": "acme", "since": "yesterday"})
    assert bad.status_code == 422 and "since" in bad.text


def test_audit_page_shows_the_log_checkpoint_and_checks_an_events_inclusion(client, world, container):
    from sqlalchemy import select

    from registry.db.models import AuditEvent
    from registry.services import tlog

    sign_in(client, world["tokens"]["aud"])
    assert "No checkpoint yet." in client.get("/ui/audit", params={"tenant": "acme"}).text
    with container.session_factory() as session:
        ours = session.scalars(select(AuditEvent.id).where(AuditEvent.tenant == "acme")).first()
        theirs = session.scalars(select(AuditEvent.id).where(AuditEvent.tenant == "other")).first()
    tlog.integrate_audit_log(container.session_factory)
    tlog.sign_checkpoint_if_due(container.session_factory, container.log_key, interval=0,
                                now=container.clock.now(), on_demand=True)
    page = client.get("/ui/audit", params={"tenant": "acme", "event": ours}).text
    assert f"Checkpoint of <span class=\"mono\">{container.log_key.name}</span>" in page
    assert "signed by the log key" in page and "no witness" in page
    assert re.search(rf'id="inclusion-result">Event {ours} \(.*\) is leaf {ours - 1} of .*verifies', page), page
    # Another tenant's event is refused like one that does not exist: the page is no oracle.
    for event in (theirs, 10**9):
        refused = client.get("/ui/audit", params={"tenant": "acme", "event": event})
        assert refused.status_code == 403 and f"may not read audit event {event}" in refused.text


def test_provenance_by_node_and_by_alias_at_a_time_link_to_the_version(client, world, container):
    number, tokens = world["number"], world["tokens"]
    for who, capacity in (("sec", "security"), ("mia", "ml")):
        r = client.post(f"/v1/models/acme/tiny/versions/{number}/approvals",
                        headers={"Authorization": f"Bearer {tokens[who]}"},
                        json={"decision": "approve", "capacity": capacity})
        assert r.status_code == 201, r.text
    before = container.clock.now()
    # The ml approver promotes through the console's form.
    sign_in(client, tokens["mia"])
    model = client.get("/ui/models/acme/tiny")
    r = client.post("/ui/models/acme/tiny/aliases", data={"csrf": csrf_of(model.text), "alias": "prod",
                                                           "version": str(number), "comment": "go"})
    assert r.status_code == 200 and "The alias moved." in r.text and f"prod → @{number}" in r.text
    fetched = client.get("/v1/models/acme/tiny/manifest", params={"ref": "prod"},
                         headers={"Authorization": f"Bearer {tokens['node']}"})
    assert fetched.status_code == 200, fetched.text
    client.cookies.clear()
    sign_in(client, tokens["aud"])
    page = client.get("/ui/provenance", params={"tenant": "acme", "node": "node"}).text
    assert f'href="/ui/models/acme/tiny/versions/{number}"' in page and "What node fetched of acme" in page
    page = client.get("/ui/provenance", params={"tenant": "acme", "model": "tiny", "alias": "prod",
                                                "at": before.strftime("%Y-%m-%dT%H:%M:%S")}).text
    assert "it did not exist yet" in page and "go" in page
    refused = client.get("/ui/provenance", params={"tenant": "other", "node": "node"})
    assert refused.status_code == 403


def test_promote_with_a_canary_roll_back_and_a_denied_move_shown_in_words(client, world, container):
    tokens = world["tokens"]
    with container.session_factory() as session:
        sam = authenticate(session, tokens["sam"])
    second = awaiting_upload(container, sam, "acme", "tiny", tiny_model_files(4))
    for number in (world["number"], second):
        for who, capacity in (("sec", "security"), ("mia", "ml")):
            r = client.post(f"/v1/models/acme/tiny/versions/{number}/approvals",
                            headers={"Authorization": f"Bearer {tokens[who]}"},
                            json={"decision": "approve", "capacity": capacity})
            assert r.status_code == 201, r.text
    # A security approver holds no capacity the promotion policy accepts: refused, in words, nothing moved.
    sign_in(client, tokens["sec"])
    page = client.get("/ui/models/acme/tiny")
    r = client.post("/ui/models/acme/tiny/aliases", data={"csrf": csrf_of(page.text), "alias": "prod",
                                                           "version": str(world["number"])})
    assert r.status_code == 403 and 'class="error" role="alert"' in r.text and "No aliases yet." in r.text
    client.cookies.clear()
    sign_in(client, tokens["mia"])
    csrf = csrf_of(client.get("/ui/models/acme/tiny").text)
    r = client.post("/ui/models/acme/tiny/aliases", data={"csrf": csrf, "alias": "prod",
                                                           "version": str(world["number"])})
    assert "The alias moved." in r.text
    r = client.post("/ui/models/acme/tiny/aliases", data={"csrf": csrf, "alias": "prod", "version": str(world["number"]),
                                                           "canary_version": str(second), "canary_tenants": "acme"})
    assert f"(canary @{second} for acme)" in r.text
    r = client.post("/ui/models/acme/tiny/aliases/prod/rollback", data={"csrf": csrf, "comment": "too early"})
    assert "The alias rolled back." in r.text and "canary @" not in r.text.split("<h3>")[1].split("</h3>")[0]
    assert "too early" in r.text
    bad = client.post("/ui/models/acme/tiny/aliases", data={"csrf": csrf, "alias": "prod", "version": "x"})
    assert bad.status_code == 422 and "version is a version number" in bad.text


def test_a_reject_with_a_comment_rejects_and_the_comment_is_shown(client, world):
    url = f"/ui/models/acme/tiny/versions/{world['number']}"
    sign_in(client, world["tokens"]["mia"])
    page = client.get(url)
    r = client.post(f"{url}/decision", data={"csrf": csrf_of(page.text), "decision": "reject", "capacity": "ml",
                                             "comment": "eval data leaked into training"})
    assert r.status_code == 200 and "Your rejection is recorded." in r.text
    assert "state-rejected" in r.text and "eval data leaked into training" in r.text
    again = client.post(f"{url}/decision", data={"csrf": csrf_of(r.text), "decision": "approve", "capacity": "ml"})
    assert again.status_code == 409 and 'role="alert"' in again.text  # no longer awaiting approval, in words


def test_audit_time_filters(client, world, container):
    sign_in(client, world["tokens"]["aud"])
    later = (container.clock.now() + dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    assert "No events match." in client.get("/ui/audit", params={"tenant": "acme", "since": later}).text
    page = client.get("/ui/audit", params={"tenant": "acme", "until": later}).text
    assert "version.submitted" in page


@pytest.mark.parametrize("path, params", [
    ("/ui/audit", {"tenant": "acme", "after": str(2**63 - 1)}),
    ("/ui/audit", {"tenant": "NOT A TENANT"}),
    ("/ui/audit", {"tenant": "acme", "since": "9999-12-31T23:59:59+14:00", "until": "0001-01-01T00:00"}),
    ("/ui/audit", {"tenant": "acme", "action": "%_\\", "actor": "'; drop table"}),
    ("/ui/provenance", {"digest": "sha256:" + "z" * 64}),
    ("/ui/provenance", {"digest": "sha256:" + "f" * 64}),
    ("/ui/provenance", {"tenant": "acme", "node": "../../etc"}),
    ("/ui/provenance", {"tenant": "acme", "model": "tiny", "alias": "prod", "at": "0001-01-01T00:00"}),
    ("/ui/provenance", {"tenant": "acme", "model": "tiny", "alias": "Prod!", "at": "not a time"}),
    ("/ui/models/acme/tiny", {"notice": "<script>"}),
    ("/ui", {"q": "%_\\", "state": "approved"}),
    ("/ui", {"q": "\x00", "state": "<script>"}),
    ("/ui", {"q": "x" * 201, "state": "approved' or '1'='1"}),
    ("/ui/models/acme/tiny", {"q": "'; drop table versions; --", "state": "awaiting_approval"}),
    ("/ui/models/acme/tiny", {"q": "a\u202eb", "state": "x" * 33}),
    ("/ui/models/acme/tiny", {"state": "<script>alert(1)</script>"}),
    ("/ui/models/acme/tiny/versions/1/export", {"format": "../../etc/passwd"}),
    ("/ui/models/acme/tiny/versions/1/export", {"format": "<script>"}),
    ("/ui/models/acme/tiny/versions/2147483647/export", {"format": "slsa"}),
    ("/ui/models/acme/tiny/versions/2147483647", {}),
    ("/ui/static/../../registry.db", {}),
    ("/ui/sign-in", {"next": "javascript:alert(1)"}),
])
def test_hostile_inputs_are_answered_in_words_never_a_500(client, world, path, params):
    sign_in(client, world["tokens"]["aud"])
    r = client.get(path, params=params, follow_redirects=False)
    assert r.status_code < 500, (r.status_code, r.text[:300])
    assert "<script>" not in r.text.replace('<script src="/ui/static/console.js" defer>', "")
    assert "javascript:" not in r.text


REMOTE_FILES = {"modeling_tiny.py": b"print('hi')\n"}
"""A Python file beside the weights: the scanner calls it suspicious (remote code)."""


def remote_version(container, tokens, seed: int) -> int:
    with container.session_factory() as session:
        sam = authenticate(session, tokens["sam"])
    return awaiting_upload(container, sam, "acme", "remote", {**tiny_model_files(seed), **REMOTE_FILES})


def approvals_of(container) -> dict[str, list[str]]:
    with container.session_factory() as session:
        return {a.principal.name: list(a.files) for a in session.query(Approval)}


def test_the_approve_form_names_suspicious_files_and_says_first_what_an_approval_would_leave(
        client, world, container):
    tokens = world["tokens"]
    named, later = remote_version(container, tokens, 30), remote_version(container, tokens, 31)
    checkbox = '<input type="checkbox" name="files" value="modeling_tiny.py">'
    sign_in(client, tokens["mia"])
    assert checkbox not in client.get(f"/ui/models/acme/remote/versions/{named}").text  # ml names no files
    client.cookies.clear()
    sign_in(client, tokens["sec"])
    url = f"/ui/models/acme/remote/versions/{named}"
    page = client.get(url)
    assert checkbox in page.text
    # Naming the file: recorded at once, with the file.
    r = client.post(f"{url}/decision", data={"csrf": csrf_of(page.text), "decision": "approve",
                                             "capacity": "security", "files": ["modeling_tiny.py"]})
    assert r.status_code == 200 and "Your approval is recorded." in r.text
    assert approvals_of(container) == {"sec": ["modeling_tiny.py"]}

    # Not naming it: nothing is recorded until the approver, told what would be left, confirms.
    url = f"/ui/models/acme/remote/versions/{later}"
    csrf = csrf_of(client.get(url).text)
    r = client.post(f"{url}/decision", data={"csrf": csrf, "decision": "approve", "capacity": "security",
                                             "comment": "read it"})
    assert r.status_code == 200 and "Confirm your approval" in r.text
    assert "modeling_tiny.py is suspicious: a security approval must name it" in r.text.split('id="confirm"')[1]
    assert '<input type="hidden" name="confirm" value="yes">' in r.text
    assert '<input type="hidden" name="comment" value="read it">' in r.text
    assert approvals_of(container) == {"sec": ["modeling_tiny.py"]}
    r = client.post(f"{url}/decision", data={"csrf": csrf, "decision": "approve", "capacity": "security",
                                             "comment": "read it", "confirm": "yes"})
    assert r.status_code == 200 and "Your approval is recorded." in r.text
    assert "state-awaiting_approval" in r.text and "Add file reviews to your approval" in r.text

    # The review added to the same approval later: CSRF-checked, audited, and the policy judges again.
    refused = client.post(f"{url}/approval-files", data={"csrf": "", "files": ["modeling_tiny.py"]})
    assert refused.status_code == 403 and "did not come from this console" in refused.text
    client.cookies.clear()
    sign_in(client, tokens["mia"])
    csrf_mia = csrf_of(client.get(url).text)
    client.post(f"{url}/decision", data={"csrf": csrf_mia, "decision": "approve", "capacity": "ml"})
    unknown = client.post(f"{url}/approval-files", data={"csrf": csrf_mia, "files": ["nope.py"]})
    assert unknown.status_code == 422 and "has no file &#39;nope.py&#39;" in unknown.text
    client.cookies.clear()
    sign_in(client, tokens["sec"])
    r = client.post(f"{url}/approval-files", data={"csrf": csrf_of(client.get(url).text),
                                                   "files": ["modeling_tiny.py"]})
    assert r.status_code == 200 and "Your file reviews are added to your approval." in r.text
    assert "state-approved" in r.text
    with container.session_factory() as session:
        from registry.db.models import AuditEvent
        events = [e for e in session.query(AuditEvent) if e.action == "version.approval.files-added"]
        assert [(e.actor, e.subject, e.details["added"]) for e in events] == [
            ("sec", f"acme/remote@{later}", ["modeling_tiny.py"])]


def test_facts_show_as_values_not_python_reprs(client, world):
    sign_in(client, world["tokens"]["aud"])
    page = client.get(f"/ui/models/acme/tiny/versions/{world['number']}").text
    facts = page.split("<h2>Facts</h2>")[1].split("</section>")[0]
    cells = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td>", facts)
    assert cells, facts[:500]
    values = dict(cells)
    assert values["weights · formats"] == "safetensors", values
    for shown in values.values():
        assert not re.search(r"\[|\]|\bNone\b|\bTrue\b|\bFalse\b|\{", shown), values


def test_revoke_from_the_version_page_for_those_who_may(client, world, container):
    url = f"/ui/models/acme/tiny/versions/{world['number']}"
    form = f'action="{url}/revoke"'
    for who in ("mia", "aud"):
        client.cookies.clear()
        sign_in(client, world["tokens"][who])
        page = client.get(url)
        assert form not in page.text, who
        r = client.post(f"{url}/revoke", data={"csrf": csrf_of(page.text), "reason": "no"})
        assert r.status_code == 403 and "may not revoke" in r.text, who
    client.cookies.clear()
    sign_in(client, world["tokens"]["sec"])  # a security approver may
    page = client.get(url)
    assert form in page.text
    refused = client.post(f"{url}/revoke", data={"csrf": "0" * 64, "reason": "leaked"})
    assert refused.status_code == 403 and "did not come from this console" in refused.text
    empty = client.post(f"{url}/revoke", data={"csrf": csrf_of(page.text), "reason": "  "})
    assert empty.status_code == 422 and "needs a reason" in empty.text
    assert "state-awaiting_approval" in client.get(url).text
    r = client.post(f"{url}/revoke", data={"csrf": csrf_of(page.text), "reason": "<i>weights leaked</i>"})
    assert r.status_code == 200 and "The version is revoked." in r.text and "state-revoked" in r.text
    assert "&lt;i&gt;weights leaked&lt;/i&gt;" in r.text and form not in r.text  # nothing more to revoke


def _without_volatile(bom: bytes) -> dict:
    doc = json.loads(bom)
    doc.pop("serialNumber")
    doc["metadata"].pop("timestamp")
    return doc


def test_exports_download_with_the_callers_rights_as_the_export_api_answers(client, world):
    number, tokens = world["number"], world["tokens"]
    url = f"/ui/models/acme/tiny/versions/{number}"
    api = f"/v1/provenance/acme/tiny/versions/{number}/export"
    sign_in(client, tokens["aud"])
    page = client.get(url).text
    assert f'href="{url}/export?format=cyclonedx"' in page and f'href="{url}/export?format=slsa"' in page
    for fmt in ("cyclonedx", "slsa"):
        ui = client.get(f"{url}/export", params={"format": fmt})
        direct = client.get(api, params={"format": fmt}, headers={"Authorization": f"Bearer {tokens['aud']}"})
        assert ui.status_code == direct.status_code == 200, ui.text[:300]
        assert ui.headers["content-type"] == direct.headers["content-type"]
        assert ui.headers["content-disposition"] == direct.headers["content-disposition"]
        if fmt == "cyclonedx":  # a fresh serial number and time per BOM, the rest byte for byte
            assert _without_volatile(ui.content) == _without_volatile(direct.content)
        else:  # the same signed statement (an ECDSA signature differs each time)
            a, b = json.loads(ui.content), json.loads(direct.content)
            assert (a["payload"], a["payloadType"]) == (b["payload"], b["payloadType"])
            assert [s["keyid"] for s in a["signatures"]] == [s["keyid"] for s in b["signatures"]]
    bad = client.get(f"{url}/export", params={"format": "pdf"})
    assert bad.status_code == 422 and "unknown export format" in bad.text
    client.cookies.clear()
    sign_in(client, tokens["sec"])  # an approver audits nothing: no links, and no download
    assert "export?format=" not in client.get(url).text
    refused = client.get(f"{url}/export", params={"format": "slsa"})
    assert refused.status_code == 403 and "payload" not in refused.text


def test_models_and_versions_lists_filter_by_search_and_state(client, world, container):
    sign_in(client, world["tokens"]["aud"])
    assert 'href="/ui/models/acme/tiny"' in client.get("/ui", params={"q": "TIN"}).text
    for params in ({"q": "zzz"}, {"state": "approved"}, {"q": "%"}, {"q": "_iny"}):
        page = client.get("/ui", params=params).text
        assert 'href="/ui/models/acme/tiny"' not in page and "No models match." in page, params
    page = client.get("/ui", params={"q": "tiny", "state": "awaiting_approval"}).text
    assert 'href="/ui/models/acme/tiny"' in page and '<option value="awaiting_approval" selected>' in page
    with container.session_factory() as session:
        sam = authenticate(session, world["tokens"]["sam"])
    other = awaiting_upload(container, sam, "acme", "tiny", tiny_model_files(9), label="second-upload")
    client.post(f"/v1/models/acme/tiny/versions/{other}/approvals", json={"decision": "reject", "capacity": "ml"},
                headers={"Authorization": f"Bearer {world['tokens']['mia']}"}).raise_for_status()
    rows = lambda page: re.findall(r'<a href="/ui/models/acme/tiny/versions/(\d+)">', page)  # noqa: E731
    assert rows(client.get("/ui/models/acme/tiny").text) == [str(world["number"]), str(other)]
    assert rows(client.get("/ui/models/acme/tiny", params={"state": "rejected"}).text) == [str(other)]
    assert rows(client.get("/ui/models/acme/tiny", params={"q": "SECOND"}).text) == [str(other)]
    page = client.get("/ui/models/acme/tiny", params={"q": "second", "state": "approved"}).text
    assert rows(page) == [] and "No versions match." in page
    bad = client.get("/ui/models/acme/tiny", params={"state": "live"})
    assert bad.status_code == 422 and "state must be one of" in bad.text
