"""Console single sign-on against a real OpenID provider (npm's oidc-provider, started on loopback).

An httpx client plays the browser: it starts the sign-in at the registry, logs in on the provider's own
pages and brings the code back. alice is in ``security-approvers`` (approver/security in ``acme``), bob in
``ml-approvers``, carol in no group. Refused, each in words: a wrong ``state``, an ``error=`` and a replayed
code (not audited: anyone can cause them before the provider redeems a code), an ID token issued to another
client, an expired ID token, a user in no mapped group, a provider user whose name an administrator's
principal already has (adopted or not), and the reserved name ``system`` (audited). A user dropped from
every mapped group loses the roles and the console session single sign-on gave.
"""

from __future__ import annotations

import datetime as dt
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from authlib.integrations.httpx_client import OAuth2Client
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from api.routers import ui
from registry import oidc
from registry.auth import Role, authenticate
from registry.bootstrap import bootstrap
from registry.db.models import AuditEvent, ConsoleSession, Principal
from tests.support.clock import ManualClock
from tests.support.console import csrf_of, person
from tests.support.oidc import CLI_CLIENT, CONSOLE_CLIENT, OTHER_CLIENT, log_in, start_provider

CALLBACK = "http://testserver/ui/sign-in/oidc/callback"
GROUPS = {"security-approvers": {"tenant": "acme", "role": "approver", "capacity": "security"},
          "ml-approvers": [{"tenant": "acme", "role": "approver", "capacity": "ml"},
                           {"tenant": "acme", "role": "auditor"}]}


@pytest.fixture(scope="module")
def provider():
    with start_provider([CONSOLE_CLIENT, OTHER_CLIENT, CLI_CLIENT],
                        users={"Admin": ["security-approvers"], "system": ["security-approvers"],
                               "dave": ["ml-approvers"]}) as p:
        yield p


def sso_settings(settings, issuer: str, **more):
    return settings.model_copy(update={
        "oidc_issuer": issuer, "oidc_client_id": CONSOLE_CLIENT["client_id"],
        "oidc_client_secret": __import__("pydantic").SecretStr(CONSOLE_CLIENT["client_secret"]),
        "oidc_cli_client_id": CLI_CLIENT["client_id"], "oidc_provider_name": "Test IdP",
        "oidc_group_roles": GROUPS, **more})


@pytest.fixture
def settings(settings, provider):
    return sso_settings(settings, provider.issuer)


@pytest.fixture
def client(container):
    person(container, "root", "acme")  # makes tenant acme
    with TestClient(create_app(container), raise_server_exceptions=False) as c:
        yield c


def start(client) -> str:
    """Start a sign-in at the registry; return the provider URL the browser is sent to."""
    page = client.get("/ui/sign-in")
    assert "Sign in with Test IdP" in page.text
    response = client.get("/ui/sign-in/oidc", params={"next": "/ui/approvals"}, follow_redirects=False)
    assert response.status_code == 303
    return response.headers["location"]


def provider_login(authorize_url: str, user: str) -> str:
    with httpx.Client(timeout=20) as browser:
        return log_in(browser, authorize_url, user, stop_at=CALLBACK)


def back(client, callback_url: str):
    parts = urlsplit(callback_url)
    return client.get(f"{parts.path}?{parts.query}", follow_redirects=False)


def refusals(container) -> list[dict]:
    with container.session_factory() as session:
        return [e.details for e in session.scalars(select(AuditEvent).where(AuditEvent.action == "auth.oidc_refused"))]


