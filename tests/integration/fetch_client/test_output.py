"""What fetch and ``cache warm`` print: readable lines for a person, JSON lines with ``--json``, a progress bar
on a terminal only."""

from __future__ import annotations

import json
import os
import pty
import subprocess

import pytest

from tests.support.fetch_node import (
    PART,
    build_node_world,
)
from tests.support.server import MODELREG

pytestmark = pytest.mark.seeded(builder=build_node_world)


def _plain(node, *args: str) -> subprocess.CompletedProcess:
    return node.cli(*args, "--trust-root", str(node.root_file))


def test_without_json_a_person_gets_readable_lines_with_json_a_program_gets_json_lines(node):
    node.release()
    human = _plain(node, "fetch", "acme/tiny@prod", str(node.tmp / "a"), "--part-size", PART)
    assert human.returncode == 0, human.stderr
    lines = human.stdout.strip().splitlines()
    assert lines and not [line for line in lines if line.lstrip().startswith(("{", "["))], human.stdout
    assert lines[-1].startswith(f"acme/tiny@1 (serial 1) in {node.tmp / 'a'}: {len(node.files)} files")
    assert "download: " in human.stdout and human.stderr == ""  # no bar: stderr is not a terminal

    machine = node.fetch(node.tmp / "b")
    events = [json.loads(line)["event"] for line in machine.stdout.strip().splitlines()]
    assert {"phase", "summary"} <= set(events) and events[-1] == "summary"

    warm = _plain(node, "cache", "warm", "acme/tiny@prod", "--once")
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.strip() and not warm.stdout.lstrip().startswith("{"), warm.stdout
    warm_json = _plain(node, "cache", "warm", "acme/tiny@prod", "--once", "--json")
    assert json.loads(warm_json.stdout.strip().splitlines()[-1])["event"] == "summary"


def _on_a_terminal(node, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    """Run the CLI with stderr on a pseudo-terminal (a person's shell); return it and what the terminal got."""
    leader, follower = pty.openpty()
    process = subprocess.Popen([MODELREG, *args], stdout=subprocess.PIPE, stderr=follower, env=node.env())
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    out, _ = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, out.decode(), ""), \
        b"".join(chunks).decode(errors="replace")


def test_a_progress_bar_on_a_terminal_and_none_with_json(node):
    node.release()
    done, terminal = _on_a_terminal(node, "fetch", "acme/tiny@prod", str(node.tmp / "a"), "--trust-root",
                                    str(node.root_file), "--part-size", PART)
    assert done.returncode == 0, terminal
    assert "download" in terminal and "MiB" in terminal and "\x1b[" in terminal, terminal
    assert not done.stdout.lstrip().startswith("{")
    quiet, terminal = _on_a_terminal(node, "fetch", "acme/tiny@prod", str(node.tmp / "b"), "--trust-root",
                                     str(node.root_file), "--json")
    assert quiet.returncode == 0 and terminal == ""
