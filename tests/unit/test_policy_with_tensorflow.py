"""regopy and TensorFlow in one process: the policy engine loads regopy after TensorFlow, the one order
that works (modelscan imports TensorFlow on its first scan, in the process that also judges versions)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

JUDGE_THEN_SCAN = """
from registry.policy import PolicyEngine, default_policy_dir
decision = PolicyEngine.from_directory(default_policy_dir()).approval(
    {"files": [], "scans": [], "unscanned": [], "approvals": [], "submitter": "a",
     "license": {"id": "mit", "findings": []}})
assert decision.outcome == "pending", decision
import modelscan.modelscan  # imports TensorFlow
print("both loaded")
"""


def test_a_policy_judged_before_the_first_modelscan_scan_does_not_abort_the_process():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, "-c", JUDGE_THEN_SCAN], capture_output=True, text=True, env=env,
                            timeout=300, cwd=ROOT)
    assert result.returncode == 0 and "both loaded" in result.stdout, result.stderr[-2000:]