def test_alice_signs_in_with_pkce_state_and_nonce_gets_exactly_her_mapped_roles_and_signs_out(client, container):
    url = start(client)
    query = parse_qs(urlsplit(url).query)
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"][0]
    assert query["state"][0] and query["nonce"][0] and query["client_id"] == ["modelreg"]
    answer = back(client, provider_login(url, "alice"))
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/approvals", answer.text[:500]
    home = client.get("/ui")
    assert home.status_code == 200 and "alice" in home.text
    with container.session_factory() as session:
        alice = session.scalar(select(Principal).where(Principal.name == "alice"))
        assert alice.oidc_identity == f"{container.settings.oidc_issuer} alice"
        assert {(b.role, b.capacity) for b in alice.roles} == {("approver", "security")}
        signed_in = session.scalars(select(AuditEvent).where(AuditEvent.action == "console.signed_in")).all()
        assert [e.details["method"] for e in signed_in] == ["oidc"]
        assert session.scalar(select(ConsoleSession)).ended_at is None
    client.post("/ui/sign-out", data={"csrf": csrf_of(home.text)})
    assert client.get("/ui", follow_redirects=False).status_code == 303
    with container.session_factory() as session:
        assert session.scalar(select(ConsoleSession)).ended_why == "signed-out"


def test_a_group_change_at_the_provider_changes_the_roles_on_the_next_sign_in(client, container):
    back(client, provider_login(start(client), "bob"))
    with container.session_factory() as session:
        bob = session.scalar(select(Principal).where(Principal.name == "bob"))
        assert {(b.role, b.capacity) for b in bob.roles} == {("approver", "ml"), ("auditor", "")}
        # An administrator grants bob something by hand: the next sign-in puts back exactly what the groups say.
        bob.roles[0].capacity = "legal"
        session.commit()
    client.cookies.clear()
    back(client, provider_login(start(client), "bob"))
    with container.session_factory() as session:
        bob = session.scalar(select(Principal).where(Principal.name == "bob"))
        assert {(b.role, b.capacity) for b in bob.roles} == {("approver", "ml"), ("auditor", "")}


def test_a_wrong_state_is_refused_and_not_audited(client, container):
    callback = provider_login(start(client), "alice")
    forged = callback.replace("state=", "state=x")
    answer = back(client, forged)
    assert answer.status_code == 401 and "wrong state" in answer.text
    assert client.cookies.get(ui.SESSION_COOKIE) is None
    assert refusals(container) == []


def audit_count(container) -> int:
    with container.session_factory() as session:
        return len(session.scalars(select(AuditEvent)).all())


def test_anyone_with_a_fresh_flow_cookie_cannot_write_the_audit_log_through_the_callback(client, container):
    """Issue 30: a flow cookie anyone can get, then a wrong ``state`` or any ``error=``, appended an
    ``auth.oidc_refused`` each, with the sender's text raw. Now neither is audited, and ``error`` is shown escaped."""
    start(client)
    before = audit_count(container)
    hostile = "access_denied\u202egnp.exe\x1b[2J"
    for _ in range(5):
        answer = client.get("/ui/sign-in/oidc/callback", params={"error": hostile}, follow_redirects=False)
        assert answer.status_code == 401 and "did not sign you in" in answer.text
        assert "\u202e" not in answer.text and "\x1b" not in answer.text
        assert "access_denied\\u202egnp.exe\\x1b[2J" in answer.text
        start(client)
        answer = client.get("/ui/sign-in/oidc/callback", params={"code": "made-up", "state": "made-up"},
                            follow_redirects=False)
        assert answer.status_code == 401 and "wrong state" in answer.text
        start(client)
    assert refusals(container) == [] and audit_count(container) == before
    # Counted instead, by reason, in the API's metrics.
    metrics = client.get("/metrics").text
    assert 'modelreg_oidc_refusals_total{reason="provider",via="console"} 5.0' in metrics
    assert 'modelreg_oidc_refusals_total{reason="state",via="console"} 5.0' in metrics


