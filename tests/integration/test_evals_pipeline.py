"""Evals as jobs, on SQLite and PostgreSQL: a version entering ``evaluating`` gets a ``run_eval`` job per
applicable suite, each runner runs in its subprocess on the verified files, results are recorded once,
and the approval policy gates on thresholds and on regressions against ``prod``.

The shipped policy's ``sanity`` suite (weights-sanity) runs on the tiny transformers Llama. The other
suites here use the ``command`` runner with small scripts, so each outcome (a metric, a timeout, a crash,
the environment the runner sees) is known in advance.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load, save
from sqlalchemy import select

from registry.auth import load_principal
from registry.db.models import AuditEvent, EvalResult, Job, Principal, Version
from registry.domain.aliases import make_target
from registry.evals.suites import suite_version
from registry.jobs import JobKind
from registry.policy import default_policy_dir
from registry.services import aliases, approvals, evals, loaders, versions
from registry.services.versions import SubmitRequest
from tests.support.registry import drain, make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version, submit_directory
from tests.support.scan_samples import reduce_pickle
from tests.support.tiny_llm import tiny_llm_files

TENANT = "acme"

# A command eval: reads score.txt from the model and reports it, so each version's metric is chosen by the test.
SCORE_SCRIPT = """
import json, sys
from pathlib import Path
model_dir, output = Path(sys.argv[1]), Path(sys.argv[2])
score = float((model_dir / "score.txt").read_text())
output.write_text(json.dumps({"metrics": {"quality.score": score}}))
print("scored", score)
"""
# Reports what the runner can see and do: its environment, and whether the model directory is writable.
PROBE_SCRIPT = """
import json, os, sys
from pathlib import Path
model_dir, output = Path(sys.argv[1]), Path(sys.argv[2])
try:
    (model_dir / "planted.txt").write_text("x")
    writable = 1
except OSError:
    writable = 0
print("ENV", json.dumps(dict(os.environ), sort_keys=True))
output.write_text(json.dumps({"metrics": {"probe.model_dir_writable": writable,
                                          "probe.env_vars": len(os.environ)}}))
"""
SLEEP_SCRIPT = "import time\nprint('sleeping', flush=True)\ntime.sleep(120)\n"
# Kills the runner process (its parent) with SIGSEGV: what a crashing native library does to a runner.
CRASH_SCRIPT = "import os, signal\nos.kill(os.getppid(), signal.SIGSEGV)\nimport time\ntime.sleep(30)\n"


def command_suite(script: Path, **extra) -> dict:
    return {"runner": "command",
            "settings": {"command": ["{python}", str(script), "{model_dir}", "{output}"]},
            "applies_to": {"models": ["acme/*"]}, **extra}


@pytest.fixture
def policy(container, tmp_path):
    """A copy of the shipped policies the test edits (suites and eval thresholds), in use by ``container``."""
    ours = tmp_path / "policies"
    shutil.copytree(default_policy_dir(), ours)
    container.settings.policy_dir = ours

    def edit(suites: dict | None = None, thresholds: dict | None = None, regressions: dict | None = None):
        data = json.loads((ours / "data.json").read_text())
        if suites is not None:
            data["modelreg"]["suites"].update(suites)
        evals_config = data["modelreg"]["config"]["evals"]
        evals_config["thresholds"].update(thresholds or {})
        evals_config["regressions"].update(regressions or {})
        (ours / "data.json").write_text(json.dumps(data))
        container.__dict__.pop("policy", None)  # the next judgement reads the edited bundle

    return edit


@pytest.fixture
def scripts(container, tmp_path) -> dict[str, Path]:
    """The suites' scripts, in a directory the operator shows every runner (nothing else of this disk is)."""
    where = tmp_path / "suite-scripts"
    where.mkdir()
    container.settings.eval_read_only_paths = [where]
    out = {}
    for name, body in (("score", SCORE_SCRIPT), ("probe", PROBE_SCRIPT), ("sleep", SLEEP_SCRIPT),
                       ("crash", CRASH_SCRIPT)):
        out[name] = where / f"{name}.py"
        out[name].write_text(body)
    return out


