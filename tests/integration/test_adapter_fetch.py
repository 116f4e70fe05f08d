"""``modelreg fetch`` of an adapter against the real manifest endpoint (issue 34, part 2; ADR 0018), on SQLite and
PostgreSQL: ``acme/llm-support@prod --with-base`` lands as vLLM's filesystem resolver reads it
(``DEST/llm-support/adapter_config.json`` naming ``acme/llm``, the base in ``DEST/llm``), and PEFT gives the
logits of the pair as submitted; ``modelreg verify`` accepts exactly the one rewrite; a base alias moved to other
weights exits 20 (``adapter-base``) until the rebound adapter is promoted; a revoked base exits 14 and
``cache warm``'s revocation follower drops the adapter from the node cache."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from api.app import create_app
from registry.services import revocations
from tests.support.adapter_release import SERVED_NAME, TRAINED_FROM, adapter_files, build_adapter_in_prod, promote
from tests.support.adapter_submissions import ADAPTER
from tests.support.fetch_node import assert_refused, summary_of
from tests.support.live_app import serve_in_thread
from tests.support.release_unit import NAME, TENANT
from tests.support.server import MODELREG
from tests.support.tiny_adapter import write_files
from tests.support.tiny_llm import tiny_llm_files

pytestmark = pytest.mark.seeded(builder=build_adapter_in_prod)

PROD = f"{TENANT}/{ADAPTER}@prod"
INPUT_IDS = [[1, 5, 9, 42, 7, 100, 3]]


@pytest.fixture
def node(container, seeded, tmp_path):
    """The world behind a real uvicorn; the node's environment (its token, the pinned trust root)."""
    with serve_in_thread(create_app(container)) as url:
        root = tmp_path / "root.json"
        root.write_text(httpx.get(f"{url}/v1/trust-root", timeout=30).text)
        yield {**os.environ, "MODELREG_URL": url, "MODELREG_TOKEN": seeded["node"], "MODELREG_TRUST_ROOT": str(root)}


def run(env: dict, *args: str, cache: Path | None = None) -> subprocess.CompletedProcess:
    env = {**env, **({"MODELREG_CACHE": str(cache)} if cache else {})}
    return subprocess.run([MODELREG, *args], env=env, capture_output=True, text=True, timeout=300)


def logits(base_dir: Path, adapter_dir: Path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), adapter_dir)
    model.eval()
    with torch.no_grad():
        return model(torch.tensor(INPUT_IDS)).logits


def test_peft_loads_the_fetched_adapter_on_the_fetched_base_as_the_submitted_pair(node, tmp_path):
    import torch

    dest = tmp_path / "loras"
    done = run(node, "fetch", PROD, str(dest), "--with-base", "--json")
    assert done.returncode == 0, done.stderr
    summary = summary_of(done)
    assert (summary["model"], summary["version"], summary["dest"]) == (f"{TENANT}/{ADAPTER}", 1,
                                                                      str(dest / ADAPTER))
    assert summary["adapter_of"]["served_name"] == SERVED_NAME and summary["base"]["dest"] == str(dest / NAME)
    submitted = adapter_files(0)
    # vLLM's filesystem resolver: DEST/<adapter name>/adapter_config.json, naming the base as it is served.
    config = (dest / ADAPTER / "adapter_config.json").read_bytes()
    assert json.loads(config)["base_model_name_or_path"] == SERVED_NAME and json.loads(config)["peft_type"] == "LORA"
    # Every other byte as signed: the one value replaced, the signed config kept beside the release.
    assert config == submitted["adapter_config.json"].replace(json.dumps(TRAINED_FROM).encode(),
                                                              json.dumps(SERVED_NAME).encode())
    assert (dest / ADAPTER / ".git" / "modelreg-adapter-config.json").read_bytes() == submitted["adapter_config.json"]
    assert (dest / ADAPTER / "adapter_model.safetensors").read_bytes() == submitted["adapter_model.safetensors"]
    for path, data in tiny_llm_files().items():
        assert (dest / NAME / path).read_bytes() == data

    fetched = logits(dest / NAME, dest / ADAPTER)
    original = logits(write_files(tmp_path / "base", tiny_llm_files()), write_files(tmp_path / "adapter", submitted))
    assert torch.equal(fetched, original)

    for directory in (dest / ADAPTER, dest / NAME):
        checked = run(node, "verify", str(directory))
        assert checked.returncode == 0, checked.stderr
    again = run(node, "fetch", PROD, str(dest), "--with-base", "--json")
    assert again.returncode == 0, again.stderr
    assert summary_of(again)["noop"] is True and summary_of(again)["base"]["noop"] is True


