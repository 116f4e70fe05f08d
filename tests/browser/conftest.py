"""Browser tests: a real ``modelreg serve`` driven by Playwright in Debian's ``chromium``.

``playwright install`` cannot reach its download site here, so the browser is Debian's package, found
on PATH (``executable_path``). The session's setup installs it with apt when it is missing; when it is
still missing (or Playwright is), the tests fail under CI and are skipped, saying why, elsewhere.
Screenshots of every page go to a temporary directory named in the output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.interprocess import exclusive


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"browser tests need it and CI is set: {reason}", pytrace=False)
    pytest.skip(reason)


def _ensure_chromium() -> str | None:
    """Debian's chromium on PATH, installed with apt (once) when missing."""
    with exclusive(Path(tempfile.gettempdir()) / "modelreg-tests-apt.lock"):
        found = shutil.which("chromium")
        if found:
            return found
        if shutil.which("apt-get") and os.geteuid() == 0:
            subprocess.run("apt-get update && apt-get install -y chromium", shell=True, check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
        return shutil.which("chromium")


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = _ensure_chromium()
    if path is None:
        _missing("Debian's `chromium` is not on PATH and `apt-get install -y chromium` did not install it")
    return path


@pytest.fixture(scope="package")
def browser(chromium_path):
    # Package-scoped, not session-scoped: while Playwright's sync API is entered, its event loop counts
    # as running in this thread, and every later test's ``asyncio.run`` would fail. Its end is here.
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("Playwright is not installed (pip install 'modelreg[test]')")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="session")
def shots(request) -> Path:
    """Where the screenshots go (kept after the run, named in the output)."""
    where = Path(tempfile.mkdtemp(prefix="modelreg-console-shots-"))
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"console screenshots: {where}")
    request.config.add_cleanup(lambda: reporter and reporter.write_line(f"console screenshots: {where}"))
    return where
