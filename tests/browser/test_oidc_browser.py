"""Single sign-on in a real browser: Chromium signs in to ``modelreg serve`` through npm's oidc-provider.

alice (group ``security-approvers``, mapped to approver/security in ``team``) clicks "Sign in with Test IdP",
logs in on the provider's own login page, consents, lands in the console, approves the pending version as
``security`` and signs out; the console then asks her to sign in again.
"""

from __future__ import annotations

import json

import pytest

from registry.client.api import RegistryApi
from tests.support.oidc import CONSOLE_CLIENT, start_provider
from tests.support.server import free_port, start_server
from tests.support.tiny_model import tiny_model_files
from tests.support.uploads import submit_upload, wait_for_state

TENANT, MODEL = "team", "tiny"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    client = {**CONSOLE_CLIENT, "redirect_uris": [f"http://127.0.0.1:{port}/ui/sign-in/oidc/callback"]}
    with start_provider([client]) as provider:
        s = start_server(tmp_path_factory.mktemp("sso") / "data", port=port, extra_env={
            "MODELREG_OIDC_ISSUER": provider.issuer, "MODELREG_OIDC_CLIENT_ID": client["client_id"],
            "MODELREG_OIDC_CLIENT_SECRET": client["client_secret"], "MODELREG_OIDC_PROVIDER_NAME": "Test IdP",
            "MODELREG_OIDC_GROUP_ROLES": json.dumps(
                {"security-approvers": {"tenant": TENANT, "role": "approver", "capacity": "security"}})})
        try:
            admin = RegistryApi(s.url, s.admin_token)
            admin.create_tenant(TENANT)
            admin.create_principal("sam")
            admin.grant_role("sam", TENANT, "submitter", "")
            sam = RegistryApi(s.url, admin.issue_token("sam")["token"])
            s.number = submit_upload(sam, TENANT, MODEL, tiny_model_files(11), "sso")
            wait_for_state(admin, TENANT, MODEL, s.number)
            s.api = admin
            yield s
        finally:
            s.stop()


def test_alice_signs_in_through_the_provider_approves_as_security_and_signs_out(browser, server, shots):
    context = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        page.goto("/ui/sign-in")
        page.get_by_role("link", name="Sign in with Test IdP").click()
        page.wait_for_url("**/interaction/**")
        page.screenshot(path=shots / "sso-provider-login.png", full_page=True)
        page.locator("input[name=login]").fill("alice")
        page.locator("input[name=password]").fill("correct horse")
        page.get_by_role("button", name="Sign-in").click()
        page.get_by_role("button", name="Continue").click()  # the provider's consent page
        page.wait_for_url(f"{server.url}/ui**")
        assert "alice" in page.locator("body").inner_text()
        page.get_by_role("link", name="Approvals").click()
        page.get_by_role("link", name=f"{TENANT}/{MODEL}@{server.number}").click()
        assert page.get_by_label("Capacity").input_value() == "security"
        page.get_by_label("Comment").fill("scanned clean, signed in with SSO")
        page.get_by_role("button", name="Approve").click()
        assert "Your approval is recorded." in page.get_by_role("status").first.inner_text()
        page.screenshot(path=shots / "sso-approved.png", full_page=True)
        approvals = server.api.approval_status(TENANT, MODEL, server.number)["approvals"]
        assert [(a["principal"], a["capacity"], a["decision"]) for a in approvals] == [
            ("alice", "security", "approve")], approvals
        page.get_by_role("button", name="Sign out").click()
        page.wait_for_url("**/ui/sign-in**")
        page.goto("/ui/approvals")
        assert "/ui/sign-in" in page.url
    finally:
        context.close()
