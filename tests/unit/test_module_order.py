"""The order test modules reach the workers: longest first, and kept so by xdist (not re-sorted by test count)."""

from __future__ import annotations

from types import SimpleNamespace

from tests.support.module_order import longest_first


def test_longest_modules_come_first_and_keep_their_tests_order():
    items = [SimpleNamespace(nodeid=n) for n in ("a.py::t1", "b.py::t1", "b.py::t2", "c.py::t1", "a.py::t2")]
    seconds = {"a.py": 5.0, "c.py": 90.0}
    assert [i.nodeid for i in longest_first(items, seconds)] == [
        "c.py::t1", "a.py::t1", "a.py::t2", "b.py::t1", "b.py::t2"]


def test_xdist_does_not_reorder_the_modules_by_their_number_of_tests(pytestconfig):
    # Its default (--loadscope-reorder) sorts modules by test count, most first: a one-test module of
    # minutes would run last, alone.
    assert pytestconfig.getoption("loadscopereorder") is False
