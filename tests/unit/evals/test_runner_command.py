"""The command runner with real Python scripts as the command: each output format, and each failure."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from registry.evals.runners import RunContext, RunnerError, command
from tests.support.waiting import wait_until

LM_EVAL_OUTPUT = {
    "results": {
        "hellaswag": {"alias": "hellaswag", "acc,none": 0.25, "acc_stderr,none": 0.04,
                      "acc_norm,none": 0.3, "acc_norm_stderr,none": "N/A"},
        "gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.1, "exact_match,flexible-extract": 0.2},
        "mmlu_abstract_algebra": {"alias": " - abstract_algebra", "acc,none": 0.5},
    },
    "groups": {"mmlu": {"alias": "mmlu", "acc,none": 0.45}},
    "configs": {"hellaswag": {"task": "hellaswag", "num_fewshot": 0}},
    "versions": {"hellaswag": 1.0},
    "n-samples": {"hellaswag": {"original": 10042, "effective": 100}},
}


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "evaluate.py"
    prelude = "import json, os, sys\nout, model_dir = sys.argv[1], sys.argv[2]\n"
    path.write_text(prelude + textwrap.dedent(body))
    return path


def _ctx(tmp_path: Path, settings: dict, deadline_s: float = 60) -> RunContext:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return RunContext(model_dir=model, settings=settings, evalsets=(), work_dir=work, facts=None,
                      trust_remote_code=False, deadline=time.monotonic() + deadline_s)


def _run(tmp_path: Path, body: str, **settings):
    script = _script(tmp_path, body)
    argv = ["{python}", str(script), "{output}", "{model_dir}"]
    return command.run(_ctx(tmp_path, {"command": argv, **settings}))


def _writes(doc) -> str:
    return f"json.dump({doc!r}, open(out, 'w'))\n"


def test_metrics_object(tmp_path):
    result = _run(tmp_path, _writes({"metrics": {"factual.accuracy": 0.75, "n": 4}, "other": "ignored"}))
    assert result.metrics == {"factual.accuracy": 0.75, "n": 4.0}
    assert result.cases == [] and result.breakdown == {}


def test_flat_object_nested_and_names_lowercased(tmp_path):
    result = _run(tmp_path, _writes({"Accuracy": 1, "latency": {"p50-ms": 12.5}}))
    assert result.metrics == {"accuracy": 1.0, "latency.p50_ms": 12.5}


def test_lm_evaluation_harness_results(tmp_path):
    result = _run(tmp_path, _writes(LM_EVAL_OUTPUT), prefix="lm_eval")
    assert result.metrics == {
        "lm_eval.hellaswag.acc": 0.25, "lm_eval.hellaswag.acc_stderr": 0.04,
        "lm_eval.hellaswag.acc_norm": 0.3,
        "lm_eval.gsm8k.exact_match_strict_match": 0.1, "lm_eval.gsm8k.exact_match_flexible_extract": 0.2,
        "lm_eval.mmlu_abstract_algebra.acc": 0.5, "lm_eval.mmlu.acc": 0.45,
    }


def test_lm_evaluation_harness_output_directory(tmp_path):
    # lm_eval --output_path DIR writes DIR/<model name>/results_<timestamp>.json.
    body = f"""
    d = os.path.join(out, "__model__")
    os.makedirs(d)
    old = {{"results": {{"old": {{"acc,none": 0.1}}}}}}
    json.dump(old, open(os.path.join(d, "results_2024-01-01T00-00-00.json"), "w"))
    json.dump({json.dumps(LM_EVAL_OUTPUT)}, open(os.path.join(d, "results_2024-06-01T00-00-00.json"), "w"))
    """
    result = _run(tmp_path, body)
    assert result.metrics["hellaswag.acc"] == 0.25 and "old.acc" not in result.metrics


def test_metrics_key(tmp_path):
    result = _run(tmp_path, _writes({"report": {"scores": {"f1": 0.5}}, "metrics": {"x": 1}}),
                  metrics_key="report.scores")
    assert result.metrics == {"f1": 0.5}


def test_placeholders_are_substituted_and_the_command_runs_in_the_work_dir(tmp_path):
    body = """
    assert os.getcwd() == sys.argv[3], (os.getcwd(), sys.argv[3])
    assert os.path.isfile(os.path.join(model_dir, "config.json"))
    json.dump({"argc": len(sys.argv), "literal_braces": int(sys.argv[4] == '{"a": 1}'),
               "python": int(sys.argv[5] == sys.executable)}, open(out, "w"))
    """
    script = _script(tmp_path, body)
    argv = ["{python}", str(script), "{output}", "{model_dir}", "{work_dir}", '{"a": 1}', "{python}"]
    ctx = _ctx(tmp_path, {"command": argv})
    assert command.run(ctx).metrics == {"argc": 6.0, "literal_braces": 1.0, "python": 1.0}
    assert (ctx.work_dir / command.OUTPUT_NAME).is_file()


def test_a_failing_command(tmp_path):
    with pytest.raises(RunnerError, match="exited with status 3"):
        _run(tmp_path, _writes({"metrics": {"a": 1}}) + "sys.exit(3)\n")


def test_a_command_that_does_not_exist(tmp_path):
    with pytest.raises(RunnerError, match="could not start"):
        command.run(_ctx(tmp_path, {"command": [str(tmp_path / "no-such-program")]}))


def test_missing_output(tmp_path):
    with pytest.raises(RunnerError, match="wrote no output"):
        _run(tmp_path, "print('evaluated, but wrote nothing')\n")


@pytest.mark.parametrize("written, message", [
    ("open(out, 'w').write('{\"metrics\": ')", "not JSON"),
    ("open(out, 'w').write('[1, 2]')", "not a JSON object"),
    ("open(out, 'w').write('{\"metrics\": [1]}')", "not an object of metrics"),
    ("open(out, 'w').write('{\"metrics\": {}}')", "holds no metrics"),
    ("open(out, 'w').write('{\"metrics\": {\"a\": \"high\"}}')", "metric a is high, not a finite number"),
    ("open(out, 'w').write('{\"Acc\": 1, \"acc\": 2}')", "names metric 'acc' twice"),
    ("open(out, 'wb').write(b'\\xff')", "not UTF-8"),
])
def test_invalid_output(tmp_path, written, message):
    with pytest.raises(RunnerError, match=message):
        _run(tmp_path, written + "\n")


@pytest.mark.parametrize("value", ["float('nan')", "float('inf')", "-float('inf')"])
def test_a_non_finite_metric(tmp_path, value):
    with pytest.raises(RunnerError, match="not a finite number"):
        _run(tmp_path, f"json.dump({{'metrics': {{'accuracy': {value}}}}}, open(out, 'w'))\n")


def test_output_over_the_size_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(command, "MAX_OUTPUT_BYTES", 100)
    with pytest.raises(RunnerError, match="over 100"):
        _run(tmp_path, _writes({"metrics": {f"m{i}": i for i in range(50)}}))


def test_a_command_over_its_timeout_is_stopped_with_its_children(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    body = f"""
    import subprocess
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    open({str(pid_file)!r}, "w").write(str(child.pid))
    time_ = __import__("time"); time_.sleep(60)
    """
    started = time.monotonic()
    with pytest.raises(RunnerError, match="timeout"):
        _run(tmp_path, body, timeout_s=1.5)
    # the command sleeps 60 s: ending in well under that is the 1.5 s timeout's doing, even on a loaded machine
    assert time.monotonic() - started < 30
    grandchild = int(pid_file.read_text())
    wait_until(lambda: not _alive(grandchild), "the grandchild's end (its group was killed)")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_deadline_bounds_the_timeout(tmp_path):
    script = _script(tmp_path, "import time; time.sleep(60)\n")
    ctx = _ctx(tmp_path, {"command": ["{python}", str(script), "{output}", "{model_dir}"], "timeout_s": 3600},
               deadline_s=command.DEADLINE_MARGIN_S + 1)
    started = time.monotonic()
    with pytest.raises(RunnerError, match="timeout"):
        command.run(ctx)
    # the script sleeps 60 s under a 3600 s timeout: ending in well under a minute is the deadline's doing
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("settings, message", [
    ({}, "command is a list"),
    ({"command": "lm_eval --tasks x"}, "command is a list"),
    ({"command": []}, "command is a list"),
    ({"command": ["x", 1]}, "command is a list"),
    ({"command": ["x"], "timeout_s": 0}, "timeout_s"),
    ({"command": ["x"], "timeout_s": True}, "timeout_s"),
    ({"command": ["x"], "prefix": "Lm-Eval"}, "prefix"),
    ({"command": ["x"], "shell": True}, "no setting 'shell'"),
])
def test_bad_settings(tmp_path, settings, message):
    with pytest.raises(RunnerError, match=message):
        command.run(_ctx(tmp_path, settings))


def test_the_commands_output_goes_to_ours(tmp_path, capfd):
    _run(tmp_path, "print('progress 50%'); sys.stderr.write('a warning\\n')\n" + _writes({"a": 1}))
    out, err = capfd.readouterr()
    assert "progress 50%" in out and "a warning" in err
