"""The ``command`` runner: a configured program evaluates the model and writes its metrics as JSON.

Settings:

- ``command``: the argv list (no shell). In each argument ``{model_dir}``, ``{output}`` (a path in the
  runner's private work directory), ``{work_dir}`` and ``{python}`` (this interpreter) are replaced; for a LoRA
  adapter (``{model_dir}`` holds the adapter) also ``{base_dir}`` (its bound base's verified files) and
  ``{adapter_name}``; a command naming those for a version that is no adapter fails.
- ``timeout_s`` (optional): seconds the command may take; never past the eval's deadline.
- ``metrics_key`` (optional): dotted path to the object holding the metrics in the output.
- ``prefix`` (optional): a group put before every metric name (``lm_eval`` -> ``lm_eval.hellaswag.acc``).

The command's own output goes to the eval log. What it writes at ``{output}`` (or, if that is a
directory, the last ``results*.json`` under it, as lm-evaluation-harness's ``--output_path`` writes) is
one of ``{"metrics": {name: number}}``, a flat ``{name: number}``, or lm-evaluation-harness's
``{"results": {task: {"acc,none": 0.5, "alias": ...}}}``, flattened to ``task.acc``. Names are
lowercased to the metric-name pattern (``registry.evals.runners.METRIC_NAME``).

A suite's settings for lm-evaluation-harness (for an adapter: ``pretrained={base_dir},peft={model_dir}``)::

    {"command": ["lm_eval", "--model", "hf", "--model_args", "pretrained={model_dir}",
                 "--tasks", "hellaswag", "--output_path", "{output}"], "timeout_s": 3600, "prefix": "lm_eval"}

Example:
    >>> flatten_lm_eval({"hellaswag": {"alias": "hellaswag", "acc,none": 0.5, "acc_stderr,none": 0.01}})
    {'hellaswag.acc': 0.5, 'hellaswag.acc_stderr': 0.01}
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from registry.evals.runners import (
    RunContext,
    RunnerError,
    RunnerResult,
    RunnerTimeoutError,
    check_metrics,
    die_with_parent,
)

MAX_OUTPUT_BYTES = 32 << 20
MAX_ARGS = 256
MAX_ARG_CHARS = 8192
OUTPUT_NAME = "command-output.json"
DEADLINE_MARGIN_S = 5.0
"""Seconds kept before the eval's deadline to read the output after the command is stopped."""
_NAME_PIECE = re.compile(r"[^a-z0-9_]+")


def run(ctx: RunContext) -> RunnerResult:
    """Run the configured command and read its metrics.

    Raises:
        RunnerError: bad settings, the command failed or timed out, or its output holds no metrics.
    """
    argv, timeout, metrics_key, prefix = _settings(ctx.settings)
    output = ctx.work_dir / OUTPUT_NAME
    values = {"{model_dir}": str(ctx.model_dir), "{output}": str(output), "{work_dir}": str(ctx.work_dir),
              "{python}": sys.executable, **_adapter_values(ctx, argv)}
    argv = [_substitute(arg, values) for arg in argv]
    left = ctx.deadline - time.monotonic() - DEADLINE_MARGIN_S
    if left <= 0:
        raise RunnerTimeoutError("no time is left before the eval's deadline to run the command")
    timeout = min(timeout, left) if timeout is not None else left
    print(f"command: {argv[0]} ({len(argv) - 1} arguments), timeout {timeout:.0f}s", flush=True)
    _run(argv, ctx.work_dir, timeout)
    doc = _read_output(output)
    metrics = extract_metrics(doc, metrics_key)
    if prefix:
        metrics = {f"{prefix}.{name}": value for name, value in metrics.items()}
    metrics = check_metrics(metrics, where="the command's output")
    if not metrics:
        raise RunnerError("the command's output holds no metrics")
    return RunnerResult(metrics=metrics)


def _settings(settings: dict[str, Any]) -> tuple[list[str], float | None, str | None, str | None]:
    known = {"command", "timeout_s", "metrics_key", "prefix"}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise RunnerError(f"the command runner has no setting {unknown[0]!r} "
                          f"(it knows {', '.join(sorted(known))})")
    argv = settings.get("command")
    if (not isinstance(argv, list) or not 1 <= len(argv) <= MAX_ARGS
            or not all(isinstance(a, str) and len(a) <= MAX_ARG_CHARS for a in argv) or not argv[0]):
        raise RunnerError(f"setting command is a list of 1 to {MAX_ARGS} strings (the argv; no shell)")
    timeout = settings.get("timeout_s")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not math.isfinite(timeout) or timeout <= 0):
        raise RunnerError("setting timeout_s is a positive number of seconds")
    key = settings.get("metrics_key")
    if key is not None and (not isinstance(key, str) or not key or len(key) > 256):
        raise RunnerError("setting metrics_key is a dotted path to the object holding the metrics")
    prefix = settings.get("prefix")
    if prefix is not None and (not isinstance(prefix, str) or not re.fullmatch(r"[a-z0-9_]{1,32}", prefix)):
        raise RunnerError("setting prefix is 1 to 32 of lowercase letters, digits and '_'")
    return list(argv), float(timeout) if timeout is not None else None, key, prefix