def test_a_replayed_code_is_refused(client, container):
    url = start(client)
    flow_cookie = client.cookies.get(ui.OIDC_FLOW_COOKIE)
    callback = provider_login(url, "alice")
    assert back(client, callback).status_code == 303
    # The same code and state again, with the flow's cookie put back (as an attacker who kept both would).
    client.cookies.clear()
    client.cookies.set(ui.OIDC_FLOW_COOKIE, flow_cookie, domain="testserver.local", path="/ui/sign-in/oidc")
    answer = back(client, callback)
    assert answer.status_code == 401 and "refused the authorization code" in answer.text, answer.text[:800]
    assert client.cookies.get(ui.SESSION_COOKIE) is None
    assert refusals(container) == []  # the provider redeemed no code: nothing anyone could not have caused


def test_an_id_token_issued_to_another_client_is_refused(container, provider):
    """A genuine ID token of the same provider, for the same user and nonce, but for client ``other-app``."""
    config = oidc.config_from_settings(container.settings)
    metadata, _ = oidc.provider_metadata(config)
    redirect = OTHER_CLIENT["redirect_uris"][0]
    with OAuth2Client(OTHER_CLIENT["client_id"], OTHER_CLIENT["client_secret"], scope="openid profile groups",
                      redirect_uri=redirect, code_challenge_method="S256") as other:
        verifier = "v" * 64
        url, _ = other.create_authorization_url(metadata["authorization_endpoint"], nonce="the-nonce",
                                                code_verifier=verifier)
        with httpx.Client(timeout=20) as browser:
            code = parse_qs(urlsplit(log_in(browser, url, "alice", stop_at=redirect)).query)["code"][0]
        id_token = other.fetch_token(metadata["token_endpoint"], code=code, code_verifier=verifier)["id_token"]
    now = container.clock.now()
    # It is a valid token (for its own audience)...
    assert oidc.verify_id_token(config, id_token, client_id="other-app", nonce="the-nonce", now=now)["sub"] == "alice"
    # ...that our client does not accept.
    with pytest.raises(oidc.SignInRefusedError) as refused:
        oidc.verify_id_token(config, id_token, client_id=config.client_id, nonce="the-nonce", now=now)
    assert refused.value.reason == "id-token" and "aud" in refused.value.message
    # Nor with another nonce than the one it was issued for.
    with pytest.raises(oidc.SignInRefusedError, match="nonce"):
        oidc.verify_id_token(config, id_token, client_id="other-app", nonce="another-nonce", now=now)


def test_an_expired_id_token_is_refused(settings):
    """The provider's ID tokens live an hour; a registry whose clock reads two hours later finds them expired
    (beyond its leeway of a minute), as it would find one held back and presented late."""
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=2)
    c = bootstrap(settings, clock=ManualClock(later))
    try:
        person(c, "root", "acme")
        with TestClient(create_app(c), raise_server_exceptions=False) as client:
            answer = back(client, provider_login(start(client), "alice"))
            assert answer.status_code == 401 and "expired" in answer.text, answer.text[:800]
            assert client.cookies.get(ui.SESSION_COOKIE) is None
        assert [r["reason"] for r in refusals(c)] == ["id-token"]
    finally:
        c.dispose()


def test_a_user_in_no_mapped_group_is_refused_and_no_principal_is_made(client, container):
    answer = back(client, provider_login(start(client), "carol"))
    assert answer.status_code == 401 and "in no group this registry maps" in answer.text
    assert client.cookies.get(ui.SESSION_COOKIE) is None
    with container.session_factory() as session:
        assert session.scalar(select(Principal).where(Principal.name == "carol")) is None
    assert refusals(container) == [{"reason": "no-mapped-group", "via": "console",
                                    "message": "'carol' is in no group this registry maps to a role: "
                                               "ask an administrator"}]


def test_a_provider_user_cannot_take_over_a_principal_an_administrator_made(client, container):
    token = person(container, "alice", "acme", ("submitter", ""))
    answer = back(client, provider_login(start(client), "alice"))
    assert answer.status_code == 401 and "not linked to this identity" in answer.text
    with container.session_factory() as session:
        alice = authenticate(session, token)
        assert alice.roles["acme"] == frozenset({(Role.SUBMITTER, "")})
    assert [r["reason"] for r in refusals(container)] == ["name-taken"]


