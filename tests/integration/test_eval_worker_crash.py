"""A worker killed in the middle of an eval: its runner dies with it, another worker runs the suite again
once the lease runs out, and the result is recorded once."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from registry.bootstrap import bootstrap
from registry.db.models import AuditEvent, EvalResult, Version
from registry.policy import default_policy_dir
from registry.services import versions
from registry.services.versions import SubmitRequest
from tests.support.registry import make_admin
from tests.support.worker_process import kill_worker, start_worker, stop_worker, wait_for

# Works (a minute while the pace file says "slow", a second after), then reports. The runner sees the
# pace file (an operator's read-only path) and nothing else of this disk: it cannot write out, so the
# test finds it among the processes.
SLOW_SCRIPT = """
import json, sys, time
from pathlib import Path
time.sleep(60 if Path(sys.argv[3]).read_text() == "slow" else 1)
Path(sys.argv[2]).write_text(json.dumps({"metrics": {"quality.score": 0.9}}))
"""


def running(script: str) -> tuple[int, list[str]] | None:
    """The pid and arguments of a process running ``script``, if one is."""
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().decode().split("\0")
            if entry.name.isdigit() and script in argv:
                return int(entry.name), argv[argv.index(script) + 1:]
        except OSError:
            continue
    return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


@pytest.mark.parametrize("deployment", ["local"], indirect=True)
def test_a_worker_killed_mid_eval_leaves_no_runner_and_the_rerun_records_once(deployment, tmp_path):
    policy = tmp_path / "policies"
    shutil.copytree(default_policy_dir(), policy)
    data = json.loads((policy / "data.json").read_text())
    shown = tmp_path / "suite"
    shown.mkdir()
    script, pace = shown / "slow.py", shown / "pace"
    script.write_text(SLOW_SCRIPT)
    pace.write_text("slow")
    deployment.settings.eval_read_only_paths = [shown]
    deployment.env["MODELREG_EVAL_READ_ONLY_PATHS"] = json.dumps([str(shown)])
    data["modelreg"]["suites"]["quality"] = {
        "runner": "command", "timeout_s": 120,
        "settings": {"command": ["{python}", str(script), "{model_dir}", "{output}", str(pace)]}}
    (policy / "data.json").write_text(json.dumps(data))
    deployment.env["MODELREG_POLICY_DIR"] = str(policy)
    deployment.settings.policy_dir = policy
    deployment.settings.local_source_roots = [tmp_path]
    deployment.env["MODELREG_LOCAL_SOURCE_ROOTS"] = json.dumps([str(tmp_path)])
    # Its own eval root: a worker another test starts meanwhile sweeps the machine's default root, and would
    # take the killed worker's copy before this test looks at it.
    work_root = tmp_path / "evals"
    deployment.env["MODELREG_EVAL_WORK_DIR"] = str(work_root)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "slow"}')

    container = bootstrap(deployment.settings)
    try:
        admin = make_admin(container)
        with container.session_factory() as session:
            version, _ = versions.submit(session, admin, "acme", "slow", SubmitRequest(source=str(model)),
                                         open_source=container.open_source, limits=container.limits(),
                                         ports=container.ports)
            version_id = version.id

        log = tmp_path / "workers.log"
        first = start_worker(deployment, log)
        try:
            pid, args = wait_for(lambda: running(str(script)), "the eval to start", first, log)
        finally:
            kill_worker(first)
        # The runner's model directory is bound at its own path: the copy the killed worker made.
        copy = Path(args[0]).parent
        assert copy.parent == work_root, f"the eval ran outside MODELREG_EVAL_WORK_DIR: {copy}"
        give_up = time.monotonic() + 30
        while alive(pid) and time.monotonic() < give_up:
            time.sleep(0.02)
        assert not alive(pid), "the runner's command outlived the killed worker"
        assert (copy / "model" / "config.json").exists(), "the killed worker left no model copy to sweep"

        pace.write_text("fast")
        second = start_worker(deployment, log)
        try:
            wait_for(lambda: not copy.exists(), "the new worker to remove the killed one's model copy",
                     second, log)

            def settled() -> bool:
                with container.session_factory() as session:
                    return session.get(Version, version_id).state == "awaiting_approval"

            wait_for(settled, "the version to settle", second, log)
        finally:
            stop_worker(second)

        with container.session_factory() as session:
            rows = session.scalars(select(EvalResult).where(EvalResult.version_id == version_id)).all()
            recorded = session.scalars(select(AuditEvent).where(AuditEvent.action == "version.eval.recorded")).all()
        assert [(r.suite, r.status, r.metrics) for r in rows] == [("quality", "completed", {"quality.score": 0.9})]
        assert len(recorded) == 1
    finally:
        container.dispose()
