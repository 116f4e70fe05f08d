"""The benchmarks of the registry's endpoints (admission, log, manifest, oci, oci_referrers) run to their end
with tiny sizes.

The table and the runner are ``tests/support/bench_smoke.py``'s.
"""

from __future__ import annotations

import pytest

from tests.support.bench_smoke import GROUPS, run_smoke


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.s3
@pytest.mark.parametrize("script", GROUPS["registry"])
def test_bench_script_runs_to_its_end_with_tiny_sizes(script):
    run_smoke(script)