def _edit(path: Path, old: bytes, new: bytes) -> bytes:
    before = path.read_bytes()
    assert old in before
    path.chmod(0o644)
    path.write_bytes(before.replace(old, new, 1))
    return before


def test_verify_accepts_exactly_the_rewrite_and_nothing_else(node, tmp_path):
    not_adapter = run(node, "fetch", f"{TENANT}/{NAME}@prod", str(tmp_path / "base"), "--with-base")
    assert not_adapter.returncode == 1 and not (tmp_path / "base").exists()
    assert not_adapter.stderr.strip().splitlines() == [
        f"error: {TENANT}/{NAME}@prod is no adapter: --with-base fetches an adapter's base beside it"]
    dest = tmp_path / "loras"
    assert run(node, "fetch", PROD, str(dest)).returncode == 0
    adapter = dest / ADAPTER
    config = adapter / "adapter_config.json"
    assert not (dest / NAME).exists(), "without --with-base the base is not fetched"
    assert run(node, "verify", str(adapter)).returncode == 0
    served = json.dumps(SERVED_NAME).encode()
    tampered = {
        "another base name": (config, served, b'"acme/llm-evil"'),
        "another byte of the rewritten config": (config, b'"r": 4', b'"r": 8'),
        "the kept signed config, edited alike": (adapter / ".git" / "modelreg-adapter-config.json", b'"r": 4',
                                                 b'"r": 8'),
    }
    for what, (path, old, new) in tampered.items():
        before = _edit(path, old, new)
        if what.startswith("the kept"):
            _edit(config, old, new)
        refused = run(node, "verify", str(adapter))
        assert refused.returncode == 13, (what, refused.stdout, refused.stderr)  # digest
        assert "adapter_config.json" in refused.stderr or "modelreg-adapter-config.json" in refused.stderr, what
        path.write_bytes(before)
        if what.startswith("the kept"):
            _edit(config, new, old)
        assert run(node, "verify", str(adapter)).returncode == 0, what


def test_a_base_moved_to_other_weights_refuses_the_fetch_until_a_rebound_adapter_is_promoted(
        node, container, people, tmp_path):
    promote(container, people, NAME, "prod", 2)
    dest = tmp_path / "loras"
    refused = run(node, "fetch", PROD, str(dest), "--with-base")
    assert_refused(refused, 20, "adapter-base")
    assert (f"{PROD} (version 1) is bound to the weights of {TENANT}/{NAME}@1" in refused.stderr
            and f"{TENANT}/{NAME}@prod now points at version 2" in refused.stderr), refused.stderr
    assert not dest.exists()

    promote(container, people, ADAPTER, "prod", 2)
    done = run(node, "fetch", PROD, str(dest), "--with-base", "--json")
    assert done.returncode == 0, done.stderr
    summary = summary_of(done)
    assert (summary["version"], summary["adapter_of"]["version"], summary["adapter_of"]["ref"]) == (2, 2, "prod")
    assert (dest / NAME / "model.safetensors").read_bytes() == tiny_llm_files(1)["model.safetensors"]
    assert (dest / ADAPTER / "adapter_model.safetensors").read_bytes() == adapter_files(1)["adapter_model.safetensors"]


def test_revoking_the_base_fails_the_adapters_fetch_and_the_follower_drops_it(node, container, people, tmp_path):
    cache = tmp_path / "node-cache"
    warmed = run(node, "cache", "warm", "--once", "--json", PROD, cache=cache)
    assert warmed.returncode == 0, warmed.stderr
    with container.session_factory() as session:
        revocations.revoke(session, people["admin"], TENANT, NAME, 1, "bad weights", clock=container.clock)

    refused = run(node, "fetch", PROD, str(tmp_path / "loras"))
    assert_refused(refused, 14, "revoked")
    assert "its base acme/llm@1 was revoked: bad weights" in refused.stderr

    again = run(node, "cache", "warm", "--once", "--json", PROD, cache=cache)
    assert again.returncode == 14, again.stderr  # the adapter's release is refused: revoked
    revoked = [r for r in map(json.loads, again.stdout.splitlines()) if r.get("event") == "revoked"]
    assert [(r["model"], r["version"]) for r in revoked] == [(f"{TENANT}/{ADAPTER}", 1)], again.stdout
    assert revoked[0]["blobs_removed"] > 0
    assert "error: revocations" not in again.stderr, again.stderr
