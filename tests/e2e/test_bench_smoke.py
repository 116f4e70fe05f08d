"""Every benchmark in bench/ runs to its end with tiny sizes and prints its figures, so none can rot
unnoticed (issue 18: bench/mirror.py measured its rounds, then died on a lifecycle it did not know).

The scripts are found by glob: a new one without an entry in ``tests/support/bench_smoke.py`` (its tiny
arguments, its figures and its group) fails here until it gets one. This module runs the pipeline group;
``test_bench_smoke_node.py`` and ``test_bench_smoke_registry.py`` the others.
"""

from __future__ import annotations

import pytest

from tests.support.bench_smoke import GROUPS, SMOKE, run_smoke, scripts


def test_every_bench_script_has_a_smoke_entry_and_a_group():
    assert scripts(), "no benchmarks found"
    assert sorted(SMOKE) == scripts(), "add an entry to SMOKE for each script in bench/ (and remove gone ones)"
    grouped = [s for group in GROUPS.values() for s in group]
    assert sorted(grouped) == scripts(), "put each script in exactly one of GROUPS"


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.s3
@pytest.mark.parametrize("script", GROUPS["pipeline"])
def test_bench_script_runs_to_its_end_with_tiny_sizes(script):
    run_smoke(script)
