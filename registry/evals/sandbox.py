"""Running one suite in a subprocess: a verified, read-only model directory, limits, a scrubbed environment.

:func:`materialize` copies a version's files out of the blob store, hashing each one as it is written
and refusing any whose bytes differ from the recorded digest, then makes the tree read-only.
:func:`run_runner` starts ``python -m registry.evals.child`` in a new session with:

- a wall-clock limit (the whole process group is killed when it passes);
- an address-space limit (``RLIMIT_AS``, set by the child before any runner code runs);
- an environment built from nothing but an allow-list (no ``MODELREG_*``, no cloud or hub
  credentials), with ``HOME`` and ``TMPDIR`` in a private temp directory and the hubs offline;
- its output (both streams) captured as the eval's log, bounded;
- its own user, mount and network namespaces (:mod:`registry.evals.isolation`): it sees the model
  (for an adapter, the adapter and the base it is bound to), the eval sets, its work directory and the Python
  that runs it, and no network but loopback. The one
  endpoint a suite names (an ``openai`` suite's ``endpoint``) is reached through a Unix socket in the
  work directory that :class:`EndpointRelay` joins to that host and port alone. Where the kernel
  refuses namespaces the run fails with reason ``unisolated``, unless :class:`Isolation` allows it;
  :attr:`Outcome.isolated` records which.

Usage (a sketch, not run as a doctest)::

    outcome = run_runner(definition, model_dir, evalsets, facts=None, work_root=tmp)
    outcome.status, outcome.reason
    # -> ('failed', 'timeout')
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Iterable

from registry.domain.errors import DigestMismatchError, InvalidPathError
from registry.evals import child
from registry.evals.runners import AdapterOnBase
from registry.storage.base import BlobStore

# Variables a runner may see from the worker's environment; everything else is dropped.
PASSED_THROUGH = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONPATH")
# Prefixes a suite may not ask to pass through (``settings.api_key_env``): the registry's and the clouds'.
FORBIDDEN_PREFIXES = ("MODELREG_", "AWS_", "GOOGLE_", "AZURE_", "HF_", "HUGGING_FACE_", "DATABASE_", "PG")
MAX_LOG_BYTES = 1 << 20
LOG_HEAD_BYTES = 256 << 10
KILL_GRACE_S = 5.0
# What a process out of address space prints when the failure is not a Python MemoryError: a shared
# library that cannot be mapped, a C++ allocation, an errno.
OUT_OF_MEMORY_SIGNS = (b"MemoryError", b"Cannot allocate memory", b"failed to map segment", b"std::bad_alloc",
                       b"out of memory")
ENDPOINT_SOCKET = "endpoint.sock"
MAX_RELAYED_CONNECTIONS = 64
RELAY_CONNECT_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True, slots=True)
class Isolation:
    """How a runner is shut in: the operator's choices (``eval_allow_unisolated``, ``eval_read_only_paths``).

    Attributes:
        allow_unisolated: run anyway where the kernel refuses namespaces (else the eval fails closed).
        read_only_paths: more paths shown read-only to every runner (a tool's install, a datasets cache).
    """

    allow_unisolated: bool = False
    read_only_paths: tuple[str, ...] = ()


@dataclasses.dataclass(slots=True)
class Outcome:
    """What one suite's run came to: ``completed`` with the runner's output, or ``failed`` with a reason."""

    status: str
    reason: str | None
    error: str | None
    result: dict[str, Any]
    log: bytes
    duration_ms: int
    isolated: bool | None = None
    """Whether the runner ran in its namespaces; None when it never reached that point."""


def failed(reason: str, error: str, log: bytes = b"", duration_ms: int = 0) -> Outcome:
    return Outcome("failed", reason, error[:2000], {}, log, duration_ms)


def materialize(files: Iterable[tuple[str, str]], blob_store: BlobStore, dest: Path) -> Path:
    """Write each ``(path, sha256)`` under ``dest`` from the store, hash-checked; leave it read-only.

    Raises:
        DigestMismatchError: a blob's bytes do not hash to the digest the version recorded.
        InvalidPathError: a path that would leave ``dest``.
    """
    root = dest.resolve()
    for path, digest in files:
        target = (root / path).resolve()
        if root not in target.parents:
            raise InvalidPathError(path, "leaves the model directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        h = hashlib.sha256()
        with open(target, "xb") as out:
            for chunk in blob_store.open_range(digest):
                h.update(chunk)
                out.write(chunk)
        if h.hexdigest() != digest:
            raise DigestMismatchError(path, expected=digest, actual=h.hexdigest())
    _set_modes(root, file_mode=0o444, dir_mode=0o555)
    return root


def _set_modes(root: Path, *, file_mode: int, dir_mode: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), file_mode)
        os.chmod(dirpath, dir_mode)


def remove_tree(root: Path) -> None:
    """Remove a materialized (read-only) tree."""
    if root.exists():
        _set_modes(root, file_mode=0o644, dir_mode=0o755)
        shutil.rmtree(root, ignore_errors=True)


def scrubbed_env(work_dir: Path, settings: dict[str, Any]) -> dict[str, str]:
    """The runner's whole environment: the allow-list, a private home, the hubs offline, and the one
    variable a suite names in ``settings.api_key_env`` (an eval endpoint's key) when it is set."""
    env = {k: os.environ[k] for k in PASSED_THROUGH if k in os.environ}
    env.update({
        "HOME": str(work_dir), "TMPDIR": str(work_dir), "HF_HOME": str(work_dir / "hf"),
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
        "TOKENIZERS_PARALLELISM": "false", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
    })
    key_env = settings.get("api_key_env")
    if isinstance(key_env, str) and key_env in os.environ and not key_env.upper().startswith(FORBIDDEN_PREFIXES):
        env[key_env] = os.environ[key_env]
    return env


def run_runner(definition: dict[str, Any], model_dir: Path, evalsets: list[dict[str, str]], *,
               facts: dict[str, Any] | None, work_root: Path, trust_remote_code: bool = False,
               isolation: Isolation = Isolation(), adapter: AdapterOnBase | None = None) -> Outcome:
    """Run the suite ``definition`` (see :meth:`registry.evals.suites.Suite.definition`) on ``model_dir``.

    Args:
        evalsets: ``{"name", "digest", "path"}`` of each eval set's verified bytes on disk.
        work_root: where the runner's private temp directory is made (and removed afterwards).
        isolation: the operator's isolation settings.
        adapter: set when ``model_dir`` holds a LoRA adapter: its name and its base (``base_dir``, verified and
            read-only like ``model_dir``, when the suite loads it).
    """
    timeout_s = float(definition["timeout_s"])
    work_dir = Path(tempfile.mkdtemp(prefix="run-", dir=work_root))
    # The mount point of the runner's new root: it stays empty out here.
    root_dir = Path(tempfile.mkdtemp(prefix="root-", dir=work_root))
    endpoint = named_endpoint(definition)
    relay = EndpointRelay(work_dir / ENDPOINT_SOCKET, *endpoint) if endpoint else None
    status_read, status_write = os.pipe()
    try:
        output = work_dir / "result.json"
        spec = {
            "runner": definition["runner"], "settings": definition["settings"], "model_dir": str(model_dir),
            "evalsets": evalsets, "work_dir": str(work_dir), "facts": facts, "output": str(output),
            "trust_remote_code": trust_remote_code, "memory_mb": definition["memory_mb"],
            # The runner's own deadline comes a little early, so it can stop what it started.
            "timeout_s": max(1.0, timeout_s - min(KILL_GRACE_S, timeout_s / 10)),
            "endpoint_socket": str(work_dir / ENDPOINT_SOCKET) if relay else None,
            "adapter": None if adapter is None else {
                "name": adapter.name, "base": adapter.base_ref,
                "base_dir": str(adapter.base_dir) if adapter.base_dir is not None else None},
            "isolation": {"root": str(root_dir), "allow_unisolated": isolation.allow_unisolated,
                          "read_only": [str(Path(p).resolve()) for p in isolation.read_only_paths],
                          "status_fd": status_write},
        }
        spec_path = work_dir / "spec.json"
        spec_path.write_text(json.dumps(spec))
        log_path = work_dir / "runner.log"
        started = time.monotonic()
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "registry.evals.child", str(spec_path), str(os.getpid())], cwd=work_dir,
                env=scrubbed_env(work_dir, definition["settings"]), stdin=subprocess.DEVNULL,
                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True, pass_fds=(status_write,),
            )
            os.close(status_write)
            status_write = -1
            timed_out = False
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc.pid)
                code = proc.wait()
            finally:
                # Whatever the runner started (a model server) goes with it.
                _kill_group(proc.pid)
        duration_ms = int((time.monotonic() - started) * 1000)
        log = _read_log(log_path)
        outcome = _outcome(code, timed_out, timeout_s, output, log, duration_ms)
        outcome.isolated = _read_isolation(status_read)
        return outcome
    finally:
        if relay is not None:
            relay.close()
        os.close(status_read)
        if status_write >= 0:
            os.close(status_write)
        remove_tree(work_dir)
        remove_tree(root_dir)


