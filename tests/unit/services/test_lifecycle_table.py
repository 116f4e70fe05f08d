"""Job kinds are one registry: every kind a service enqueues has exactly one worker handler."""

from __future__ import annotations

import ast
from pathlib import Path

from registry.jobs import JobKind
from workers.handlers import build_handlers

ROOT = Path(__file__).resolve().parents[3]


def test_every_job_kind_has_a_handler_and_every_handler_a_kind() -> None:
    assert build_handlers().kinds() == sorted(k.value for k in JobKind)


def test_services_enqueue_only_through_enqueue_job() -> None:
    """A bare ``jobs.enqueue`` in a service would build its own kind and key: the helper is the one way."""
    offenders = []
    for path in sorted((ROOT / "registry" / "services").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "enqueue":
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def test_only_lifecycle_changes_a_version_state() -> None:
    """``version.state = ...`` is written in lifecycle.advance alone (creation aside)."""
    offenders = []
    for path in sorted((ROOT / "registry" / "services").glob("*.py")):
        if path.name == "lifecycle.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Attribute) and t.attr == "state" for t in node.targets):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
