"""The runner subprocess from the parent's side: limits, the environment, the outcome of each way a run ends."""

from __future__ import annotations

import io
import json
import os
import struct

import pytest

from registry.domain.errors import DigestMismatchError, InvalidPathError
from registry.evals import sandbox
from registry.storage.local import LocalBlobStore
from tests.support.tiny_llm import write_tiny_llm


def definition(runner: str = "weights-sanity", timeout_s: int = 60, memory_mb: int = 4096, **settings) -> dict:
    return {"suite": "t", "runner": runner, "runner_version": "x", "settings": settings, "timeout_s": timeout_s,
            "memory_mb": memory_mb, "evalsets": []}


def test_a_runner_blocked_past_its_wall_clock_limit_is_killed(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    # A valid safetensors file of one 1 TiB tensor, sparse on disk: reading it takes the runner far longer
    # than its limit, as a runner stuck on a huge model would.
    header = json.dumps({"t": {"dtype": "F32", "shape": [2**38], "data_offsets": [0, 2**40]}}).encode()
    with open(model / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + 2**40)
    outcome = sandbox.run_runner(definition(timeout_s=3), model, [], facts=None, work_root=tmp_path)
    assert (outcome.status, outcome.reason) == ("failed", "timeout")
    assert outcome.error == "the runner did not finish within 3 s" and 3000 <= outcome.duration_ms < 20_000
    assert list(tmp_path.glob("run-*")) == []  # its temp directory is gone


def test_a_runner_over_its_memory_limit_fails_with_reason_memory(tmp_path):
    model = write_tiny_llm(tmp_path / "model")
    # Enough to start Python, not enough to import numpy and map the weights.
    outcome = sandbox.run_runner(definition(memory_mb=40), model, [], facts=None, work_root=tmp_path)
    assert (outcome.status, outcome.reason) == ("failed", "memory"), outcome.log[-2000:]


def test_a_runner_refusal_is_runner_error_with_its_message(tmp_path):
    (tmp_path / "empty").mkdir()
    outcome = sandbox.run_runner(definition(), tmp_path / "empty", [], facts=None, work_root=tmp_path)
    assert (outcome.status, outcome.reason, outcome.error) == ("failed", "runner_error", "no safetensors weights")


def test_a_completed_run_returns_the_runner_metrics_and_its_log(tmp_path):
    model = write_tiny_llm(tmp_path / "model")
    outcome = sandbox.run_runner(definition(), model, [], facts=None, work_root=tmp_path)
    assert outcome.status == "completed" and outcome.result["metrics"]["sanity.failed_checks"] == 0
    assert outcome.result["cases_total"] == len(outcome.result["cases"]) > 0


def test_the_environment_is_an_allow_list(monkeypatch, tmp_path):
    monkeypatch.setenv("MODELREG_SIGNING_KEY_PEM", "k")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("EVAL_ENDPOINT_KEY", "sk-eval")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "t")
    env = sandbox.scrubbed_env(tmp_path, {"api_key_env": "EVAL_ENDPOINT_KEY"})
    assert env["EVAL_ENDPOINT_KEY"] == "sk-eval"
    assert not [k for k in env if k.startswith(("MODELREG_", "AWS_"))]
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path) and env["HF_HUB_OFFLINE"] == "1"
    # A suite cannot ask for the registry's or a cloud's credentials by naming them.
    assert "AWS_SESSION_TOKEN" not in sandbox.scrubbed_env(tmp_path, {"api_key_env": "AWS_SESSION_TOKEN"})
    assert "MODELREG_SIGNING_KEY_PEM" not in sandbox.scrubbed_env(tmp_path,
                                                                  {"api_key_env": "MODELREG_SIGNING_KEY_PEM"})


def test_materialize_hash_checks_every_file_and_leaves_it_read_only(tmp_path):
    store = LocalBlobStore(tmp_path / "blobs", "secret")
    good = store.put(io.BytesIO(b"weights")).digest
    root = sandbox.materialize([("a/model.bin", good)], store, tmp_path / "m")
    assert (root / "a" / "model.bin").read_bytes() == b"weights"
    assert not os.access(root / "a" / "model.bin", os.W_OK) or os.geteuid() == 0
    assert oct((root / "a" / "model.bin").stat().st_mode & 0o777) == "0o444"
    assert oct((root / "a").stat().st_mode & 0o777) == "0o555"
    sandbox.remove_tree(root)
    assert not root.exists()


def test_materialize_refuses_bytes_that_differ_from_the_digest(tmp_path):
    store = LocalBlobStore(tmp_path / "blobs", "secret")
    digest = store.put(io.BytesIO(b"weights")).digest
    blob = next(p for p in (tmp_path / "blobs").rglob(digest))
    blob.chmod(0o644)
    blob.write_bytes(b"tampered")
    with pytest.raises(DigestMismatchError):
        sandbox.materialize([("model.bin", digest)], store, tmp_path / "m")


def test_materialize_refuses_a_path_that_leaves_the_directory(tmp_path):
    store = LocalBlobStore(tmp_path / "blobs", "secret")
    digest = store.put(io.BytesIO(b"x")).digest
    with pytest.raises(InvalidPathError):
        sandbox.materialize([("../escape", digest)], store, tmp_path / "m")
    assert not (tmp_path / "escape").exists()


def test_the_model_directory_is_read_only_to_the_runner_even_as_root(tmp_path):
    """File modes do not stop root; the runner's read-only mount does (``registry/evals/isolation.py``)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "score.txt").write_text("1")
    # The suite's script ships with the model: nothing else of the worker's disk is visible to the runner.
    script = model / "write.py"
    script.write_text("import json, sys\nfrom pathlib import Path\n"
                      "try:\n    Path(sys.argv[1], 'planted').write_text('x'); w = 1\n"
                      "except OSError:\n    w = 0\n"
                      "Path(sys.argv[2]).write_text(json.dumps({'metrics': {'writable': w}}))\n")
    outcome = sandbox.run_runner(definition("command", command=["{python}", str(script), "{model_dir}", "{output}"]),
                                 model, [], facts=None, work_root=tmp_path)
    assert outcome.status == "completed", outcome.log
    assert b"runner: isolated" in outcome.log
    assert outcome.result["metrics"] == {"writable": 0.0} and not (model / "planted").exists()
    assert os.access(model, os.W_OK)  # outside the runner nothing changed
