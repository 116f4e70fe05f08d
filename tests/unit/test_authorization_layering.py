"""Authorization is decided in services only: routers and workers check no roles, and the loaders
that read without a check are private to their service (or say ``unchecked`` in their name)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from registry.services import audit, identity, scans, versions
from tests.support import source_tree

ROOT = Path(__file__).resolve().parents[2]
CHECKS = {"require", "require_admin", "Permission", "permissions"}
SHELLS = source_tree.python_files("api") + source_tree.python_files("workers")


@pytest.mark.parametrize("path", SHELLS, ids=lambda p: str(p.relative_to(ROOT)))
def test_routers_and_workers_check_no_permission(path: Path) -> None:
    tree = source_tree.tree(path)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert not (used | imported) & CHECKS


@pytest.mark.parametrize("module", [versions, identity, audit, scans], ids=lambda m: m.__name__)
def test_no_public_unchecked_loader(module) -> None:
    """A public ``get_*`` would read a tenant's rows for whoever calls it: loaders are private."""
    public = [name for name, fn in inspect.getmembers(module, inspect.isfunction)
              if fn.__module__ == module.__name__ and name.startswith("get_")]
    assert public == []
