"""Longest modules first: the order ``make test`` hands test modules to its workers.

``--dist loadfile`` gives each worker whole modules in collection order, so a long module collected last
runs alone at the end while the other workers idle (run 1 of 2026-12-05: the last 3 % of the tests took
six of its 28 minutes). Handing out the longest first (longest-processing-time scheduling) leaves the
short ones to fill the end. ``tests/module_seconds.json`` holds each module's measured seconds (the sum of
its tests' setup, call and teardown, SQLite and PostgreSQL together); a module it does not list (a new
one) counts as short. The order is the same in every worker process (xdist compares collections). xdist's own
reordering of modules by their number of tests (``--loadscope-reorder``, its default) would undo it: the
suite runs with ``--no-loadscope-reorder`` (pyproject's ``addopts``; run H of 2026-12-06 ended on one-test
modules of two minutes, schemathesis among them).

Refresh the measurements from a run's JUnit report::

    PYTEST_ADDOPTS=--junitxml=/tmp/junit.xml make test
    .venv/bin/python -m tests.support.module_order /tmp/junit.xml > tests/module_seconds.json

Example:
    >>> module_of("tests/e2e/test_cli.py::test_x[sqlite]")
    'tests/e2e/test_cli.py'
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

SECONDS_FILE = Path(__file__).resolve().parent.parent / "module_seconds.json"


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def load_seconds(path: Path = SECONDS_FILE) -> dict[str, float]:
    """Module path -> measured seconds; empty when the file is missing or unreadable (collection order then)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in doc.items() if isinstance(k, str) and isinstance(v, (int, float))}


def longest_first(items: list[Any], seconds: dict[str, float]) -> list[Any]:
    """``items`` (pytest items, anything with ``nodeid``) with the longest modules first; a module's tests keep
    their order, and modules of equal (or unknown) length keep collection order (the sort is stable)."""
    return sorted(items, key=lambda item: -seconds.get(module_of(item.nodeid), 0.0))


def module_of_classname(classname: str) -> str:
    """The module path of a JUnit ``classname`` (``tests.e2e.test_x`` or ``tests.e2e.test_x.TestY``).

    Example:
        >>> module_of_classname("tests.integration.fetch_client.test_resume.TestRange")
        'tests/integration/fetch_client/test_resume.py'
    """
    parts = classname.split(".")
    last = max((i for i, p in enumerate(parts) if p.startswith("test_")), default=len(parts) - 1)
    return "/".join(parts[:last + 1]) + ".py"


def seconds_from_junit(reports: Iterable[Path]) -> dict[str, float]:
    """Each module's summed test time (setup, call and teardown) from JUnit XML reports."""
    totals: dict[str, float] = defaultdict(float)
    for report in reports:
        for case in ET.parse(report).iter("testcase"):
            path = module_of_classname(case.get("classname", ""))
            if path.startswith("tests/"):
                totals[path] += float(case.get("time") or 0)
    return {k: round(v, 1) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    json.dump(seconds_from_junit(Path(p) for p in sys.argv[1:]), sys.stdout, indent=1)
    sys.stdout.write("\n")