def submit(container, admin, root: Path, name: str, files: dict[str, bytes]) -> int:
    """Submit a model directory and run every job; return the version number (whatever state it reached)."""
    return submit_directory(container, admin, root, TENANT, name, files)[1]


def results(container, name: str, number: int) -> dict[str, EvalResult]:
    with container.session_factory() as session:
        version = loaders.load_version_unchecked(session, loaders.load_model_unchecked(session, TENANT, name), number)
        rows = session.scalars(select(EvalResult).where(EvalResult.version_id == version.id)).all()
        session.expunge_all()
        return {r.suite: r for r in rows}


def state_and_unmet(container, admin, name: str, number: int) -> tuple[str, list[dict]]:
    with container.session_factory() as session:
        status = approvals.status(session, admin, TENANT, name, number)
        return status.state, status.unmet


def scored_model(score: float) -> dict[str, bytes]:
    return {"config.json": b'{"model_type": "scored"}', "score.txt": str(score).encode()}


def test_tiny_llm_is_evaluated_by_weights_sanity_with_real_metrics(container, tmp_path):
    admin = make_admin(container)
    number = awaiting_version(container, admin, tmp_path / "m", TENANT, "tiny", files=tiny_llm_files())
    rows = results(container, "tiny", number)
    assert set(rows) == {"sanity"}
    sanity = rows["sanity"]
    assert (sanity.status, sanity.reason) == ("completed", None), sanity.error
    tensors = load(tiny_llm_files()["model.safetensors"])
    assert sanity.metrics["sanity.parameters"] == sum(t.size for t in tensors.values())
    assert sanity.metrics["sanity.tensors"] == len(tensors)
    assert sanity.metrics["sanity.failed_checks"] == 0
    assert sanity.runner == "weights-sanity" and sanity.definition["runner_version"] == sanity.runner_version
    assert sanity.suite_version == suite_version(sanity.definition)
    assert sanity.log_digest and sanity.duration_ms > 0 and sanity.cases
    with container.session_factory() as session:
        log = evals.eval_log(session, admin, TENANT, "tiny", number, "sanity", blob_store=container.blob_store)
        recorded = session.scalars(select(AuditEvent).where(AuditEvent.action == "version.eval.recorded")).all()
        evaluated = session.scalars(select(AuditEvent).where(AuditEvent.action == "version.evaluated")).all()
    assert log == b"".join(container.blob_store.open_range(sanity.log_digest))
    assert [e.details["suite"] for e in recorded] == ["sanity"] and len(evaluated) == 1
    _, unmet = state_and_unmet(container, admin, "tiny", number)
    assert not [u for u in unmet if u["code"].startswith("eval.")]


def test_a_zeroed_tensor_misses_the_sanity_threshold_and_approvals_cannot_waive_it(container, tmp_path):
    admin = make_admin(container)
    files = dict(tiny_llm_files())
    tensors = load(files["model.safetensors"])
    tensors["model.layers.0.mlp.up_proj.weight"] = np.zeros_like(tensors["model.layers.0.mlp.up_proj.weight"])
    files["model.safetensors"] = save(tensors, metadata={"format": "pt"})
    number = awaiting_version(container, admin, tmp_path / "m", TENANT, "zeroed", files=files)
    sanity = results(container, "zeroed", number)["sanity"]
    assert sanity.status == "completed" and sanity.metrics["sanity.zero_tensors"] == 1
    state, unmet = state_and_unmet(container, admin, "zeroed", number)
    gate = [u for u in unmet if u["code"] == "eval.threshold"]
    assert state == "awaiting_approval" and len(gate) == 1
    assert gate[0]["metric"] == "sanity.failed_checks" and gate[0]["satisfiable"] is False
    assert gate[0]["message"] == "eval suite sanity: sanity.failed_checks is 1, needs at most 0"
    for name, capacity in (("sec", "security"), ("mia", "ml"), ("lex", "legal")):
        role_token(container, name, TENANT, "approver", capacity)
        with container.session_factory() as session:
            approver = load_principal(session.scalar(select(Principal).where(Principal.name == name)))
            status = approvals.decide(session, approver, TENANT, "zeroed", number,
                                      approvals.ApprovalRequest("approve", capacity, "", []),
                                      ports=container.ports)
    assert status.state == "awaiting_approval"
    assert [u["code"] for u in status.unmet] == ["eval.threshold"]