def _adapter_values(ctx: RunContext, argv: list[str]) -> dict[str, str]:
    """``{base_dir}`` and ``{adapter_name}`` of an adapter; a command naming them for another version fails."""
    named = [p for p in ("{base_dir}", "{adapter_name}") if any(p in a for a in argv)]
    if ctx.adapter is None:
        if named:
            raise RunnerError(f"the command names {', '.join(named)}, but the version is no adapter")
        return {}
    values = {"{adapter_name}": ctx.adapter.name}
    if ctx.adapter.base_dir is not None:
        values["{base_dir}"] = str(ctx.adapter.base_dir)
    return values


def _substitute(arg: str, values: dict[str, str]) -> str:
    # Plain replacement, not str.format: arguments may hold JSON braces of their own.
    for placeholder, value in values.items():
        arg = arg.replace(placeholder, value)
    return arg


def _run(argv: list[str], cwd: Path, timeout: float) -> None:
    """Run ``argv`` in its own process group, its output on ours; stop the whole group on timeout."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        process = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, start_new_session=True,
                                   preexec_fn=die_with_parent())
    except OSError as e:
        raise RunnerError(f"the command could not start: {e.strerror or e}: {argv[0]}") from None
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        raise RunnerTimeoutError(f"the command ran over its {timeout:.0f}s timeout and was stopped") from None
    except BaseException:
        _kill_group(process)
        raise
    if code != 0:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        raise RunnerError(f"the command {how}")


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _read_output(output: Path) -> Any:
    path = _result_file(output)
    size = path.stat().st_size
    if size > MAX_OUTPUT_BYTES:
        raise RunnerError(f"the command's output {path.name} is {size} bytes, over {MAX_OUTPUT_BYTES}")
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise RunnerError(f"the command's output {path.name} is not UTF-8") from None
    except (ValueError, RecursionError) as e:
        raise RunnerError(f"the command's output {path.name} is not JSON: {e}"[:300]) from None


def _result_file(output: Path) -> Path:
    """``output`` itself, or the last ``results*.json`` under it when the command made it a directory."""
    if output.is_file():
        return output
    if output.is_dir():
        found = sorted(p for p in output.rglob("results*.json") if p.is_file())
        if not found:
            raise RunnerError("the command made {output} a directory with no results*.json in it")
        return found[-1]
    raise RunnerError("the command wrote no output at {output}")


def extract_metrics(doc: Any, metrics_key: str | None = None) -> dict[str, Any]:
    """The metrics in a command's output document, names sanitized (values are checked later).

    Raises:
        RunnerError: no object of metrics where one is expected, or two names that sanitize alike.
    """
    if metrics_key is not None:
        for part in metrics_key.split("."):
            if not isinstance(doc, dict) or part not in doc:
                raise RunnerError(f"the command's output has no {metrics_key!r}")
            doc = doc[part]
        if not isinstance(doc, dict):
            raise RunnerError(f"the command's output {metrics_key!r} is not an object of metrics")
        return _sanitized(_flatten(doc))
    if not isinstance(doc, dict):
        raise RunnerError("the command's output is not a JSON object")
    if isinstance(doc.get("results"), dict) and all(isinstance(v, dict) for v in doc["results"].values()):
        found = flatten_lm_eval(doc["results"])
        if isinstance(doc.get("groups"), dict):
            found.update(flatten_lm_eval(doc["groups"]))
        return _sanitized(found)
    if "metrics" in doc:
        if not isinstance(doc["metrics"], dict):
            raise RunnerError("the command's output \"metrics\" is not an object of metrics")
        return _sanitized(_flatten(doc["metrics"]))
    return _sanitized(_flatten(doc))


def flatten_lm_eval(results: dict[str, Any]) -> dict[str, Any]:
    """lm-evaluation-harness's ``{task: {"metric,filter": number}}`` as ``{"task.metric": number}``.

    The ``none`` filter is dropped (``acc,none`` -> ``acc``), another is appended (``exact_match,
    strict-match`` -> ``exact_match_strict_match``). Values that are not numbers (``alias``, ``"N/A"``)
    are left out.
    """
    out: dict[str, Any] = {}
    for task, values in results.items():
        if not isinstance(values, dict):
            continue
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            metric, _, filter_name = str(key).partition(",")
            name = metric if filter_name in ("", "none") else f"{metric}_{filter_name}"
            out[f"{_piece(str(task))}.{_piece(name)}"] = value
    return out


def _flatten(doc: dict[str, Any], parent: str = "", depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in doc.items():
        name = f"{parent}.{key}" if parent else str(key)
        if isinstance(value, dict) and depth < 4:
            out.update(_flatten(value, name, depth + 1))
        else:
            out[name] = value
    return out


def _piece(text: str) -> str:
    return _NAME_PIECE.sub("_", text.lower()).strip("_") or "_"


def _sanitized(metrics: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in metrics.items():
        clean = ".".join(_piece(p) for p in name.split("."))
        if clean in out:
            raise RunnerError(f"the command's output names metric {clean!r} twice (after lowercasing)")
        out[clean] = value
    return out
