"""The node commands' refusals as a person reads them: one line, ``error: <kind>: `` or plain ``error: ``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.server import MODELREG

WORKTREE = Path(__file__).resolve().parents[3]


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    # No registry listens on port 9: each case fails on the trust root before any request.
    env = {**os.environ, "PYTHONPATH": str(WORKTREE), "MODELREG_URL": "http://127.0.0.1:9",
           "MODELREG_CACHE": str(tmp_path / "cache")}
    return subprocess.run([MODELREG, *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("root,code,line", [
    ("missing.json", 1, "error: cannot read trust root file {root}: No such file or directory"),
    ("not-json.json", 1, "error: trust root file {root} is not JSON"),
    ("not-a-root.json", 10, "error: signature: trust root file {root} is not a DSSE envelope"),
])
@pytest.mark.parametrize("command", ["fetch", "verify"])
def test_a_trust_root_error_is_one_line_without_a_doubled_prefix(tmp_path, root, code, line, command):
    (tmp_path / "not-json.json").write_text("{")
    (tmp_path / "not-a-root.json").write_text(json.dumps([1]))
    dest = tmp_path / "dest"
    if command == "verify":
        dest.mkdir()
        (dest / ".git").mkdir()
        (dest / ".git" / "modelreg-release.json").write_text(json.dumps({"envelope": {"payload": (
            "eyJpc3N1ZWRfYXQiOiAiMjAzMC0wMS0wMVQwMDowMDowMCswMDowMCIsICJtb2RlbCI6ICJhL2IiLCAicmVmIjogInByb2QifQ==")}}))
        args = ["verify", str(dest)]
    else:
        args = ["fetch", "acme/tiny@prod", str(dest)]
    result = _run(tmp_path, *args, "--trust-root", str(tmp_path / root))
    assert result.returncode == code, result.stderr
    assert result.stderr.strip().splitlines() == [line.format(root=tmp_path / root)]
    assert "error: error:" not in result.stderr and not dest.joinpath("config.json").exists()
