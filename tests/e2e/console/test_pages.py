"""The console's pages show only what the principal may see: lists and their filters, the audit page, its log
checkpoint and inclusion check, provenance, facts, exports with the caller's rights; hostile query strings
are answered in words, never a 500."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from registry.auth import authenticate
from tests.support.console import awaiting_upload, build_console_world, csrf_of, sign_in
from tests.support.tiny_model import tiny_model_files

pytestmark = pytest.mark.seeded(builder=build_console_world)


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


def test_the_version_page_shows_where_it_runs_to_auditors(client, world):
    number, tokens = world["number"], world["tokens"]
    r = client.post("/v1/receipts", headers={"Authorization": f"Bearer {tokens['node']}"}, json={
        "program": "cache-warm", "node": "gpu-3", "places": [
            {"model": "acme/tiny", "version": number, "where": "path", "path": "/var/cache/<b>modelreg</b>"}]})
    assert r.status_code == 200 and r.json()["recorded"] == 1, r.text
    sign_in(client, tokens["aud"])
    page = client.get(f"/ui/models/acme/tiny/versions/{number}").text
    assert "Where it runs" in page and "gpu-3" in page and "cache-warm" in page
    assert "/var/cache/&lt;b&gt;modelreg&lt;/b&gt;" in page and "<b>modelreg" not in page
    client.cookies.clear()
    sign_in(client, tokens["sec"])  # an approver audits nothing: no places shown
    page = client.get(f"/ui/models/acme/tiny/versions/{number}").text
    assert "Where it runs" not in page and "gpu-3" not in page
