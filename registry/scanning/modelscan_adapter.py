"""modelscan as one more scanner: its output recorded beside ours, never deciding alone.

modelscan (``modelscan.modelscan.ModelScan``) picks its scanners by file extension and misses much
of what :mod:`registry.scanning.engine` catches (see docs/scanning.md), so its
:class:`~registry.scanning.model.FileScan` (``scanner="modelscan"``) is stored next to ours and
the verdict that gates a version is ours. Its issues become findings ``modelscan.<severity>``; its
errors (including the ``.npy`` scanner failing under numpy 2) become ``error`` findings, never a
clean result.

modelscan imports TensorFlow when it is installed, and TensorFlow imported after regopy aborts the
process (``free(): invalid pointer``). A registry process loads regopy to judge versions, so when
regopy is already loaded and TensorFlow is installed but not yet imported, the one-file scan runs in
``python -m registry.scanning.modelscan_adapter`` instead, under a memory and time limit
(:func:`needs_child`); the child goes without TensorFlow unless the file is one a TensorFlow scanner may take
(:data:`TENSORFLOW_EXTENSIONS`). Where TensorFlow is absent (production images) modelscan runs in-process.

Usage (a sketch, not run as a doctest)::

    scans = scan_path_with_modelscan(Path("models/bert"))
    {s.path: s.verdict.value for s in scans}
"""

from __future__ import annotations

import copy
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from registry.scanning.model import FileScan, Finding, Severity

SCANNER = "modelscan"

EXTENSION_FOR_FORMAT = {
    "pickle": ".pkl",
    "pytorch-zip": ".pt",
    "pytorch-legacy": ".pt",
    "npy": ".npy",
    "npz": ".npz",
    "zip": ".zip",
    "keras": ".keras",
    "hdf5": ".h5",
}
"""Extension under which modelscan looks at a blob whose format we sniffed."""

CHILD_MEMORY_BYTES = 4 << 30
"""Address space a scanning child may map (TensorFlow's import alone maps about 1.5 GiB)."""
CHILD_TIME_LIMIT_SECONDS = 300.0
MAX_CHILD_RESULT_BYTES = 8 << 20

_SEVERITY = {"CRITICAL": Severity.UNSAFE, "HIGH": Severity.UNSAFE, "MEDIUM": Severity.SUSPICIOUS,
             "LOW": Severity.SUSPICIOUS}


def modelscan_version() -> str:
    """The installed modelscan version (part of its results' cache key)."""
    from modelscan._version import __version__

    return str(__version__)


def _run(path: Path) -> tuple[Any | None, str | None]:
    """Run ModelScan over ``path``; returns the scanner object, or the crash message."""
    try:
        from modelscan.modelscan import ModelScan
        from modelscan.settings import DEFAULT_SETTINGS

        # modelscan logs every scanner error at ERROR level; they are recorded as findings here.
        logging.getLogger("modelscan").setLevel(logging.CRITICAL)
        ms = ModelScan(settings=copy.deepcopy(DEFAULT_SETTINGS))
        ms.scan(path)
        return ms, None
    except Exception as exc:  # noqa: BLE001 - a crash of the third-party scanner is an error result
        return None, f"{type(exc).__name__}: {exc}"


def _relative(source: str, root: Path, single: str | None) -> str:
    """A modelscan source string made relative: ``name`` or ``name:member``."""
    src = str(source)
    root_s = str(root.absolute())
    if src.startswith(root_s):
        src = src[len(root_s) :].lstrip("/")
    if single is not None:
        # The one file may have been shown to modelscan under another name (blob.pkl).
        _, sep, member = src.partition(":")
        return f"{single}{sep}{member}"
    return src


def _owner(source: str, root: Path, single: str | None) -> str:
    """The file (relative POSIX name) a modelscan source string belongs to."""
    # Zip members are reported as "<file>:<member>".
    return _relative(source, root, single).split(":", 1)[0]


def _collect(ms: Any, root: Path, names: list[str], single: str | None, fmt: dict[str, str]) -> list[FileScan]:
    version = modelscan_version()
    scans = {n: FileScan(n, fmt.get(n, "unknown"), [], SCANNER, version) for n in names}

    def add(owner: str, finding: Finding) -> None:
        scan = scans.get(owner)
        if scan is None:
            scan = scans[owner] = FileScan(owner, "unknown", [], SCANNER, version)
        scan.findings.append(finding)

    for issue in ms.issues.all_issues:
        d = issue.details
        sev = getattr(issue.severity, "name", str(issue.severity))
        owner = _owner(str(d.source), root, single)
        add(
            owner,
            Finding(
                f"modelscan.{sev.lower()}", _SEVERITY.get(sev, Severity.SUSPICIOUS),
                f"{_relative(str(d.source), root, single)} global {d.module}.{d.operator}",
                f"modelscan: unsafe operator {d.operator!r} from module {d.module!r} ({d.scanner})",
            ),
        )
    for err in ms.errors:
        info = err.to_dict()
        source = info.get("source")
        owners = [_owner(str(source), root, single)] if source else list(scans)
        for owner in owners:
            where = _relative(str(source), root, single) if source else owner
            add(owner,
                Finding("modelscan.error", Severity.ERROR, where,
                        f"modelscan {info.get('category')}: {info.get('description')}"))
    skipped: dict[str, list[str]] = {}
    for item in ms.skipped:
        skipped.setdefault(_owner(str(item.source), root, single), []).append(str(item.message))
    for owner, messages in skipped.items():
        add(owner,
            Finding("modelscan.skipped", Severity.INFO, owner,
                    f"modelscan skipped {len(messages)} stream(s): {messages[0]}"))
    return [scans[n] for n in sorted(scans)]


