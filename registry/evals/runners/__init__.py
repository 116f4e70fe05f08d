"""Eval runners: what each is called, its version, and the one interface they share.

A runner is a function ``run(ctx: RunContext) -> RunnerResult`` in its own module, imported only
inside the runner subprocess (``registry.evals.child``), so a worker never imports torch. ``RUNNERS``
is the one table from a suite's ``runner`` name to that function and the runner's version; the
version goes into the suite version recorded beside every result, so bump it whenever what a
runner measures changes.

Metrics are flat: ``{"<group>.<metric>": number}`` with lowercase names (``factual.accuracy``,
``latency.ttft_ms_p50``, ``sanity.nan_tensors``). Policies gate on these keys. ``breakdown`` holds
the same metrics per language and per prompt-length bucket (``registry.evals.cases.length_bucket``).
Each case outcome is ``{"evalset", "id", "category", "language", "length", "passed", "detail"}``
(``passed`` is None for a case that only measures, such as latency).

Example:
    >>> RUNNERS["weights-sanity"].version
    '1.1.0'
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib
import math
import re
import signal
import sys
from pathlib import Path
from typing import Any, Callable

from registry.evals.cases import Case

METRIC_NAME = re.compile(r"[a-z0-9_]+(\.[a-z0-9_]+)*")
MAX_METRICS = 1000
MAX_CASE_DETAIL = 500


@dataclasses.dataclass(frozen=True, slots=True)
class RunnerInfo:
    name: str
    version: str
    entry: str
    """``module:function`` of ``run``."""

    def load(self) -> Callable[["RunContext"], "RunnerResult"]:
        module, _, function = self.entry.partition(":")
        return getattr(importlib.import_module(module), function)


RUNNERS: dict[str, RunnerInfo] = {info.name: info for info in (
    RunnerInfo("weights-sanity", "1.1.0", "registry.evals.runners.sanity:run"),
    RunnerInfo("causal-lm", "1.0.0", "registry.evals.runners.causal_lm:run"),
    RunnerInfo("openai", "1.0.0", "registry.evals.runners.openai:run"),
    RunnerInfo("command", "1.0.0", "registry.evals.runners.command:run"),
)}


@dataclasses.dataclass(frozen=True, slots=True)
class LoadedEvalSet:
    """An eval set as a runner gets it: its name, its digest and its parsed cases."""

    name: str
    digest: str
    cases: tuple[Case, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class AdapterOnBase:
    """The version evaluated is a LoRA adapter: it runs on the base it is bound to (issue 34).

    Attributes:
        name: The adapter's served name (its model's name, as ``--lora-modules NAME=DIR`` and requests name it).
        base_ref: The bound base version (``acme/llm@3``), for messages.
        base_dir: The base's files, each hash-checked, read-only; None when the suite does not load the base
            (:func:`needs_base`).
    """

    name: str
    base_ref: str
    base_dir: Path | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class RunContext:
    """What a runner gets, inside its subprocess.

    Attributes:
        model_dir: the version's files, each hash-checked against its recorded digest, read-only.
        settings: the suite's ``settings`` object, as written in the policy data.
        evalsets: the suite's eval sets, parsed.
        work_dir: a private temp directory (also ``TMPDIR`` and ``HOME``), removed afterwards.
        facts: the version's recorded facts (``registry.facts``), or None.
        trust_remote_code: True only when policy allowed the version's remote code.
        deadline: ``time.monotonic()`` value by which the runner must be done (the parent kills it then).
        endpoint_socket: a Unix socket joined to the one endpoint the suite names (the runner has no
            other network but loopback), or None.
        adapter: set when the version is a LoRA adapter (``model_dir`` then holds the adapter's files): its name
            and its base, which the runner evaluates it on.
    """

    model_dir: Path
    settings: dict[str, Any]
    evalsets: tuple[LoadedEvalSet, ...]
    work_dir: Path
    facts: dict[str, Any] | None
    trust_remote_code: bool
    deadline: float
    endpoint_socket: Path | None = None
    adapter: AdapterOnBase | None = None


@dataclasses.dataclass(slots=True)
class RunnerResult:
    metrics: dict[str, float]
    cases: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    breakdown: dict[str, dict[str, dict[str, float]]] = dataclasses.field(default_factory=dict)
    """``{"language": {"en": {metric: value}}, "length": {"short": {...}}}``."""

    def as_dict(self) -> dict[str, Any]:
        return {"metrics": self.metrics, "cases": self.cases, "breakdown": self.breakdown}


class RunnerError(Exception):
    """A runner could not evaluate the model (bad settings, a model it cannot load): the eval fails
    with this message as its reason."""


class RunnerTimeoutError(RunnerError):
    """The runner ran out of time (its deadline, or a command's own ``timeout_s``): the eval fails with
    reason ``timeout``, as when the parent kills it."""


PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has a child process killed when this process dies (Linux), or None elsewhere.

    Runners start programs in their own process groups (so a deadline kills all of a program's
    processes); a group of its own escapes the kill of the runner itself, and a worker that dies takes
    its runner with it the same way. libc is loaded here, before the fork: the child may only call it.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    return lambda: libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


BASE_DIR_PLACEHOLDER = "{base_dir}"


def needs_base(runner: str, settings: Any) -> bool:
    """Whether a suite evaluating an adapter loads its base: ``causal-lm`` always (it applies the adapter with
    PEFT), an ``openai`` or ``command`` suite when its command names ``{base_dir}``; ``weights-sanity`` reads the
    adapter's own tensors. The base is copied out of the store only for the suites that load it.

    Example:
        >>> needs_base("causal-lm", {}), needs_base("weights-sanity", {})
        (True, False)
        >>> needs_base("openai", {"serve": ["vllm", "serve", "{base_dir}", "--enable-lora"]})
        True
    """
    if runner == "causal-lm":
        return True
    if runner not in ("openai", "command") or not isinstance(settings, dict):
        return False
    argv = settings.get("serve" if runner == "openai" else "command")
    return isinstance(argv, list) and any(isinstance(a, str) and BASE_DIR_PLACEHOLDER in a for a in argv)


def check_metrics(metrics: Any, where: str = "metrics") -> dict[str, float]:
    """Metrics a runner returned (or a command wrote), checked: names, finite numbers, how many.

    Raises:
        RunnerError: a name or value that is not a metric.

    Example:
        >>> check_metrics({"factual.accuracy": 1, "n": 2.5})
        {'factual.accuracy': 1.0, 'n': 2.5}
    """
    if not isinstance(metrics, dict):
        raise RunnerError(f"{where} is an object of name to number")
    if len(metrics) > MAX_METRICS:
        raise RunnerError(f"{where} holds more than {MAX_METRICS} metrics")
    out = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or len(name) > 128 or not METRIC_NAME.fullmatch(name):
            raise RunnerError(f"{where}: metric name {str(name)[:40]!r} is not lowercase dotted words")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise RunnerError(f"{where}: metric {name} is {str(value)[:20]}, not a finite number")
        out[name] = float(value)
    return out