def test_a_callback_without_our_flow_cookie_or_with_a_forged_one_is_refused_unaudited(client, container):
    callback = provider_login(start(client), "alice")
    sealed = client.cookies.get(ui.OIDC_FLOW_COOKIE)
    client.cookies.clear()
    answer = back(client, callback)
    assert answer.status_code == 401 and "no sign-in was started in this browser" in answer.text
    flipped = sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]
    client.cookies.set(ui.OIDC_FLOW_COOKIE, flipped, domain="testserver.local", path="/ui/sign-in/oidc")
    answer = back(client, callback)
    assert answer.status_code == 401 and "not one this registry sealed" in answer.text
    assert client.cookies.get(ui.SESSION_COOKIE) is None and refusals(container) == []


def test_adoption_never_takes_over_an_administrator(client, container):
    """Issue 30: with adoption on, the provider's user ``Admin`` became the administrator ``admin``."""
    container.settings.oidc_adopt_existing_principals = True
    person(container, "alice", "acme", ("submitter", ""))
    admin_token = person(container, "admin", "acme")
    with container.session_factory() as session:
        session.scalar(select(Principal).where(Principal.name == "admin")).is_admin = True
        session.commit()
    answer = back(client, provider_login(start(client), "Admin"))
    assert answer.status_code == 401 and "is an administrator, which single sign-on never adopts" in answer.text
    assert client.cookies.get(ui.SESSION_COOKIE) is None
    with container.session_factory() as session:
        admin = session.scalar(select(Principal).where(Principal.name == "admin"))
        assert admin.oidc_identity is None and authenticate(session, admin_token).is_admin
    assert [r["reason"] for r in refusals(container)] == ["adopt-admin"]
    # Adoption itself still works, for a principal that is no administrator.
    client.cookies.clear()
    assert back(client, provider_login(start(client), "alice")).status_code == 303
    with container.session_factory() as session:
        assert session.scalar(select(Principal).where(Principal.name == "alice")).oidc_identity is not None


def test_the_reserved_name_system_is_never_provisioned(client, container):
    answer = back(client, provider_login(start(client), "system"))
    assert answer.status_code == 401 and "reserved for the registry itself" in answer.text
    with container.session_factory() as session:
        assert session.scalar(select(Principal).where(Principal.name == "system")) is None
    assert [r["reason"] for r in refusals(container)] == ["reserved-name"]


def test_a_user_dropped_from_every_mapped_group_loses_the_roles_and_the_session_at_the_refused_sign_in(
        client, container, provider):
    assert back(client, provider_login(start(client), "dave")).status_code == 303
    session_cookie = client.cookies.get(ui.SESSION_COOKIE)
    assert client.get("/ui").status_code == 200
    provider.set_groups("dave", [])
    try:
        client.cookies.clear()
        answer = back(client, provider_login(start(client), "dave"))
        assert answer.status_code == 401 and "in no group this registry maps" in answer.text
    finally:
        provider.set_groups("dave", ["ml-approvers"])
    with container.session_factory() as session:
        dave = session.scalar(select(Principal).where(Principal.name == "dave"))
        assert dave.roles == []
        assert session.scalar(select(ConsoleSession)).ended_why == "sso-groups-withdrawn"
        withdrawn = session.scalars(select(AuditEvent).where(AuditEvent.action == "auth.oidc_roles_withdrawn")).all()
        assert [e.details["sessions_ended"] for e in withdrawn] == [1]
    client.cookies.clear()
    client.cookies.set(ui.SESSION_COOKIE, session_cookie, domain="testserver.local", path="/ui")
    assert client.get("/ui", follow_redirects=False).status_code == 303  # to the sign-in page
