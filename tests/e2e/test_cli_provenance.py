"""The ten provenance questions as an auditor asks them: `modelreg provenance ... --json` against `modelreg serve`,
on the realistic history of ``tests/support/provenance_world.py``. Each answer is held to the history, and
to the API's answer to the same question (the CLI follows every page)."""

from __future__ import annotations

import json
import sqlite3

import httpx
import pytest

from tests.support.hf_upstream import HfUpstream
from tests.support.provenance_world import build, hub_repos
from tests.support.server import start_server


@pytest.fixture(scope="module")
def hub():
    with HfUpstream() as upstream:
        upstream.shas = hub_repos(upstream)
        yield upstream


@pytest.fixture(scope="module")
def live(tmp_path_factory, hub):
    server = start_server(tmp_path_factory.mktemp("provenance") / "data",
                          extra_env={"MODELREG_HF_ALLOWED_ENDPOINTS": json.dumps([hub.url])})
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            world = build(client, server.admin_token, hub, hub.shas)
            yield server, world
    finally:
        server.stop()


def ask(server, world, who: str, *args: str) -> dict:
    result = server.cli("provenance", *args, "--json", token=world.tokens[who])
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def api(world, who: str, path: str, **params) -> dict:
    r = world.ask(who, path, **params)
    assert r.status_code == 200, r.text
    return r.json()


def test_origin_files_scans_evals_license_and_approvals(live):
    server, world = live
    origin = ask(server, world, "aud-acme", "origin", "acme/llm@prod")
    assert origin == api(world, "aud-acme", "acme/llm/origin", ref="prod")
    assert (origin["version"], origin["requested_revision"], origin["resolved_revision"], origin["submitted_by"]) == \
        (1, "v1.0", world.shas["v1.0"], "sam")
    assert origin["source"]["repo"] == "org/llm"

    files = ask(server, world, "aud-acme", "files", "acme/llm@3")
    assert files == api(world, "aud-acme", "acme/llm/files", ref="3")
    assert {f["path"] for f in files["files"]} >= {"NOTICE", "config.json"}
    assert files["signed_by"]["key_id"] in {k["key_id"] for k in httpx.get(f"{server.url}/v1/keys").json()["keys"]}

    scans = ask(server, world, "aud-acme", "scans", "acme/llm@1")
    assert scans == api(world, "aud-acme", "acme/llm/scans", ref="1")
    assert all(s["scanner"] and s["scanner_version"] for f in scans["files"] for s in f["scans"])

    evals = ask(server, world, "aud-acme", "evals", "acme/llm@2")
    assert [(e["suite"], e["runner"]) for e in evals["evals"]] == [("sanity", "weights-sanity")]
    assert evals["evals"][0]["runner_version"] and len(evals["evals"][0]["suite_version"]) == 64

    license_ = ask(server, world, "aud-acme", "license", "acme/nc@1")
    assert license_["license"].lower() == "cc-by-nc-4.0" and not license_["allow_listed"]
    assert [a["principal"] for a in license_["approved_by"]] == ["lex"]

    approvals = ask(server, world, "aud-acme", "approvals", "acme/llm@1")
    assert [(a["principal"], a["capacity"]) for a in approvals["approvals"]] == [("sec", "security"), ("mia", "ml")]
    assert approvals["separation_of_duties"]["held"] is True
    partial = ask(server, world, "aud-acme", "approvals", "acme/llm@4")["separation_of_duties"]
    assert partial["held"] is False and partial["reasons"]
    human = server.cli("provenance", "approvals", "acme/llm@4", token=world.tokens["aud-acme"])
    assert "separation of duties: NOT held" in human.stdout


def test_alias_history_and_what_it_pointed_at(live):
    server, world = live
    doc = ask(server, world, "aud-acme", "alias", "acme/llm", "prod")
    assert [(m["action"], m["to_version"]) for m in doc["moves"]] == [("promote", 1), ("promote", 2), ("rollback", 1)]
    assert doc["moves"][1]["to_canary"] == {"version": 3, "tenants": ["beta"]}
    then = ask(server, world, "aud-acme", "alias", "acme/llm", "prod", "--at", world.times["prod-2"])
    assert then["at"]["version"] == 2 and then["at"]["canary"]["version"] == 3
    assert ask(server, world, "aud-acme", "alias", "acme/llm", "prod", "--at", world.times["before"])["at"]["version"] \
        is None


def test_nodes_of_a_version_and_nodes_left_on_a_revoked_one(live):
    server, world = live
    nodes = ask(server, world, "aud-acme", "nodes", "acme/llm@2")
    # The nodes that fetched its manifests (count); one that only downloads through /hf is the next test's, which
    # may run before this one.
    assert [(n["principal"], n["refs"]) for n in nodes["nodes"] if n["count"]] \
        == [("node-1", ["prod"]), ("node-3", ["2"])]
    revoked = ask(server, world, "aud-acme", "revoked-nodes", "--tenant", "acme")
    assert [(n["principal"], n["model"], n["version"]) for n in revoked["nodes"]] == [("node-2", "acme/llm", 3)]