def test_an_unsafe_version_never_reaches_eval(container, tmp_path):
    admin = make_admin(container)
    number = submit(container, admin, tmp_path / "m", "unsafe", {**tiny_llm_files(), "extra.pkl": reduce_pickle()})
    with container.session_factory() as session:
        version = loaders.load_version_unchecked(session, loaders.load_model_unchecked(session, TENANT, "unsafe"),
                                                  number)
        assert (version.state, version.failure_reason) == ("failed", "unsafe_file")
        assert session.scalars(select(EvalResult)).all() == []
        assert session.scalars(select(Job).where(Job.kind == JobKind.RUN_EVAL.value)).all() == []


def test_a_version_no_suite_applies_to_passes_through(container, tmp_path):
    admin = make_admin(container)
    number = awaiting_version(container, admin, tmp_path / "m", TENANT, "plain",
                              files={"config.json": b'{"model_type": "plain"}'})
    assert results(container, "plain", number) == {}
    with container.session_factory() as session:
        assert not session.scalars(select(AuditEvent).where(AuditEvent.action == "version.evaluated")).all()


def test_a_threshold_miss_waits_with_the_requirement_unmet(container, policy, scripts, tmp_path):
    policy(suites={"quality": command_suite(scripts["score"])},
           thresholds={"quality": {"quality.score": {"min": 0.6}}})
    admin = make_admin(container)
    low = submit(container, admin, tmp_path / "low", "low", scored_model(0.5))
    ok = submit(container, admin, tmp_path / "ok", "ok", scored_model(0.7))
    assert results(container, "low", low)["quality"].metrics == {"quality.score": 0.5}
    state, unmet = state_and_unmet(container, admin, "low", low)
    assert state == "awaiting_approval"
    assert [(u["code"], u["metric"]) for u in unmet if u["code"].startswith("eval.")] == [
        ("eval.threshold", "quality.score")]
    assert not [u for u in state_and_unmet(container, admin, "ok", ok)[1] if u["code"].startswith("eval.")]


def test_a_too_strict_threshold_is_mended_by_policy_data_without_resubmitting(container, policy, scripts,
                                                                              tmp_path):
    """Every approval given, the version still waits on its threshold; the policy data is loosened, the
    workers' pass judges it again under the new bundle, and the approvals it had make it approved."""
    policy(suites={"quality": command_suite(scripts["score"])},
           thresholds={"quality": {"quality.score": {"min": 0.6}}})
    admin = make_admin(container)
    number = submit(container, admin, tmp_path / "low", "mended", scored_model(0.5))
    for name, capacity in (("sec", "security"), ("mia", "ml"), ("lex", "legal")):
        role_token(container, name, TENANT, "approver", capacity)
        with container.session_factory() as session:
            approver = load_principal(session.scalar(select(Principal).where(Principal.name == name)))
            status = approvals.decide(session, approver, TENANT, "mended", number,
                                      approvals.ApprovalRequest("approve", capacity, "", []),
                                      ports=container.ports)
    assert status.state == "awaiting_approval" and [u["code"] for u in status.unmet] == ["eval.threshold"]
    with container.session_factory() as session:
        # Nothing to judge again while the bundle is the one it was judged under.
        assert approvals.rejudge_awaiting(session, ports=container.ports) == []

    policy(thresholds={"quality": {"quality.score": {"min": 0.4}}})
    with container.session_factory() as session:
        _, decision = approvals.evaluate(session, admin, TENANT, "mended", number, engine=container.policy)
        assert decision.allowed  # what `modelreg policy eval` shows
        judged = approvals.rejudge_awaiting(session, ports=container.ports)
    assert judged == [f"{TENANT}/mended@{number}"]
    state, unmet = state_and_unmet(container, admin, "mended", number)
    assert (state, unmet) == ("approved", [])
    with container.session_factory() as session:
        assert approvals.rejudge_awaiting(session, ports=container.ports) == []
        audit = session.scalars(select(AuditEvent).where(AuditEvent.action == "version.rejudged")).all()
        assert [e.details["outcome"] for e in audit] == ["approved"]