def _read_isolation(fd: int) -> bool | None:
    """What the child said on its status pipe before any runner code ran (the pipe holds one short line)."""
    os.set_blocking(fd, False)
    try:
        line = os.read(fd, 4096)
    except BlockingIOError:
        return None
    return True if line.startswith(b"isolated\n") else False if line.startswith(b"unisolated") else None


def named_endpoint(definition: dict[str, Any]) -> tuple[str, int] | None:
    """The one ``(host, port)`` a suite may reach from its runner: an ``openai`` suite's ``endpoint``.

    Example:
        >>> named_endpoint({"runner": "openai", "settings": {"endpoint": "https://eval.example:8443/v1"}})
        ('eval.example', 8443)
    """
    url = definition.get("settings", {}).get("endpoint") if definition.get("runner") == "openai" else None
    if not isinstance(url, str):
        return None
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None  # the runner refuses the setting itself, with its own message
    return (parts.hostname, port) if parts.hostname and parts.scheme in ("http", "https") else None


class EndpointRelay:
    """A Unix socket whose every connection is joined to one TCP ``host:port``, and nowhere else.

    The runner's network namespace has no route out; this is its one way to the endpoint its suite
    names. Bytes pass through unchanged (TLS stays end to end); at most
    :data:`MAX_RELAYED_CONNECTIONS` at a time.
    """

    def __init__(self, path: Path, host: str, port: int) -> None:
        self._address = (host, port)
        self._slots = threading.BoundedSemaphore(MAX_RELAYED_CONNECTIONS)
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        self._server.listen(16)
        threading.Thread(target=self._accept, name="eval-endpoint-relay", daemon=True).start()

    def close(self) -> None:
        """Stop accepting and cut every relayed connection."""
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        with self._lock:
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def _accept(self) -> None:
        while True:
            try:
                inner, _ = self._server.accept()
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                inner.close()
                continue
            threading.Thread(target=self._relay, args=(inner,), daemon=True).start()

    def _relay(self, inner: socket.socket) -> None:
        try:
            try:
                outer = socket.create_connection(self._address, timeout=RELAY_CONNECT_TIMEOUT_S)
            except OSError:
                return
            outer.settimeout(None)
            with self._lock:
                self._open.update((inner, outer))
            back = threading.Thread(target=_pump, args=(outer, inner), daemon=True)
            back.start()
            _pump(inner, outer)
            back.join()
            with self._lock:
                self._open.difference_update((inner, outer))
            outer.close()
        finally:
            inner.close()
            self._slots.release()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _outcome(code: int, timed_out: bool, timeout_s: float, output: Path, log: bytes,
             duration_ms: int) -> Outcome:
    if timed_out:
        return failed("timeout", f"the runner did not finish within {timeout_s:g} s", log, duration_ms)
    if code == child.EXIT_MEMORY or (code != child.EXIT_OK and any(sign in log[-65536:]
                                                                   for sign in OUT_OF_MEMORY_SIGNS)):
        return failed("memory", "the runner reached its memory limit", log, duration_ms)
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        return failed("crash", f"the runner was killed by {name}", log, duration_ms)
    doc = _read_output(output)
    if code == child.EXIT_TIMEOUT:
        return failed("timeout", str((doc or {}).get("error") or "the runner ran out of time"), log, duration_ms)
    if code == child.EXIT_UNISOLATED:
        return failed("unisolated", str((doc or {}).get("error") or "the runner cannot be isolated"), log,
                      duration_ms)
    if code == child.EXIT_RUNNER_ERROR:
        return failed("runner_error", str((doc or {}).get("error") or "the runner refused"), log, duration_ms)
    if code != child.EXIT_OK:
        return failed("crash", f"the runner exited with status {code}: {_last_line(log)}", log, duration_ms)
    if not isinstance(doc, dict) or not isinstance(doc.get("result"), dict):
        return failed("bad_output", "the runner finished without a readable result", log, duration_ms)
    return Outcome("completed", None, None, doc["result"], log, duration_ms)


def _read_output(path: Path) -> Any:
    try:
        if path.stat().st_size > 64 << 20:
            return None
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _read_log(path: Path) -> bytes:
    """The log, whole when small, else its head and its tail with a line saying what was left out."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        if size <= MAX_LOG_BYTES:
            return f.read()
        head = f.read(LOG_HEAD_BYTES)
        tail_bytes = MAX_LOG_BYTES - LOG_HEAD_BYTES
        f.seek(size - tail_bytes)
        tail = f.read()
    return head + f"\n[... {size - MAX_LOG_BYTES} bytes of log left out ...]\n".encode() + tail


def _last_line(log: bytes) -> str:
    lines = [line for line in log.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
