"""The ``>>>`` examples in the docstrings of registry/, api/ and workers/ run, and say what they show.

Modules are found by reading their text at collection and imported only in their own test, so one that
needs an optional dependency fails (or runs) alone and nothing heavy is imported to collect the suite.
An example that cannot run here is not a doctest: it is written as a ``Usage (a sketch ...)::`` block.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

from tests.support import source_tree

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("registry", "api", "workers")
# Modules whose examples are left alone for now, each with why. The list only shrinks.
NOT_RUN: dict[str, str] = {}


def _modules_with_examples() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in source_tree.python_files(package):
            if ">>>" in source_tree.text(path):
                parts = path.relative_to(ROOT).with_suffix("").parts
                found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


MODULES = _modules_with_examples()


@pytest.mark.parametrize("module", [m for m in MODULES if m not in NOT_RUN])
def test_docstring_examples_run(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS, report=True)
    assert result.failed == 0
    assert result.attempted > 0


def test_no_example_is_skipped_instead_of_run() -> None:
    skipped = [m for m in MODULES if m not in NOT_RUN and "doctest: +SKIP" in _source(m)]
    assert skipped == []
    assert set(NOT_RUN) <= set(MODULES), "a module left alone has no example any more: drop it from NOT_RUN"


def _source(module: str) -> str:
    path = ROOT / Path(*module.split("."))
    return (path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).read_text()