def test_a_regression_against_prod_beyond_tolerance_is_unmet(container, policy, scripts, tmp_path):
    policy(suites={"quality": command_suite(scripts["score"])},
           regressions={"quality": {"quality.score": {"better": "higher", "tolerance": 0.02}}})
    admin = make_admin(container)
    first = submit(container, admin, tmp_path / "v1", "m", scored_model(0.9))
    approve_standin(container, TENANT, "m", first)
    with container.session_factory() as session:
        aliases.promote(session, admin, TENANT, "m", "prod", make_target(first), policy=container.policy,
                        clock=container.clock)
    worse = submit(container, admin, tmp_path / "v2", "m", scored_model(0.85))
    close = submit(container, admin, tmp_path / "v3", "m", scored_model(0.885))
    _, unmet = state_and_unmet(container, admin, "m", worse)
    regression = [u for u in unmet if u["code"] == "eval.regression"]
    assert len(regression) == 1 and regression[0]["metric"] == "quality.score"
    assert "prod (version 1)" in regression[0]["message"]
    assert not [u for u in state_and_unmet(container, admin, "m", close)[1] if u["code"].startswith("eval.")]
    # The baseline is for the same suite version only: another runner setting is not compared.
    with container.session_factory() as session:
        version = loaders.load_version_unchecked(session, loaders.load_model_unchecked(session, TENANT, "m"), worse)
        doc = approvals.approval_input_for(session, version, container.policy)
    assert doc["baseline"]["version"] == first and doc["baseline"]["evals"][0]["metrics"] == {"quality.score": 0.9}


def test_a_runner_that_times_out_or_crashes_fails_the_eval_with_its_reason(container, policy, scripts, tmp_path):
    policy(suites={"slow": command_suite(scripts["sleep"], timeout_s=8),
                   "crashing": command_suite(scripts["crash"])})
    admin = make_admin(container)
    number = submit(container, admin, tmp_path / "m", "flaky", scored_model(1))
    rows = results(container, "flaky", number)
    assert (rows["slow"].status, rows["slow"].reason) == ("failed", "timeout")
    assert "timeout" in rows["slow"].error and rows["slow"].duration_ms < 30_000
    assert (rows["crashing"].status, rows["crashing"].reason) == ("failed", "crash")
    assert "SIGSEGV" in rows["crashing"].error
    state, unmet = state_and_unmet(container, admin, "flaky", number)
    assert state == "awaiting_approval"
    failed = sorted(u["suite"] for u in unmet if u["code"] == "eval.failed")
    assert failed == ["crashing", "slow"]


