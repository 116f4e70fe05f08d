"""The runner subprocess: ``python -m registry.evals.child SPEC.json PARENT_PID``.

The parent (:mod:`registry.evals.sandbox`) writes the spec, starts this process with limits and a
scrubbed environment, and reads the result file it names. This module parses the eval sets, calls the
runner's ``run`` and writes ``{"result": {...}}`` or ``{"error": "..."}``; its exit status says which:

====  ==================================================
0     the runner finished: ``result`` holds its output
3     the runner refused (``RunnerError``): ``error`` says why
4     the memory limit was hit (``MemoryError``)
5     the runner ran out of time (``RunnerTimeoutError``): ``error`` says where
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

EXIT_OK = 0
EXIT_CRASH = 1
EXIT_RUNNER_ERROR = 3
EXIT_MEMORY = 4
EXIT_TIMEOUT = 5
MAX_CASES_RECORDED = 10_000


def _write(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, allow_nan=False))
    os.replace(tmp, path)


def _run(spec: dict[str, Any]) -> dict[str, Any]:
    from registry.evals.cases import parse_cases
    from registry.evals.runners import (MAX_CASE_DETAIL, RUNNERS, EvalSet, RunContext, RunnerError,
                                        check_metrics)

    evalsets = []
    for entry in spec["evalsets"]:
        cases = parse_cases(Path(entry["path"]).read_bytes())
        evalsets.append(EvalSet(entry["name"], entry["digest"], tuple(cases)))
    ctx = RunContext(model_dir=Path(spec["model_dir"]), settings=spec["settings"], evalsets=tuple(evalsets),
                     work_dir=Path(spec["work_dir"]), facts=spec.get("facts"),
                     trust_remote_code=bool(spec.get("trust_remote_code")),
                     deadline=time.monotonic() + float(spec["timeout_s"]))
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


# Linux: unshare(2) and mount(2) flags.
_CLONE_NEWUSER, _CLONE_NEWNS = 0x10000000, 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18


def _mount_read_only(paths: list[str]) -> str:
    """Make ``paths`` read-only for this process and its children, even for root.

    File modes (0444) stop an ordinary user but not root; a read-only bind mount stops both. The
    process enters its own user and mount namespaces (no privilege needed where the kernel allows
    unprivileged user namespaces) and remounts each path read-only there; nothing changes outside.
    Where namespaces are not allowed the file modes remain, and the log says so.

    Returns:
        What protects the paths, for the log.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS) != 0:
        return f"file modes only (no user namespace: {os.strerror(ctypes.get_errno())})"
    try:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    except OSError as e:
        return f"file modes only (user namespace map refused: {e})"
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return f"file modes only (mount namespace: {os.strerror(ctypes.get_errno())})"
    for path in paths:
        target = path.encode()
        # A remount in a user namespace must keep the flags the outer mount locked.
        st = os.statvfs(path)
        kept = st.f_flag & (_MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        if (libc.mount(target, target, None, _MS_BIND | _MS_REC, None) != 0
                or libc.mount(None, target, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | kept, None) != 0):
            raise OSError(ctypes.get_errno(), f"cannot mount {path} read-only: {os.strerror(ctypes.get_errno())}")
    return "a read-only mount"


def _die_with_the_worker(parent: int) -> None:
    """SIGKILL this runner when the worker that started it dies (its job will run again elsewhere)."""
    import ctypes
    import signal

    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the call
        os._exit(EXIT_CRASH)


def main(argv: list[str]) -> int:
    _die_with_the_worker(int(argv[2]) if len(argv) > 2 else os.getppid())
    spec_path = Path(argv[1])
    spec = json.loads(spec_path.read_text())
    output = Path(spec["output"])
    # First of all, before any runner code: set here rather than by the parent, whose threads make a
    # preexec_fn unsafe.
    _limit_memory(int(spec["memory_mb"]))
    protected = [spec["model_dir"], *sorted({str(Path(e["path"]).parent) for e in spec["evalsets"]})]
    print(f"runner: the model directory is protected by {_mount_read_only(protected)}", file=sys.stderr,
          flush=True)
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
