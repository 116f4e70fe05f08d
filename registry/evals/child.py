"""The runner subprocess: ``python -m registry.evals.child SPEC.json PARENT_PID``.

The parent (:mod:`registry.evals.sandbox`) writes the spec, starts this process with limits and a
scrubbed environment, and reads the result file it names. This module parses the eval sets, calls the
runner's ``run`` and writes ``{"result": {...}}`` or ``{"error": "..."}``; its exit status says which:

====  ==================================================
0     the runner finished: ``result`` holds its output
3     the runner refused (``RunnerError``): ``error`` says why
4     the memory limit was hit (``MemoryError``)
5     the runner ran out of time (``RunnerTimeoutError``): ``error`` says where
6     not run: it cannot be isolated and unisolated runs are not allowed: ``error`` says why
1     anything else (the traceback is in the log)
====  ==================================================

It imports no database, web or worker code: only the eval-set parser and the runner.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from registry.statefile import write_atomic

EXIT_OK = 0
EXIT_CRASH = 1
EXIT_RUNNER_ERROR = 3
EXIT_MEMORY = 4
EXIT_TIMEOUT = 5
EXIT_UNISOLATED = 6
MAX_CASES_RECORDED = 10_000


def _write(path: Path, doc: dict[str, Any]) -> None:
    # Whole or not at all: the worker reads the result after the child exits, or after it was killed.
    write_atomic(path, json.dumps(doc, allow_nan=False).encode())


def _run(spec: dict[str, Any]) -> dict[str, Any]:
    from registry.evals.cases import parse_cases
    from registry.evals.runners import (
        MAX_CASE_DETAIL,
        RUNNERS,
        AdapterOnBase,
        LoadedEvalSet,
        RunContext,
        RunnerError,
        check_metrics,
    )

    evalsets = []
    for entry in spec["evalsets"]:
        cases = parse_cases(Path(entry["path"]).read_bytes())
        evalsets.append(LoadedEvalSet(entry["name"], entry["digest"], tuple(cases)))
    adapter = spec.get("adapter")
    if adapter is not None:
        adapter = AdapterOnBase(adapter["name"], adapter["base"],
                                Path(adapter["base_dir"]) if adapter.get("base_dir") else None)
    ctx = RunContext(model_dir=Path(spec["model_dir"]), settings=spec["settings"], evalsets=tuple(evalsets),
                     work_dir=Path(spec["work_dir"]), facts=spec.get("facts"),
                     trust_remote_code=bool(spec.get("trust_remote_code")),
                     deadline=time.monotonic() + float(spec["timeout_s"]),
                     endpoint_socket=Path(spec["endpoint_socket"]) if spec.get("endpoint_socket") else None,
                     adapter=adapter)
    result = RUNNERS[spec["runner"]].load()(ctx)
    metrics = check_metrics(result.metrics)
    breakdown = {axis: {key: check_metrics(values, f"breakdown.{axis}.{key}") for key, values in groups.items()}
                 for axis, groups in (result.breakdown or {}).items()}
    cases = []
    for case in result.cases[:MAX_CASES_RECORDED]:
        if not isinstance(case, dict):
            raise RunnerError("a case outcome is an object")
        detail = case.get("detail")
        cases.append({**case, "detail": str(detail)[:MAX_CASE_DETAIL] if detail is not None else None})
    return {"metrics": metrics, "breakdown": breakdown, "cases": cases,
            "cases_total": len(result.cases)}


def _limit_memory(megabytes: int) -> None:
    """Cap this process's address space (its children inherit the cap) and write no core files."""
    import resource

    limit = megabytes << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _isolate(spec: dict[str, Any]) -> str | None:
    """Shut this process in (:mod:`registry.evals.isolation`) as the spec says; None, or why it is not."""
    from registry.evals import isolation

    shut_in = spec["isolation"]
    base_dir = (spec.get("adapter") or {}).get("base_dir")
    read_only = [spec["model_dir"], *([base_dir] if base_dir else []),
                 *sorted({str(Path(e["path"]).parent) for e in spec["evalsets"]}),
                 *isolation.python_paths(), *shut_in["read_only"]]
    try:
        isolation.isolate(shut_in["root"], read_only=read_only, writable=[spec["work_dir"]])
    except (isolation.IsolationError, OSError) as e:
        return str(e) or type(e).__name__
    return None


def _report_isolation(fd: int, refused: str | None) -> None:
    """Tell the worker, on a pipe closed before any runner code runs, whether this run is shut in."""
    with os.fdopen(fd, "w") as pipe:
        pipe.write("isolated\n" if refused is None else f"unisolated {refused}\n"[:2000])


def _die_with_the_worker(parent: int) -> None:
    """SIGKILL this runner when the worker that started it dies (its job will run again elsewhere)."""
    import ctypes
    import signal

    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the call
        os._exit(EXIT_CRASH)


def main(argv: list[str]) -> int:
    parent = int(argv[2]) if len(argv) > 2 else os.getppid()
    _die_with_the_worker(parent)
    spec_path = Path(argv[1])
    spec = json.loads(spec_path.read_text())
    output = Path(spec["output"])
    # First of all, before any runner code: set here rather than by the parent, whose threads make a
    # preexec_fn unsafe.
    _limit_memory(int(spec["memory_mb"]))
    refused = _isolate(spec)
    # Entering a user namespace can clear the parent-death signal (new credentials): set it again.
    _die_with_the_worker(parent)
    _report_isolation(int(spec["isolation"]["status_fd"]), refused)
    if refused is None:
        print("runner: isolated: only the model, the eval sets, the work directory and Python are visible; "
              "no network but loopback", file=sys.stderr, flush=True)
    elif spec["isolation"]["allow_unisolated"]:
        print(f"runner: NOT isolated (allowed by the operator): {refused}", file=sys.stderr, flush=True)
    else:
        print(f"runner: not run: it cannot be isolated: {refused}", file=sys.stderr, flush=True)
        _write(output, {"error": f"the runner cannot be isolated: {refused}"[:2000]})
        return EXIT_UNISOLATED
    from registry.domain.errors import RegistryError
    from registry.evals.runners import RunnerError, RunnerTimeoutError

    try:
        _write(output, {"result": _run(spec)})
        return EXIT_OK
    except MemoryError:
        print("runner: MemoryError: the memory limit was reached", file=sys.stderr, flush=True)
        return EXIT_MEMORY
    except RunnerTimeoutError as e:
        print(f"runner: out of time: {e}", file=sys.stderr, flush=True)
        _write(output, {"error": str(e)[:2000]})
        return EXIT_TIMEOUT
    except (RunnerError, RegistryError) as e:
        print(f"runner: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        _write(output, {"error": str(e)[:2000]})
        return EXIT_RUNNER_ERROR
    except Exception:
        traceback.print_exc()
        return EXIT_CRASH


if __name__ == "__main__":
    sys.exit(main(sys.argv))
