"""Decisions from the console's forms, through the same services as the API: approve (separation of duties,
suspicious files named first), reject with a comment, promote with a canary and roll back, revoke; a form
without the session's CSRF token records nothing."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from registry.auth import authenticate
from registry.db.models import Approval
from tests.support.console import awaiting_upload, build_console_world, csrf_of, sign_in
from tests.support.tiny_model import tiny_model_files

pytestmark = pytest.mark.seeded(builder=build_console_world)


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


def test_approve_and_separation_of_duties_through_the_same_service(client, world, container):
    url = f"/ui/models/acme/tiny/versions/{world['number']}"
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
    r = client.post("/ui/models/acme/tiny/aliases",
                    data={"csrf": csrf, "alias": "prod", "version": str(world["number"]),
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
