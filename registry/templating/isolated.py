"""The rendered template diff in a child process with a memory and time limit.

Templates come from submitters and upstreams. The sandbox bounds loops, output and string building
(``registry/templating/render.py``), but some string methods (``'x'.ljust(10**9)``) allocate before any
check can run, so a request never renders an untrusted template in the server's own process: it runs
:func:`registry.templating.chat_template_diff` in ``python -m registry.templating.isolated`` under
``RLIMIT_AS`` and a deadline. A child that dies or overruns yields a result that says so and counts as
suspicious (fail closed).

Usage (a sketch, not run as a doctest)::

    doc = diff_in_child(old_text, new_text, variables={"bos_token": "<s>"})
    doc["suspicious"], doc["changed"]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Mapping

MEMORY_LIMIT_BYTES = 1 << 30
"""Address space the child may map (the interpreter and jinja2 need about 60 MiB)."""
TIME_LIMIT_SECONDS = 30.0
MAX_RESULT_BYTES = 8 << 20


def _failed(reason: str) -> dict[str, Any]:
    return {"suspicious": True, "changed": [], "conversations": [],
            "findings": [{"kind": "analysis-failed", "detail": reason}], "error": reason}


def diff_in_child(old: str | None, new: str | None, *, variables: Mapping[str, Any] | None = None,
                  memory_bytes: int = MEMORY_LIMIT_BYTES, timeout: float = TIME_LIMIT_SECONDS) -> dict[str, Any]:
    """``chat_template_diff(old, new, variables=...).as_dict()``, computed in a limited child process.

    Returns:
        The diff document; on a child that ran out of memory or time, or failed, a document with
        ``error``, no renderings, and ``suspicious`` true.
    """
    request = json.dumps({"old": old, "new": new, "variables": dict(variables or {})})

    def limit() -> None:  # runs in the child before exec
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "LANG", "LC_ALL")}
    try:
        done = subprocess.run([sys.executable, "-m", "registry.templating.isolated"], input=request.encode(),
                              capture_output=True, timeout=timeout, preexec_fn=limit, env=env, check=False)
    except subprocess.TimeoutExpired:
        return _failed(f"rendering took longer than {timeout:g} s")
    if done.returncode != 0 or len(done.stdout) > MAX_RESULT_BYTES:
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        return _failed(f"rendering failed (exit {done.returncode}): {tail[0][:300]}")
    try:
        return json.loads(done.stdout)
    except ValueError:
        return _failed("rendering gave no readable result")


def _main() -> None:
    from registry.templating import chat_template_diff

    request = json.loads(sys.stdin.buffer.read())
    result = chat_template_diff(request["old"], request["new"], variables=request["variables"]).as_dict()
    sys.stdout.write(json.dumps(result))


if __name__ == "__main__":
    _main()
