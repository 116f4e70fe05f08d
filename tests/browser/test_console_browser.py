"""The web console in a real browser: Chromium (Debian's) driven by Playwright against ``modelreg serve``.

One server for the module: tenant ``team`` with a submitter who is also a security approver (sam), a
security approver (sec), an ml approver (mia), an auditor (aud) and a serving node; sam uploads a tiny
model whose source label is markup. The tests run in order: the submitter fails to approve, the
approvers approve, the auditor traces a blob, every page is captured and checked for accessible names.
"""

from __future__ import annotations

import pytest

from registry.client.api import RegistryApi
from tests.support.server import start_server
from tests.support.tiny_model import tiny_model_files
from tests.support.uploads import submit_upload, wait_for_state

LABEL = "<script>window.__pwned = 1</script><b>bold</b>"
TENANT, MODEL = "team", "tiny"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("console") / "data")
    admin = RegistryApi(s.url, s.admin_token)
    admin.create_tenant(TENANT)
    tokens = {"admin": s.admin_token}
    for name, roles in (("sam", [("submitter", ""), ("approver", "security")]), ("sec", [("approver", "security")]),
                        ("mia", [("approver", "ml")]), ("aud", [("auditor", "")]), ("node1", [("node", "")])):
        admin.create_principal(name)
        for role, capacity in roles:
            admin.grant_role(name, TENANT, role, capacity)
        tokens[name] = admin.issue_token(name)["token"]
    files = tiny_model_files(7)
    sam = RegistryApi(s.url, tokens["sam"])
    number = submit_upload(sam, TENANT, MODEL, files, LABEL)
    wait_for_state(admin, TENANT, MODEL, number)
    entries = admin.version(TENANT, MODEL, number)["files"]
    s.tokens, s.number, s.files, s.api = tokens, number, entries, admin
    yield s
    s.stop()


@pytest.fixture
def page(browser, server):
    context = browser.new_context(base_url=server.url, viewport={"width": 1280, "height": 900})
    p = context.new_page()
    p.set_default_timeout(20_000)
    yield p
    context.close()


def sign_in(page, token: str) -> None:
    page.goto("/ui/sign-in")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()


def version_url(server) -> str:
    return f"/ui/models/{TENANT}/{MODEL}/versions/{server.number}"


def test_the_submitter_cannot_approve_their_own_version_and_sees_why(page, server, shots):
    sign_in(page, server.tokens["sam"])
    page.get_by_role("link", name="Approvals").click()
    row = page.get_by_role("row").filter(has_text=f"{TENANT}/{MODEL}@{server.number}")
    assert "you submitted it" in row.inner_text()
    row.get_by_role("link").click()
    page.get_by_label("Capacity").select_option("security")
    page.get_by_label("Comment").fill("my own work")
    page.get_by_role("button", name="Approve").click()
    alert = page.get_by_role("alert")
    assert "submitted" in alert.inner_text().lower()
    page.screenshot(path=shots / "version-separation-of-duties.png", full_page=True)
    page.get_by_role("link", name="Back to the page you came from").click()
    assert page.url.endswith(version_url(server)) and page.locator("#state").inner_text() == "awaiting_approval"
    assert server.api.approval_status(TENANT, MODEL, server.number)["approvals"] == []


def test_an_approver_finds_the_pending_version_approves_it_and_sees_it_approved(page, server, shots):
    # Policy wants security and ml: sec decides in the console too, then mia completes it.
    for who, capacity in (("sec", "security"), ("mia", "ml")):
        page.context.clear_cookies()
        sign_in(page, server.tokens[who])
        page.get_by_role("link", name="Approvals").click()
        page.screenshot(path=shots / f"approvals-{who}.png", full_page=True)
        page.get_by_role("link", name=f"{TENANT}/{MODEL}@{server.number}").click()
        assert page.get_by_label("Capacity").input_value() == capacity
        page.get_by_label("Comment").fill(f"{capacity} review done")
        page.get_by_role("button", name="Approve").click()
        assert "Your approval is recorded." in page.get_by_role("status").first.inner_text()
    assert page.locator("#state").inner_text() == "approved"
    page.screenshot(path=shots / "version-approved.png", full_page=True)
    page.get_by_role("link", name="Approvals").click()
    assert "Nothing awaits you." in page.inner_text("main")


def test_an_ml_approver_promotes_the_version_and_sees_the_alias_history(page, server, shots):
    sign_in(page, server.tokens["mia"])
    page.goto(f"/ui/models/{TENANT}/{MODEL}")
    page.get_by_label("Alias", exact=True).fill("prod")
    page.get_by_label("Version", exact=True).select_option(str(server.number))
    page.get_by_label("Comment", exact=True).fill("first release")
    page.get_by_role("button", name="Promote").click()
    assert "The alias moved." in page.get_by_role("status").inner_text()
    assert f"prod → @{server.number}" in page.inner_text("main") and "first release" in page.inner_text("main")
    page.screenshot(path=shots / "model.png", full_page=True)
    # A serving node fetches what prod names: the auditor's questions below have a node to find.
    RegistryApi(server.url, server.tokens["node1"]).manifest(TENANT, MODEL, "prod")


def test_an_auditor_finds_the_versions_containing_a_blob(page, server, shots):
    sign_in(page, server.tokens["aud"])
    page.get_by_role("link", name="Provenance").click()
    page.get_by_label("Node (principal)").fill("node1")
    page.get_by_role("button", name="Find what it fetched").click()
    assert f"{TENANT}/{MODEL}@{server.number}" in page.locator("#node-answer").inner_text()
    blob = next(f for f in server.files if f["path"].endswith(".safetensors"))
    page.get_by_label("Blob digest").fill(f"sha256:{blob['sha256']}")
    page.get_by_role("button", name="Find versions").click()
    answer = page.locator("#blob-answer")
    assert blob["path"] in answer.inner_text()
    page.screenshot(path=shots / "provenance-blob.png", full_page=True)
    answer.get_by_role("link", name=f"{TENANT}/{MODEL}@{server.number}").click()
    assert page.url.endswith(version_url(server))
    assert blob["sha256"] in page.inner_text("main")


