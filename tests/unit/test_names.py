"""One name, one thing: public class names and error codes are unique across registry/, api/ and workers/.

Read from the source (no imports), so a module needing an optional dependency is checked too.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.support import source_tree

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("registry", "api", "workers")
# Duplicates waiting on code another change owns; each entry names why. The list only shrinks.
KNOWN_DUPLICATES = {
    # The approvals table's row (registry/db/models.py) and the decision the policy reads
    # (registry/domain/policy_input.py): registry/services/approvals.py, under refactoring, uses both.
    "Approval": {"registry/db/models.py", "registry/domain/policy_input.py"},
}


def _classes() -> list[tuple[str, str, ast.ClassDef]]:
    found = []
    for package in PACKAGES:
        for path in source_tree.python_files(package):
            tree = source_tree.tree(path)
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    found.append((str(path.relative_to(ROOT)), node.name, node))
    return found


def _code(node: ast.ClassDef) -> str | None:
    for stmt in node.body:
        if (isinstance(stmt, ast.Assign) and [getattr(t, "id", None) for t in stmt.targets] == ["code"]
                and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)):
            return stmt.value.value
    return None


def test_public_class_names_are_unique():
    where: dict[str, set[str]] = defaultdict(set)
    for path, name, _ in _classes():
        if not name.startswith("_"):
            where[name].add(path)
    duplicates = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert {n: p for n, p in duplicates.items() if KNOWN_DUPLICATES.get(n) != p} == {}
    assert set(KNOWN_DUPLICATES) <= set(duplicates), "a known duplicate is gone: drop it from the list"


def test_error_codes_are_unique():
    """The last segment of a problem ``type`` and the client's exit kinds hang on ``code``: one class each."""
    where: dict[str, list[str]] = defaultdict(list)
    for path, name, node in _classes():
        code = _code(node)
        if code is not None:
            where[code].append(f"{path}:{name}")
    assert {code: owners for code, owners in where.items() if len(owners) > 1} == {}
    assert len(where) > 50  # the scan really reads the error classes


def test_the_domain_errors_the_client_shares_import_only_the_standard_library():
    """registry/client imports registry/domain/errors.py: it must stay free of anything heavy."""
    tree = ast.parse((ROOT / "registry/domain/errors.py").read_text())
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert modules <= {"__future__", "typing"}
