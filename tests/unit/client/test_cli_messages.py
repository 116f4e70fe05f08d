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


@pytest.mark.parametrize("command", [["fetch", "acme/tiny@prod"], ["verify"],
                                     ["cache", "warm", "acme/tiny@prod", "--once"]])
@pytest.mark.parametrize("pin,line", [
    (None, "error: no trust root: pass --trust-root FILE or --trust-root-sha256 HEX (MODELREG_TRUST_ROOT, "
           "MODELREG_TRUST_ROOT_SHA256)"),
    ("abc", "error: --trust-root-sha256 'abc' is not a sha256 (64 hex digits)"),
])
def test_no_trust_root_or_a_malformed_pin_is_one_line_before_any_request(tmp_path, command, pin, line):
    dest = tmp_path / "dest"
    args = [*command, str(dest)] if command[0] != "cache" else command
    if command == ["verify"]:
        dest.mkdir()
        (dest / ".git").mkdir()
        (dest / ".git" / "modelreg-release.json").write_text(json.dumps({"envelope": {"payload": (
            "eyJpc3N1ZWRfYXQiOiAiMjAzMC0wMS0wMVQwMDowMDowMCswMDowMCIsICJtb2RlbCI6ICJhL2IiLCAicmVmIjogInByb2QifQ==")}}))
    result = _run(tmp_path, *args, *(["--trust-root-sha256", pin] if pin else []))
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines() == [line]
    assert not dest.joinpath("config.json").exists()


def test_a_trust_root_file_that_is_not_the_pinned_one_is_refused_as_a_signature_failure(tmp_path):
    root = tmp_path / "root.json"
    root.write_text("{}")
    pin = "0" * 64
    result = _run(tmp_path, "fetch", "acme/tiny@prod", str(tmp_path / "dest"), "--trust-root", str(root),
                  "--trust-root-sha256", pin)
    assert result.returncode == 10, result.stderr
    import hashlib

    actual = hashlib.sha256(b"{}").hexdigest()
    assert result.stderr.strip().splitlines() == [
        f"error: signature: trust root file {root} hashes to sha256 {actual}, not the pinned {pin} "
        "(--trust-root-sha256): refusing to trust it"]
    assert not (tmp_path / "dest").exists()