def test_a_label_holding_markup_is_shown_as_text(page, server):
    sign_in(page, server.tokens["aud"])
    page.goto(version_url(server))
    assert LABEL in page.locator(".source").inner_text()
    assert page.locator(".source b").count() == 0
    assert page.evaluate("window.__pwned") is None


def test_a_node_token_cannot_sign_in(page, server):
    sign_in(page, server.tokens["node1"])
    assert "a node cannot sign in" in page.get_by_role("alert").inner_text()
    page.goto("/ui/approvals")
    assert "/ui/sign-in" in page.url


# Every control that is not hidden must have a name a screen reader can say.
UNNAMED = """() => {
  const out = [];
  for (const el of document.querySelectorAll('input:not([type=hidden]), select, textarea, button, svg[role=img]')) {
    const id = el.getAttribute('id');
    const label = id && document.querySelector(`label[for="${id}"]`);
    const named = (label && label.textContent.trim()) || el.getAttribute('aria-label') ||
      el.getAttribute('aria-labelledby') || (el.tagName === 'BUTTON' && el.textContent.trim()) ||
      el.closest('label');
    if (!named) out.push(el.outerHTML.slice(0, 120));
  }
  for (const form of document.querySelectorAll('form')) {
    if (!form.querySelector('button[type=submit], input[type=submit]')) out.push('form without a submit button');
  }
  return out;
}"""


def test_every_page_is_captured_and_its_forms_and_buttons_have_accessible_names(page, browser, server, shots):
    page.goto("/ui/sign-in")
    pages = {"sign-in": "/ui/sign-in"}
    unnamed = {"sign-in": page.evaluate(UNNAMED)}
    page.screenshot(path=shots / "sign-in.png", full_page=True)
    sign_in(page, server.tokens["admin"])
    blob = server.files[0]["sha256"]
    pages.update({
        "models": "/ui", "approvals": "/ui/approvals", "model": f"/ui/models/{TENANT}/{MODEL}",
        "version": version_url(server), "audit": f"/ui/audit?tenant={TENANT}",
        "provenance": f"/ui/provenance?digest=sha256:{blob}&tenant={TENANT}&model={MODEL}&alias=prod&node=node1",
    })
    for name, url in list(pages.items())[1:]:
        response = page.goto(url)
        assert response.status == 200, (name, response.status)
        unnamed[name] = page.evaluate(UNNAMED)
        page.screenshot(path=shots / f"{name}.png", full_page=True)
    assert not any(unnamed.values()), {k: v for k, v in unnamed.items() if v}
    # The same version page on a phone.
    phone = browser.new_context(base_url=server.url, viewport={"width": 390, "height": 844}, is_mobile=True)
    try:
        p = phone.new_page()
        sign_in(p, server.tokens["admin"])
        p.goto(version_url(server))
        width = p.evaluate("document.documentElement.scrollWidth")
        p.screenshot(path=shots / "version-phone.png", full_page=True)
        assert width <= 400, f"the version page scrolls sideways on a phone ({width}px)"
    finally:
        phone.close()
    print(f"screenshots of {len(pages) + 1} pages in {shots}")
    assert len(list(shots.glob("*.png"))) >= len(pages) + 1


def test_the_version_page_shows_the_release_unit_diff_of_a_chat_template_change(page, server, shots):
    """Version 2 changes only the chat template inside tokenizer_config.json: the page lists the components,
    shows the change against prod member by member, and says which file a security approval must name."""
    files = tiny_model_files(7)
    config = files["tokenizer_config.json"].replace(b"{% endfor %}", b"{% if 'deploy' in m['content'] %}obey"
                                                     b"{% endif %}{% endfor %}")
    assert config != files["tokenizer_config.json"]
    sam = RegistryApi(server.url, server.tokens["sam"])
    number = submit_upload(sam, TENANT, MODEL, {**files, "tokenizer_config.json": config}, "template-edit")
    wait_for_state(server.api, TENANT, MODEL, number)
    sign_in(page, server.tokens["sec"])
    page.goto(f"/ui/models/{TENANT}/{MODEL}/versions/{number}")
    unit = page.locator("#release-unit")
    assert f"Changed since version {server.number} (prod)" in unit.inner_text()
    rows = unit.locator("#component-diff tbody tr")
    assert rows.count() == 1
    assert rows.first.locator("td").all_inner_texts() == [
        "chat_templates", "changed", "~ tokenizer_config.json#chat_template"]
    assert "a security approval must name tokenizer_config.json" in unit.inner_text()
    shown = unit.locator(".template-diff")
    assert shown.get_attribute("data-member") == "tokenizer_config.json#chat_template"
    assert "suspicious" in shown.locator("h4").inner_text()
    assert "'deploy' in m['content']" in shown.locator(".findings").inner_text()
    shown.get_by_text("Rendered differently: trigger-deploy", exact=True).click()
    assert "obey" in shown.locator("details[open] pre").first.inner_text()
    components = unit.locator("table").first.locator("tbody tr td:first-child").all_inner_texts()
    assert components == ["weights", "tokenizer", "chat_templates", "generation_config", "config"]
    page.screenshot(path=shots / "version-unit-diff.png", full_page=True)
