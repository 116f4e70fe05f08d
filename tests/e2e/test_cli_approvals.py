"""Approvals as people make them: `modelreg approve/reject/status/policy eval` against `modelreg serve`."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from registry.policy import default_policy_dir
from tests.support.hf_upstream import HfUpstream
from tests.support.server import start_server
from tests.support.tiny_model import tiny_model_files


@pytest.fixture(scope="module")
def hub():
    with HfUpstream() as upstream:
        upstream.add_repo("org/clean", card_data={"license": "mit"})
        upstream.commit("org/clean", tiny_model_files(21))
        upstream.add_repo("org/remote", card_data={"license": "mit"})
        upstream.commit("org/remote", {**tiny_model_files(22), "modeling_tiny.py": b"print('hi')\n"})
        upstream.add_repo("org/remote-later", card_data={"license": "mit"})
        upstream.commit("org/remote-later", {**tiny_model_files(23), "modeling_tiny.py": b"print('later')\n"})
        yield upstream


def people(server) -> dict[str, str]:
    """A submitter and three approvers in tenant `team`; their tokens."""
    server.cli("tenant", "create", "team", check=True)
    tokens = {}
    for name, role, capacity in (("sam", "submitter", ""), ("sec", "approver", "security"),
                                 ("mia", "approver", "ml"), ("sam", "approver", "security")):
        if name not in tokens:
            server.cli("principal", "create", name, check=True)
        server.cli("principal", "grant", name, "--tenant", "team", "--role", role, "--capacity", capacity,
                   check=True)
        tokens[name] = server.cli("principal", "token", name, check=True).stdout.strip()
    return tokens


def submit(server, hub, repo: str, model: str, token: str) -> int:
    result = server.cli("submit", f"hf://{repo}", "--model", model, "--hf-endpoint", hub.url, "--wait",
                        "--json", token=token, timeout=300)
    assert result.returncode == 0, result.stderr
    version = json.loads(result.stdout)
    assert version["state"] == "awaiting_approval", version
    return version["version"]


@pytest.fixture(scope="module")
def server(tmp_path_factory, hub):
    s = start_server(tmp_path_factory.mktemp("approvals") / "data",
                     extra_env={"MODELREG_HF_ALLOWED_ENDPOINTS": json.dumps([hub.url])})
    s.tokens = people(s)
    yield s
    s.stop()


def test_submit_then_security_and_ml_approve_and_it_is_approved(server, hub):
    n = submit(server, hub, "org/clean", "team/clean", server.tokens["sam"])
    status = json.loads(server.cli("status", "team/clean", str(n), "--json", check=True).stdout)
    assert status["state"] == "awaiting_approval"
    assert sorted(u["capacity"] for u in status["unmet"]) == ["ml", "security"]
    dry = json.loads(server.cli("policy", "eval", "team/clean", str(n), "--json", check=True).stdout)
    assert dry["decision"]["outcome"] == "pending" and dry["decision"]["input_digest"] == \
        status["decision"]["input_digest"]

    # The submitter holds the security capacity too, and still may not approve their own version.
    own = server.cli("approve", "team/clean", str(n), "--capacity", "security", token=server.tokens["sam"])
    assert own.returncode == 1 and "separation-of-duties" in own.stderr
    assert len(own.stderr.strip().splitlines()) == 1 and own.stderr.startswith("error:")

    first = server.cli("approve", "team/clean", str(n), "--capacity", "security", "--comment", "scans clean",
                       "--json", token=server.tokens["sec"])
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["state"] == "awaiting_approval"
    again = server.cli("approve", "team/clean", str(n), "--capacity", "security", token=server.tokens["sec"])
    assert again.returncode == 1 and "already-decided" in again.stderr

    done = server.cli("approve", "team/clean", str(n), "--capacity", "ml", token=server.tokens["mia"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"team/clean@{n}: approved"
    assert "approve by sec as security" in done.stdout and "scans clean" in done.stdout
    shown = json.loads(server.cli("status", "team/clean", str(n), "--json", check=True).stdout)
    assert shown["state"] == "approved" and shown["decision"]["allowed"] and shown["unmet"] == []
    assert [a["principal"] for a in shown["approvals"]] == ["sec", "mia"]


def test_remote_code_waits_for_security_naming_the_file_and_a_reject_rejects(server, hub):
    n = submit(server, hub, "org/remote", "team/remote", server.tokens["sam"])
    status = server.cli("status", "team/remote", str(n), check=True).stdout
    assert "unmet: security.remote-code" in status and "unmet: security.file-review" in status
    named = server.cli("approve", "team/remote", str(n), "--capacity", "security",
                       "--file", "modeling_tiny.py", "--json", token=server.tokens["sec"])
    assert named.returncode == 0, named.stderr
    body = json.loads(named.stdout)
    assert [u["code"] for u in body["unmet"]] == ["approval.missing"]
    assert body["approvals"][0]["files"] == ["modeling_tiny.py"]
    rejected = server.cli("reject", "team/remote", str(n), "--capacity", "ml", "--comment", "not needed",
                          "--json", token=server.tokens["mia"])
    assert rejected.returncode == 0, rejected.stderr
    assert json.loads(rejected.stdout)["state"] == "rejected"
    late = server.cli("approve", "team/remote", str(n), "--capacity", "ml", token=server.tokens["mia"])
    assert late.returncode == 1 and "not-awaiting-approval" in late.stderr


def test_an_approval_leaving_a_file_review_unmet_needs_yes_and_the_review_can_be_added_later(server, hub):
    n = submit(server, hub, "org/remote-later", "team/later", server.tokens["sam"])
    sec, mia = server.tokens["sec"], server.tokens["mia"]
    # Told before anything is recorded: what the approval would leave that the security capacity could satisfy.
    refused = server.cli("approve", "team/later", str(n), "--capacity", "security", token=sec)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "security.file-review" in refused.stderr and "modeling_tiny.py" in refused.stderr
    assert "--yes" in refused.stderr
    assert json.loads(server.cli("status", "team/later", str(n), "--json", check=True).stdout)["approvals"] == []
    # An ml approval leaves nothing of ml's unmet: no question asked.
    server.cli("approve", "team/later", str(n), "--capacity", "ml", token=mia, check=True)
    accepted = server.cli("approve", "team/later", str(n), "--capacity", "security", "--yes", "--json", token=sec)
    assert accepted.returncode == 0, accepted.stderr
    body = json.loads(accepted.stdout)
    assert body["state"] == "awaiting_approval"
    assert [(u["code"], u.get("path")) for u in body["unmet"]] == [("security.file-review", "modeling_tiny.py")]

    # Only your own approval takes file reviews, only of files the version holds.
    admin = server.cli("approval", "add-files", "team/later", str(n), "--file", "modeling_tiny.py")
    assert admin.returncode == 1 and "capacity-not-held" in admin.stderr
    assert len(admin.stderr.strip().splitlines()) == 1
    unknown = server.cli("approval", "add-files", "team/later", str(n), "--file", "nope.py", token=sec)
    assert unknown.returncode == 1 and "invalid-input" in unknown.stderr and "nope.py" in unknown.stderr
    submitter = server.cli("approval", "add-files", "team/later", str(n), "--file", "modeling_tiny.py",
                           token=server.tokens["sam"])
    assert submitter.returncode == 1 and "no-approval-to-amend" in submitter.stderr

    added = server.cli("approval", "add-files", "team/later", str(n), "--file", "modeling_tiny.py", "--json",
                       token=sec)
    assert added.returncode == 0, added.stderr
    body = json.loads(added.stdout)
    assert body["state"] == "approved" and body["unmet"] == []
    assert {a["principal"]: a["files"] for a in body["approvals"]} == {"mia": [], "sec": ["modeling_tiny.py"]}
    events = httpx.get(f"{server.url}/v1/audit/events", params={"tenant": "team", "limit": 1000},
                       headers={"Authorization": f"Bearer {server.admin_token}"}).json()
    amended = [e for e in events if e["action"] == "version.approval.files-added"]
    assert len(amended) == 1 and amended[0]["actor"] == "sec" and amended[0]["subject"] == f"team/later@{n}"
    assert amended[0]["details"]["added"] == ["modeling_tiny.py"] and amended[0]["details"]["outcome"] == "approved"
    late = server.cli("approval", "add-files", "team/later", str(n), "--file", "modeling_tiny.py", token=sec)
    assert late.returncode == 1 and "not-awaiting-approval" in late.stderr


def test_cli_refuses_a_bad_model_in_one_line(server):
    r = server.cli("status", "no-slash", "1")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    r = server.cli("policy", "eval", "team/none", "1")
    assert r.returncode == 1 and "model-not-found" in r.stderr


def test_a_broken_policy_dir_given_by_setting_denies(tmp_path, hub):
    broken = tmp_path / "policies"
    shutil.copytree(default_policy_dir(), broken)
    (broken / "approval.rego").write_text("package modelreg.approval\n\ndecision := {\n")
    s = start_server(tmp_path / "data", extra_env={"MODELREG_HF_ALLOWED_ENDPOINTS": json.dumps([hub.url]),
                                                   "MODELREG_POLICY_DIR": str(broken)})
    try:
        tokens = people(s)
        n = submit(s, hub, "org/clean", "team/clean", tokens["sam"])
        for who, capacity in (("sec", "security"), ("mia", "ml")):
            s.cli("approve", "team/clean", str(n), "--capacity", capacity, token=tokens[who], check=True)
        status = json.loads(s.cli("status", "team/clean", str(n), "--json", check=True).stdout)
        assert status["state"] == "awaiting_approval"
        assert [u["code"] for u in status["unmet"]] == ["policy.error"]
        assert "approval.rego does not compile" in status["decision"]["error"]
    finally:
        s.stop()
