"""Approvals as people make them: `modelreg approve/reject/status/policy eval` against `modelreg serve`."""

from __future__ import annotations

import json
import shutil

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