def needs_child() -> bool:
    """True when modelscan must not run in this process: regopy is loaded and TensorFlow, installed, is not.

    Example:
        >>> isinstance(needs_child(), bool)
        True
    """
    if "tensorflow" in sys.modules or "regopy" not in sys.modules:
        return False
    return importlib.util.find_spec("tensorflow") is not None


def scan_file_with_modelscan(path: Path, *, name: str | None = None, fmt: str | None = None,
                             isolated: bool | None = None) -> FileScan:
    """Run modelscan over one file, in this process or (``isolated``; default :func:`needs_child`) in a child.

    When the file's extension is not one modelscan scans but our sniffed format maps to one
    (a pickle stored as a content-addressed blob, say), modelscan is shown a link to it named
    with that extension.

    Args:
        path: the file.
        name: the name to report (defaults to the file's name).
        fmt: our sniffed format, used to choose the extension modelscan needs.
        isolated: run in a child process; a child that fails or overruns gives an ``error`` finding.

    Returns:
        modelscan's result as a FileScan with ``scanner="modelscan"``.
    """
    name = name or path.name
    if needs_child() if isolated is None else isolated:
        return _scan_in_child(path, name, fmt)
    want = EXTENSION_FOR_FORMAT.get(fmt or "")
    with tempfile.TemporaryDirectory(prefix="modelreg-modelscan-") as tmp:
        target = path
        if want and path.suffix != want:
            target = Path(tmp) / f"blob{want}"
            try:
                os.symlink(path.absolute(), target)
            except OSError:
                shutil.copyfile(path, target)
        ms, crash = _run(target)
        if ms is None:
            return _crashed(name, fmt, f"modelscan crashed: {crash}")
        return _collect(ms, target.parent, [name], name, {name: fmt or "unknown"})[0]


def _crashed(name: str, fmt: str | None, message: str) -> FileScan:
    return FileScan(name, fmt or "unknown", [Finding("modelscan.error", Severity.ERROR, name, message)], SCANNER,
                    _safe_version())


def _scan_in_child(path: Path, name: str, fmt: str | None) -> FileScan:
    """:func:`scan_file_with_modelscan` in ``python -m registry.scanning.modelscan_adapter`` (limited)."""
    def limit() -> None:  # runs in the child before exec
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY_BYTES, CHILD_MEMORY_BYTES))

    request = json.dumps({"path": str(path.absolute()), "name": name, "format": fmt})
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "HOME", "TMPDIR")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    try:
        done = subprocess.run([sys.executable, "-m", "registry.scanning.modelscan_adapter"], input=request.encode(),
                              capture_output=True, timeout=CHILD_TIME_LIMIT_SECONDS, preexec_fn=limit, env=env,
                              check=False)
    except subprocess.TimeoutExpired:
        return _crashed(name, fmt, f"modelscan took longer than {CHILD_TIME_LIMIT_SECONDS:g} s")
    if done.returncode != 0 or len(done.stdout) > MAX_CHILD_RESULT_BYTES:
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        return _crashed(name, fmt, f"modelscan's process failed (exit {done.returncode}): {tail[0][:300]}")
    try:
        doc = json.loads(done.stdout)
        findings = [Finding(f["rule_id"], Severity(f["severity"]), f["location"], f["message"])
                    for f in doc["findings"]]
        return FileScan(doc["path"], doc["format"], findings, SCANNER, str(doc["scanner_version"]))
    except (ValueError, KeyError, TypeError):
        return _crashed(name, fmt, "modelscan's process gave no readable result")


def scan_path_with_modelscan(root: Path, formats: dict[str, str] | None = None) -> list[FileScan]:
    """Run modelscan once over a directory (one process, one pass).

    Args:
        root: the directory.
        formats: our sniffed format per relative name, recorded in each FileScan.

    Returns:
        One FileScan per file under ``root`` (relative POSIX names), ``scanner="modelscan"``.
    """
    names = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    ms, crash = _run(root)
    if ms is None:
        return [_crashed(n, (formats or {}).get(n), f"modelscan crashed: {crash}") for n in names]
    return _collect(ms, root, names, None, formats or {})


def _safe_version() -> str:
    try:
        return modelscan_version()
    except ImportError:
        return ""


TENSORFLOW_EXTENSIONS = frozenset({".pb", ".keras", ".h5", ".zip", ".npz"})
"""Extensions under which modelscan may reach a scanner that uses TensorFlow: its saved-model and Keras scanners,
or a zip's member they take."""


def _main() -> None:
    request = json.loads(sys.stdin.buffer.read())
    path, want = Path(request["path"]), EXTENSION_FOR_FORMAT.get(request["format"] or "")
    if (want or path.suffix).lower() not in TENSORFLOW_EXTENSIONS:
        # modelscan imports TensorFlow with its scanners (about 4 s of CPU) and uses it only for the extensions
        # above; under any other every scanner that would use it declines the file, so the child goes without.
        sys.modules["tensorflow"] = None  # type: ignore[assignment]
    scan = scan_file_with_modelscan(Path(request["path"]), name=request["name"], fmt=request["format"], isolated=False)
    sys.stdout.write(json.dumps(scan.as_dict()))


if __name__ == "__main__":
    _main()
