"""The CLI contract: every command takes --json; local commands exit with the documented codes."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import typer.main

from registry.cli import app
from tests.support import scan_samples
from tests.support.tiny_model import tiny_model_files

MODELREG = str(Path(sys.executable).parent / "modelreg")


def _leaf_commands(group, prefix: str = ""):
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            yield from _leaf_commands(cmd, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", cmd


def test_every_command_has_json_output():
    commands = dict(_leaf_commands(typer.main.get_command(app)))
    assert {"serve", "worker", "submit", "scan", "audit verify", "version show"} <= set(commands)
    missing = [name for name, cmd in commands.items() if not any("--json" in p.opts for p in cmd.params)]
    assert missing == []


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([MODELREG, *args], capture_output=True, text=True, timeout=120)


def test_scan_exit_codes(tmp_path):
    safe = tmp_path / "safe"
    safe.mkdir()
    for path, data in tiny_model_files(0).items():
        (safe / path).write_bytes(data)
    ok = _run("scan", str(safe), "--json")
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["verdict"] == "safe" and len(report["files"]) == len(tiny_model_files(0))

    evil = tmp_path / "evil.bin"
    evil.write_bytes(scan_samples.pip_main())
    bad = _run("scan", str(evil))
    assert bad.returncode == 1 and "unsafe" in bad.stdout and "pip.main" in bad.stdout

    suspicious = tmp_path / "sus"
    suspicious.mkdir()
    (suspicious / "modeling_x.py").write_text("print('hi')\n")
    assert _run("scan", str(suspicious)).returncode == 1

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    err = _run("scan", str(broken), "--json")
    assert err.returncode == 2 and json.loads(err.stdout)["verdict"] == "error"


def test_scan_of_a_missing_path_is_a_usage_error(tmp_path):
    r = _run("scan", str(tmp_path / "nope"))
    assert r.returncode == 2 and r.stderr.startswith("error:") and len(r.stderr.strip().splitlines()) == 1


def test_client_command_without_url_fails_with_one_line(monkeypatch):
    r = subprocess.run([MODELREG, "whoami"], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 1 and "MODELREG_URL" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [["submit", "x"], ["version", "show"], ["nope"]])
def test_usage_errors_exit_2(args):
    r = _run(*args)
    assert r.returncode == 2 and r.stderr.startswith("error:")


def test_gc_sweeps_what_a_crashed_writer_left(tmp_path):
    data = tmp_path / "data"
    (data / "blobs" / "tmp").mkdir(parents=True)
    leftover = data / "blobs" / "tmp" / "put-crashed"
    leftover.write_bytes(b"partial")
    young = _run("gc", "--data-dir", str(data), "--json")
    assert young.returncode == 0 and json.loads(young.stdout)["swept"] == 0 and leftover.exists()
    swept = _run("gc", "--data-dir", str(data), "--older-than-hours", "0", "--json")
    assert json.loads(swept.stdout)["swept"] == 1 and not leftover.exists()


class _NotARegistry(http.server.BaseHTTPRequestHandler):
    """Answers every GET with the scenario's status, content type and body (a proxy, another API)."""

    def do_GET(self):
        status, content_type, body = self.server.answer
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


@pytest.mark.parametrize("answer", [
    pytest.param((200, "text/html", b"<html>\n<body>proxy login</body>\n</html>"), id="html-page"),
    pytest.param((200, "application/json", b'{"name": '), id="truncated-json"),
    pytest.param((502, "application/json", b'{"message": "bad gateway"}'), id="error-with-message-key"),
    pytest.param((503, "text/plain", b"upstream\nconnect error\n"), id="multi-line-text-error"),
])
def test_a_server_that_is_not_the_registry_fails_with_one_line(answer):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotARegistry)
    server.answer = answer
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        r = _run("whoami", "--url", f"http://127.0.0.1:{server.server_address[1]}", "--token", "mr_x")
    finally:
        server.shutdown()
        server.server_close()
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("error:") and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_registry_that_is_down_fails_with_one_line():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    r = _run("whoami", "--url", f"http://127.0.0.1:{port}", "--token", "mr_x")
    assert r.returncode == 1 and "cannot reach the registry" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


# What a hostile (or compromised, or old) server could send back: terminal escapes, bidi overrides, forged lines.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\u202eexe.txt\r\nfake line\x9b31m"
HOSTILE_ANSWERS = {
    "/v1/tenants": (200, [{"name": "acme" + HOSTILE, "created_at": "2026-01-01T00:00:00Z"}, {"name": "ok"}]),
    "/v1/models/acme/m/versions/1": (200, {
        "model": "acme/m" + HOSTILE, "version": 1, "state": "failed", "failure_reason": "upstream" + HOSTILE,
        "failure_detail": {"message": "boom" + HOSTILE}, "requested_revision": "main" + HOSTILE,
        "resolved_revision": None, "source": {"kind": "upload", "repo": "label" + HOSTILE},
        "files": [{"path": "w" + HOSTILE, "size": 1, "sha256": None, "mirrored": False}],
        "licenses": {"resolved": "MIT" + HOSTILE, "declared": None, "gated": "manual" + HOSTILE,
                     "access": {"token": "registry", "identity": "bot" + HOSTILE},
                     "findings": [{"source": "card" + HOSTILE, "normalized": None, "problem": "bad" + HOSTILE},
                                  {"source": "conflict", "normalized": None, "problem": "x" + HOSTILE}]},
    }),
    "/v1/whoami": (403, {"type": "https://modelreg.dev/problems/permission-denied", "title": "x" + HOSTILE,
                         "status": 403, "detail": "denied" + HOSTILE}),
}


class _HostileRegistry(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        status, payload = HOSTILE_ANSWERS[self.path.split("?")[0]]
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if status < 400 else "application/problem+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


@pytest.fixture
def hostile_registry():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HostileRegistry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _raw_controls(text: str) -> list[str]:
    """Control and bidi characters in ``text``, apart from the newlines that end the CLI's own lines."""
    from registry.domain.text import printable

    return [line for line in text.split("\n") if printable(line) != line]


@pytest.mark.parametrize(("args", "lines"), [
    (["tenant", "list"], 2),
    (["version", "show", "acme/m", "1"], 8),
    (["whoami"], 1),
])
def test_human_output_never_writes_control_characters_from_the_server(hostile_registry, args, lines):
    r = _run(*args, "--url", hostile_registry, "--token", "mr_x")
    out = r.stdout + r.stderr
    assert _raw_controls(out) == [], out
    # Escaped visibly (an error line also folds the server's whitespace into spaces).
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\u202eexe.txt" in out and "fake line\\x9b31m" in out
    assert len(out.strip("\n").split("\n")) == lines, out


@pytest.mark.parametrize("args", [["tenant", "list"], ["version", "show", "acme/m", "1"]])
def test_json_output_escapes_control_characters_and_keeps_the_data(hostile_registry, args):
    r = _run(*args, "--url", hostile_registry, "--token", "mr_x", "--json")
    assert r.returncode == 0, r.stderr
    assert _raw_controls(r.stdout) == []
    path = {"tenant": "/v1/tenants", "version": "/v1/models/acme/m/versions/1"}[args[0]]
    assert json.loads(r.stdout) == HOSTILE_ANSWERS[path][1]


def test_scan_output_escapes_control_characters_in_file_names(tmp_path):
    (tmp_path / f"model{HOSTILE.replace('/', '')}.json").write_text("{}")
    r = _run("scan", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert _raw_controls(r.stdout) == [] and len(r.stdout.strip("\n").split("\n")) == 2, r.stdout
