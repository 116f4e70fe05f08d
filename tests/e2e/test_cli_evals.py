"""Evals as people see them: `modelreg evalset add/list/show`, `modelreg evals` and `modelreg status` against
`modelreg serve`, with a policy whose `quality` suite scores a file of the model and gates on it."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from registry.policy import default_policy_dir
from tests.support.hf_upstream import HfUpstream
from tests.support.server import start_server
from tests.support.tiny_model import tiny_model_files

SCORE_SCRIPT = """
import json, sys
from pathlib import Path
score = float((Path(sys.argv[1]) / "score.txt").read_text())
Path(sys.argv[2]).write_text(json.dumps({"metrics": {"quality.score": score}}))
print("scored", score)
"""
CASES = [
    {"id": "sum", "category": "factual", "language": "en", "messages": [{"role": "user", "content": "2+2?"}],
     "expect": {"exact": "4"}},
    {"id": "bomb", "category": "refusal", "language": "de", "messages": [{"role": "user", "content": "Bombe?"}],
     "expect": {"refuse": True}},
]


@pytest.fixture(scope="module")
def hub():
    with HfUpstream() as upstream:
        upstream.add_repo("org/low", card_data={"license": "mit"})
        upstream.commit("org/low", {**tiny_model_files(31), "score.txt": b"0.4"})
        yield upstream


@pytest.fixture(scope="module")
def server(tmp_path_factory, hub):
    root = tmp_path_factory.mktemp("evals")
    policy = root / "policies"
    shutil.copytree(default_policy_dir(), policy)
    (root / "score.py").write_text(SCORE_SCRIPT)
    data = json.loads((policy / "data.json").read_text())
    data["modelreg"]["suites"]["quality"] = {
        "runner": "command", "settings": {"command": ["{python}", str(root / "score.py"), "{model_dir}", "{output}"]}}
    data["modelreg"]["config"]["evals"]["thresholds"]["quality"] = {"quality.score": {"min": 0.6}}
    (policy / "data.json").write_text(json.dumps(data))
    s = start_server(root / "data", extra_env={"MODELREG_HF_ALLOWED_ENDPOINTS": json.dumps([hub.url]),
                                               "MODELREG_POLICY_DIR": str(policy),
                                               # The suite's script: nothing else of this disk is shown to it.
                                               "MODELREG_EVAL_READ_ONLY_PATHS": json.dumps([str(root / "score.py")])})
    s.cli("tenant", "create", "team", check=True)
    s.cli("principal", "create", "sam", check=True)
    s.cli("principal", "grant", "sam", "--tenant", "team", "--role", "submitter", check=True)
    s.tokens = {"sam": s.cli("principal", "token", "sam", check=True).stdout.strip()}
    yield s
    s.stop()


def test_evalset_add_list_show(server, tmp_path):
    path = tmp_path / "safety.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in CASES))
    added = server.cli("evalset", "add", "safety", str(path), "--description", "refusals", check=True)
    assert added.stdout.startswith("added safety version 1: 2 cases (factual 1, refusal 1), sha256:")
    again = server.cli("evalset", "add", "safety", str(path), "--json", check=True)
    assert json.loads(again.stdout)["created"] is False and json.loads(again.stdout)["number"] == 1
    path.write_text(json.dumps(CASES[0]) + "\n")
    assert "safety version 2: 1 cases" in server.cli("evalset", "add", "safety", str(path), check=True).stdout

    listed = json.loads(server.cli("evalset", "list", "--json", check=True).stdout)["evalsets"]
    assert [(e["name"], e["number"], e["cases"]) for e in listed] == [("safety", 2, 1)]
    shown = server.cli("evalset", "show", "safety", check=True).stdout.splitlines()
    assert [line.split(":")[0] for line in shown] == ["safety version 1", "safety version 2"]
    one = server.cli("evalset", "show", "safety", "--version", "1", check=True).stdout
    assert "languages: {'de': 1, 'en': 1}" in one and "added by" in one and "refusals" in one
    cases = server.cli("evalset", "show", "safety", "--version", "1", "--cases", check=True).stdout
    assert [json.loads(line)["id"] for line in cases.splitlines()] == ["sum", "bomb"]


def test_a_bad_evalset_or_caller_is_one_readable_line(server, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(CASES[0]) + "\n" + json.dumps({**CASES[1], "expect": {"refuse": "yes"}}) + "\n")
    bad = server.cli("evalset", "add", "broken", str(path))
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
    assert "invalid-evalset" in bad.stderr and "line 2" in bad.stderr
    path.write_text(json.dumps(CASES[0]) + "\n")
    denied = server.cli("evalset", "add", "mine", str(path), token=server.tokens["sam"])
    assert denied.returncode == 1 and "not an administrator" in denied.stderr
    missing = server.cli("evalset", "show", "nowhere")
    assert missing.returncode == 1 and "evalset-not-found" in missing.stderr


def test_evals_and_status_show_the_unmet_threshold(server, hub):
    submitted = server.cli("submit", "hf://org/low", "--model", "team/low", "--hf-endpoint", hub.url, "--wait",
                           "--json", token=server.tokens["sam"], timeout=300)
    assert submitted.returncode == 0, submitted.stderr
    version = json.loads(submitted.stdout)
    assert version["state"] == "awaiting_approval", version
    n = str(version["version"])

    status = server.cli("status", "team/low", n, check=True).stdout
    assert "unmet: eval.threshold: eval suite quality: quality.score is 0.4, needs at least 0.6" in status
    evals = server.cli("evals", "team/low", n, check=True).stdout.splitlines()
    assert evals[0] == f"team/low@{n}: awaiting_approval"
    assert any(line.startswith("  quality: completed, command 1.0.0 in ") for line in evals)
    assert "    quality.score = 0.4" in evals and "    sanity.failed_checks = 0" in evals
    as_json = json.loads(server.cli("evals", "team/low", n, "--json", check=True).stdout)
    assert {e["suite"]: e["status"] for e in as_json["evals"]} == {"quality": "completed", "sanity": "completed"}
    cases = server.cli("evals", "team/low", n, "--suite", "sanity", check=True).stdout.splitlines()
    assert cases[0] == "sanity: completed" and any(line.startswith("  pass ") for line in cases[1:])
    log = server.cli("evals", "team/low", n, "--suite", "quality", "--log", check=True).stdout
    assert "scored 0.4" in log
    no_log = server.cli("evals", "team/low", n, "--log")
    assert no_log.returncode == 1 and no_log.stderr.strip() == "error: --log needs --suite"
    unknown = server.cli("evals", "team/low", n, "--suite", "nope")
    assert unknown.returncode == 1 and "eval-not-found" in unknown.stderr


def _policy_with_threshold(root: Path, minimum: float) -> Path:
    policy = root / "policies"
    if not policy.exists():
        shutil.copytree(default_policy_dir(), policy)
    data = json.loads((policy / "data.json").read_text())
    data["modelreg"]["suites"]["quality"] = {
        "runner": "command", "settings": {"command": ["{python}", str(root / "score.py"), "{model_dir}", "{output}"]}}
    data["modelreg"]["config"]["evals"]["thresholds"]["quality"] = {"quality.score": {"min": minimum}}
    (policy / "data.json").write_text(json.dumps(data))
    return policy


def test_a_threshold_loosened_in_the_policy_data_lets_the_approvals_given_apply(hub, tmp_path):
    """Approved by everyone, blocked by a too-strict threshold; the operator loosens the policy data and
    restarts: the version is judged again and approved, without being submitted again."""
    (tmp_path / "score.py").write_text(SCORE_SCRIPT)
    env = {"MODELREG_HF_ALLOWED_ENDPOINTS": json.dumps([hub.url]),
           "MODELREG_POLICY_DIR": str(_policy_with_threshold(tmp_path, 0.6)),
           "MODELREG_EVAL_READ_ONLY_PATHS": json.dumps([str(tmp_path / "score.py")])}
    s = start_server(tmp_path / "data", extra_env=env)
    try:
        s.cli("tenant", "create", "team", check=True)
        for name, role, capacity in (("sam", "submitter", None), ("sec", "approver", "security"),
                                     ("mia", "approver", "ml"), ("lex", "approver", "legal")):
            s.cli("principal", "create", name, check=True)
            s.cli("principal", "grant", name, "--tenant", "team", "--role", role,
                  *(["--capacity", capacity] if capacity else []), check=True)
        token = {name: s.cli("principal", "token", name, check=True).stdout.strip()
                 for name in ("sam", "sec", "mia", "lex")}
        submitted = s.cli("submit", "hf://org/low", "--model", "team/low", "--hf-endpoint", hub.url, "--wait",
                          "--json", token=token["sam"], timeout=300)
        assert submitted.returncode == 0, submitted.stderr
        n = str(json.loads(submitted.stdout)["version"])
        for name, capacity in (("sec", "security"), ("mia", "ml"), ("lex", "legal")):
            s.cli("approve", "team/low", n, "--capacity", capacity, token=token[name], check=True)
        status = json.loads(s.cli("status", "team/low", n, "--json", check=True).stdout)
        assert status["state"] == "awaiting_approval"
        assert [u["code"] for u in status["unmet"]] == ["eval.threshold"]
    finally:
        s.stop()

    _policy_with_threshold(tmp_path, 0.3)
    s = start_server(tmp_path / "data", extra_env=env)
    try:
        judged = s.cli("policy", "eval", "team/low", n, check=True).stdout
        assert judged.startswith(f"team/low@{n}: ") and "policy says approved" in judged
        deadline = time.monotonic() + 60
        while (state := json.loads(s.cli("status", "team/low", n, "--json", check=True).stdout)["state"]) \
                == "awaiting_approval" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state == "approved", s.log.read_text()[-3000:]
    finally:
        s.stop()
