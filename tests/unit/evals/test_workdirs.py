"""Eval work directories: a killed worker's model copy is swept, a live worker's never is.

The "workers" here are real processes holding a run directory; one is SIGKILLed, as the OOM killer
would, so no cleanup of its own runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from registry.evals.workdirs import eval_workdir, sweep
from tests.support.server import MODELREG

HOLDER = """
import sys, time
from pathlib import Path
from registry.evals.workdirs import eval_workdir
with eval_workdir(Path(sys.argv[1])) as work:
    (work / "model").mkdir()
    (work / "model" / "weights.bin").write_bytes(b"w" * 1024)
    (work / "model" / "weights.bin").chmod(0o444)  # materialized copies are read-only
    (work / "model").chmod(0o555)
    print(work, flush=True)
    time.sleep(600)
"""


def _holder(root: Path) -> tuple[subprocess.Popen, Path]:
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdout=subprocess.PIPE, text=True)
    return process, Path(process.stdout.readline().strip())


def test_a_killed_runs_copy_is_swept_and_a_live_one_is_not(tmp_path):
    root = tmp_path / "evals"
    live, live_dir = _holder(root)
    killed, killed_dir = _holder(root)
    try:
        assert sweep(root) == 0 and live_dir.is_dir() and killed_dir.is_dir()
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(10)
        assert killed_dir.is_dir(), "the killed worker cleaned up after all: nothing to test"
        assert sweep(root) == 1
        assert not killed_dir.exists() and not Path(f"{killed_dir}.lock").exists()
        assert (live_dir / "model" / "weights.bin").read_bytes() == b"w" * 1024
    finally:
        for process in (live, killed):
            process.kill()
            process.wait()
    assert sweep(root) == 1 and list(root.iterdir()) == []


def test_a_finished_run_leaves_nothing_and_a_lockless_directory_is_swept(tmp_path):
    root = tmp_path / "evals"
    with eval_workdir(root) as work:
        (work / "model").mkdir()
    assert list(root.iterdir()) == []
    (root / "eval-0123456789abcdef" / "model").mkdir(parents=True)  # killed while being removed
    (root / "unrelated").mkdir()
    assert sweep(root) == 1 and [p.name for p in root.iterdir()] == ["unrelated"]


def test_modelreg_gc_sweeps_eval_copies_of_killed_workers(tmp_path):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MODELREG_")}, "TMPDIR": str(tmp_path)}
    root = tmp_path / f"modelreg-evals-{os.getuid()}"
    holder, run = _holder(root)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(10)
    result = subprocess.run([MODELREG, "gc", "--data-dir", str(tmp_path / "data"), "--json"], env=env,
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["eval_dirs_swept"] == 1 and not run.exists()