def test_blob_answers_only_from_the_auditors_tenants(live):
    server, world = live
    acme = ask(server, world, "aud-acme", "blob", f"sha256:{world.shared_digest}")
    globex = ask(server, world, "aud-globex", "blob", f"sha256:{world.shared_digest}")
    assert [(v["model"], v["version"]) for v in acme["versions"]] == [("acme/llm", 1)]
    assert [(v["model"], v["version"]) for v in globex["versions"]] == [("globex/llm", 1)]
    assert ask(server, world, "aud-acme", "blob", f"sha256:{world.globex_only_digest}")["versions"] == []
    other = server.cli("provenance", "origin", "globex/llm@1", "--json", token=world.tokens["aud-acme"])
    assert other.returncode == 1 and "permission-denied" in other.stderr and other.stdout == ""


def test_bad_input_is_one_line(live):
    server, world = live
    for args in (("origin", "acme/llm"), ("origin", "acme@1"), ("blob", "deadbeef"), ("files", "acme/llm@preview")):
        r = server.cli("provenance", *args, token=world.tokens["aud-acme"])
        assert r.returncode == 1, args
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error:"), (args, r.stderr)


def test_audit_log_against_saved_checkpoints(live, tmp_path):
    server, world = live
    made = server.cli("audit", "checkpoint", "--data-dir", str(server.data_dir), "--json")
    assert made.returncode == 0, made.stderr
    saved = server.cli("audit", "checkpoints", "--json", token=world.tokens["aud-acme"], check=True).stdout
    path = tmp_path / "checkpoints.json"
    path.write_text(saved)
    doc = ask(server, world, "aud-acme", "audit-log", "--checkpoints", str(path))
    assert doc["intact"] and doc["checkpoints"] == len(json.loads(saved)) >= 1
    assert doc["newest_checkpoint"]["event_id"] == json.loads(made.stdout)["event_id"]

    db = sqlite3.connect(server.data_dir / "registry.db")
    try:
        original = db.execute("SELECT actor FROM audit_events WHERE id = 2").fetchone()[0]
        db.execute("UPDATE audit_events SET actor = 'mallory' WHERE id = 2")
        db.commit()
        broken = server.cli("provenance", "audit-log", "--checkpoints", str(path), "--json",
                            token=world.tokens["aud-acme"])
        assert broken.returncode == 1
        answer = json.loads(broken.stdout)
        assert not answer["intact"] and answer["broken"]["event_id"] == 2
    finally:
        db.execute("UPDATE audit_events SET actor = ? WHERE id = 2", (original,))
        db.commit()
        db.close()
    assert ask(server, world, "aud-acme", "audit-log", "--checkpoints", str(path))["intact"]


def test_an_allow_listed_license_is_said_to_need_no_approval(live):
    """Question 5: mit is on the allow-list, so nobody approved acme/llm's license because nobody had to."""
    server, world = live
    doc = ask(server, world, "aud-acme", "license", "acme/llm@1")
    assert doc["allow_listed"] and doc["approved_by"] == []
    human = server.cli("provenance", "license", "acme/llm@1", token=world.tokens["aud-acme"]).stdout
    assert "approved by: nobody needed to (the license is on the allow-list)" in human
    needed = server.cli("provenance", "license", "acme/nc@1", token=world.tokens["aud-acme"]).stdout
    assert "approved by: lex (legal" in needed and "allow-list" not in needed


def test_downloads_through_hf_show_among_the_nodes(live):
    """Question 8: a principal that only downloads through /hf shows, with one row per day however many
    requests it makes."""
    server, world = live
    world.call("admin", "POST", "/v1/principals", json={"name": "trainer"})
    world.call("admin", "POST", "/v1/principals/trainer/roles", json={"tenant": "acme", "role": "node"})
    world.tokens["trainer"] = world.call("admin", "POST", "/v1/principals/trainer/tokens", json={})["token"]
    path = "/hf/acme/llm/resolve/2/config.json"
    assert world.client.head(path, headers=world.auth("trainer")).status_code == 200  # no download
    for headers in ({}, {"Range": "bytes=0-9"}, {}):
        assert world.client.get(path, headers={**world.auth("trainer"), **headers}).status_code in (200, 206)
    nodes = ask(server, world, "aud-acme", "nodes", "acme/llm@2")
    assert nodes == api(world, "aud-acme", "acme/llm/nodes", ref="2")
    row = next(n for n in nodes["nodes"] if n["principal"] == "trainer")
    assert (row["count"], row["hf_downloads"], row["refs"]) == (0, 3, [])
    assert row["first_at"] <= row["last_at"]
    assert [n["principal"] for n in nodes["nodes"]] == ["node-1", "node-3", "trainer"]
    manifests_only = next(n for n in nodes["nodes"] if n["principal"] == "node-1")
    assert manifests_only["hf_downloads"] == 0 and manifests_only["count"] >= 1
    # The first page of one principal, then the rest: the two sources page together by name.
    page = api(world, "aud-acme", "acme/llm/nodes", ref="2", limit=2)
    assert [n["principal"] for n in page["nodes"]] == ["node-1", "node-3"] and page["next_cursor"]
    rest = api(world, "aud-acme", "acme/llm/nodes", ref="2", limit=2, cursor=page["next_cursor"])
    assert [n["principal"] for n in rest["nodes"]] == ["trainer"] and rest["next_cursor"] is None
    human = server.cli("provenance", "nodes", "acme/llm@2", token=world.tokens["aud-acme"]).stdout
    assert "trainer: 0 manifests, 3 /hf downloads" in human
    db = sqlite3.connect(server.data_dir / "registry.db")
    try:
        assert db.execute("SELECT count, principal, channel FROM downloads").fetchall() == [(3, "trainer", "hf")]
    finally:
        db.close()