def test_the_runner_sees_a_scrubbed_environment_and_a_read_only_model(container, policy, scripts, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("MODELREG_DATABASE_URL", "postgresql://secret@db/x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-value")
    monkeypatch.setenv("HF_TOKEN", "hf_secretvalue")
    policy(suites={"probe": command_suite(scripts["probe"])})
    admin = make_admin(container)
    number = submit(container, admin, tmp_path / "m", "probed", scored_model(1))
    probe = results(container, "probed", number)["probe"]
    assert probe.status == "completed" and probe.metrics["probe.model_dir_writable"] == 0
    log = b"".join(container.blob_store.open_range(probe.log_digest)).decode()
    env = json.loads(next(line for line in log.splitlines() if line.startswith("ENV "))[4:])
    assert not [k for k in env if k.startswith(("MODELREG_", "AWS_", "HF_TOKEN"))]
    assert "secret" not in log
    assert env["HF_HUB_OFFLINE"] == "1" and env["HOME"] == env["TMPDIR"]
    assert not env["HOME"].startswith(str(container.settings.data_dir))


def test_a_job_run_twice_records_once(container, policy, scripts, tmp_path):
    """A worker that dies after the runner finished but before the job completed: the re-run records nothing."""
    policy(suites={"quality": command_suite(scripts["score"])})
    admin = make_admin(container)
    for path, data in scored_model(0.7).items():
        (tmp_path / "m").mkdir(exist_ok=True)
        (tmp_path / "m" / path).write_bytes(data)
    with container.session_factory() as session:
        version, _ = versions.submit(session, admin, TENANT, "twice", SubmitRequest(source=str(tmp_path / "m")),
                                     open_source=container.open_source, limits=container.limits(),
                                     ports=container.ports)
        version_id = version.id
    drain(container)
    with container.session_factory() as session:
        row = session.scalar(select(EvalResult).where(EvalResult.version_id == version_id))
        first = (row.id, row.finished_at, row.log_digest)
    evals.run_eval(container.session_factory, first[0], ports=container.ports)
    with container.session_factory() as session:
        row = session.get(EvalResult, first[0])
        assert (row.id, row.finished_at, row.log_digest) == first
        recorded = session.scalars(select(AuditEvent).where(AuditEvent.action == "version.eval.recorded")).all()
        assert len(recorded) == 1
        assert session.get(Version, version_id).state == "awaiting_approval"


def test_a_suite_naming_a_missing_evalset_fails_at_once(container, policy, scripts, tmp_path):
    policy(suites={"quality": command_suite(scripts["score"], evalsets=["nowhere"])})
    admin = make_admin(container)
    number = submit(container, admin, tmp_path / "m", "missing", scored_model(1))
    row = results(container, "missing", number)["quality"]
    assert (row.status, row.reason) == ("failed", "missing_evalset") and "nowhere" in row.error
    assert state_and_unmet(container, admin, "missing", number)[0] == "awaiting_approval"


def test_an_evalset_change_is_a_new_suite_version(container, policy, scripts, tmp_path):
    admin = make_admin(container)
    case = {"id": "c1", "category": "factual", "language": "en", "messages": [{"role": "user", "content": "2+2?"}],
            "expect": {"exact": "4"}}
    with container.session_factory() as session:
        one, created = evals.add_evalset(session, admin, "arith", (json.dumps(case) + "\n").encode(), "",
                                         blob_store=container.blob_store, clock=container.clock)
        again, created_again = evals.add_evalset(session, admin, "arith", (json.dumps(case) + "\n").encode(), "",
                                                 blob_store=container.blob_store, clock=container.clock)
        assert created and not created_again and again.number == one.number == 1
    policy(suites={"quality": command_suite(scripts["score"], evalsets=["arith"])})
    first = submit(container, admin, tmp_path / "v1", "sets", scored_model(1))
    with container.session_factory() as session:
        two, _ = evals.add_evalset(session, admin, "arith", (json.dumps({**case, "id": "c2"}) + "\n").encode(), "",
                                   blob_store=container.blob_store, clock=container.clock)
        assert two.number == 2
    second = submit(container, admin, tmp_path / "v2", "sets", scored_model(0.99))
    a, b = results(container, "sets", first)["quality"], results(container, "sets", second)["quality"]
    assert a.definition["evalsets"] == [{"name": "arith", "digest": one.digest}]
    assert b.definition["evalsets"] == [{"name": "arith", "digest": two.digest}]
    assert a.suite_version != b.suite_version


def test_the_openai_runner_through_the_pipeline_scores_an_evalset_and_gates_on_it(container, policy, tmp_path):
    """A ``run_eval`` job serves the verified tiny Llama with the project's test server (its serve command),
    scores an eval set added through the service, records every category's metrics, and the policy gates."""
    from tests.integration.test_eval_openai import EXPECTED_METRICS, KNOWN, PRICE, SERVE

    admin = make_admin(container)
    container.settings.eval_read_only_paths = [Path(SERVE[1]).parent]  # the test server's script
    data = "".join(json.dumps(d) + "\n" for _, d in KNOWN).encode()
    with container.session_factory() as session:
        evals.add_evalset(session, admin, "known", data, "every expectation kind, passing and failing",
                          blob_store=container.blob_store, clock=container.clock)
    policy(suites={"chat": {"runner": "openai", "evalsets": ["known"], "timeout_s": 300,
                            "applies_to": {"architectures": ["*ForCausalLM"]},
                            "settings": {"serve": SERVE, "max_tokens": 8, "concurrency": 4,
                                         "startup_timeout_s": 120, "price_per_million": PRICE}}},
           thresholds={"chat": {"factual.accuracy": {"min": 0.9}, "requests.failed": {"max": 0}}})
    number = awaiting_version(container, admin, tmp_path / "m", TENANT, "chatty", files=tiny_llm_files())
    chat = results(container, "chatty", number)["chat"]
    assert chat.status == "completed", (chat.reason, chat.error)
    for name, value in EXPECTED_METRICS.items():
        assert chat.metrics[name] == pytest.approx(value), name
    assert chat.metrics["tokens.input"] > 0 and chat.metrics["latency.ttft_ms_p50"] > 0
    assert chat.metrics["cost.usd"] == pytest.approx(
        (chat.metrics["tokens.input"] * PRICE["input"] + chat.metrics["tokens.output"] * PRICE["output"]) / 1e6)
    assert set(chat.breakdown) == {"language", "length"} and set(chat.breakdown["language"]) == {"en", "de"}
    assert chat.definition["evalsets"][0]["name"] == "known" and len(chat.cases) == len(KNOWN)
    _, unmet = state_and_unmet(container, admin, "chatty", number)
    assert [(u["code"], u["metric"]) for u in unmet if u["code"].startswith("eval.")] == [
        ("eval.threshold", "factual.accuracy")]


def test_the_causal_lm_runner_through_the_pipeline_loads_the_verified_weights(container, policy, tmp_path):
    policy(suites={"lm": {"runner": "causal-lm", "applies_to": {"architectures": ["*ForCausalLM"]},
                          "settings": {"max_new_tokens": 4}, "timeout_s": 300}},
           thresholds={"lm": {"lm.failed_checks": {"max": 0}, "lm.perplexity.en": {"max": 10_000}}})
    admin = make_admin(container)
    number = awaiting_version(container, admin, tmp_path / "m", TENANT, "lm", files=tiny_llm_files())
    lm = results(container, "lm", number)["lm"]
    assert lm.status == "completed", (lm.reason, lm.error)
    assert 1 < lm.metrics["lm.perplexity.en"] < 10_000 and lm.metrics["lm.generation_ok"] == 1
    assert lm.metrics["lm.chat_template_ok"] == 1 and lm.metrics["lm.roundtrip_failures"] == 0
    assert lm.metrics["lm.parameters"] == results(container, "lm", number)["sanity"].metrics["sanity.parameters"]
    assert not [u for u in state_and_unmet(container, admin, "lm", number)[1] if u["code"].startswith("eval.")]
