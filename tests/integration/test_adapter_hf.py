"""Adapters through ``/hf``, on SQLite and PostgreSQL: PEFT, huggingface_hub and KServe's storage code load an
approved adapter from a live modelreg as from the Hub, on exactly the base it is bound to.

The world (``tests/support/adapter_served.py``): acme/llm@1 (the tiny Llama) in ``prod``, acme/llm@2 (other
weights) approved, acme/llm-support@1 (PEFT's LoRA for @1) approved and in ``prod``. The served
``adapter_config.json`` names the base as ``acme/llm`` at @1's commit; every listing describes those bytes, and the
stored, signed bytes stay what they were. PEFT runs on CPU torch in a subprocess (``HF_ENDPOINT`` is read when
``huggingface_hub`` is imported), its logits compared exactly with the adapter loaded from the submitted directory
on the submitted base.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from huggingface_hub import HfApi, hf_hub_download

from api.app import create_app
from registry.domain.adapter_config import with_base
from registry.services import hf, versions
from registry.signing.bundle import verify_model_bundle
from tests.support.adapter_served import ADAPTER_REPO, BASE_REPO, build_served_adapter, promote
from tests.support.live_app import serve_in_thread
from tests.support.release_unit import NAME, TENANT
from tests.support.tiny_adapter import write_files

pytestmark = pytest.mark.seeded(builder=build_served_adapter)

CONFIG = "adapter_config.json"

# Logits of the adapter as PEFT loads it through /hf, compared with the submitted directories' (exact equality).
PEFT = """
import json, sys
import torch
from peft import AutoPeftModelForCausalLM, PeftModel
from transformers import AutoModelForCausalLM

base_dir, adapter_dir, cases = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ids = torch.tensor([[1, 17, 42, 99, 5, 250, 3]])

def logits(model):
    model.eval()
    with torch.no_grad():
        return model(ids).logits

submitted = logits(PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir), adapter_dir))
out = {"adapter_changes_the_logits": not torch.equal(logits(AutoModelForCausalLM.from_pretrained(base_dir)), submitted)}
for label, (kind, base_revision, adapter_revision) in cases.items():
    if kind == "peft":
        base = AutoModelForCausalLM.from_pretrained(sys.argv[4], revision=base_revision)
        model = PeftModel.from_pretrained(base, sys.argv[5], revision=adapter_revision)
    else:
        model = AutoPeftModelForCausalLM.from_pretrained(sys.argv[5], revision=adapter_revision)
    out[label] = torch.equal(logits(model), submitted)
print(json.dumps(out))
"""

INITIALIZER = "import sys\nfrom kserve_storage import Storage\nStorage.download_files([sys.argv[1]], [sys.argv[2]])\n"


@pytest.fixture
def live(container, seeded):
    with serve_in_thread(create_app(container)) as url:
        yield {"url": url, "token": seeded["node"]}


def _hub_env(live, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "MODELREG_"))}
    env.update(HF_ENDPOINT=f"{live['url']}/hf", HF_TOKEN=live["token"], HF_HOME=str(home),
               HF_HUB_DISABLE_TELEMETRY="1", TRANSFORMERS_NO_ADVISORY_WARNINGS="1", HOME=str(home))
    return env


def _peft(live, seeded, tmp_path: Path, cases: dict[str, tuple[str, str | None, str]]) -> dict[str, bool]:
    base_dir = write_files(tmp_path / "submitted-base", seeded["files"])
    adapter_dir = write_files(tmp_path / "submitted-adapter", seeded["adapter"])
    done = subprocess.run([sys.executable, "-c", PEFT, str(base_dir), str(adapter_dir), json.dumps(cases),
                           BASE_REPO, ADAPTER_REPO], env=_hub_env(live, tmp_path / "hf-home"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _base_commit(container, number: int = 1) -> str:
    with container.session_factory() as session:
        return hf.commit_of(versions.find_version_unchecked(session, TENANT, NAME, number))


def _served_config(container, seeded) -> bytes:
    """What /hf must serve as the adapter's config: the pure function of the signed original and binding."""
    return with_base(seeded["adapter"][CONFIG], base_name=BASE_REPO, base_revision=_base_commit(container))


def test_peft_loads_the_adapter_through_hf_with_the_logits_of_the_submitted_directories(container, seeded, live,
                                                                                       tmp_path):
    found = _peft(live, seeded, tmp_path, {
        "peft_from_prod": ("peft", "prod", "prod"),
        "peft_pinned": ("peft", _base_commit(container), "1"),
        # The base comes from the served config alone: base_model_name_or_path and revision.
        "auto_peft": ("auto", None, "prod"),
    })
    assert found == {"adapter_changes_the_logits": True, "peft_from_prod": True, "peft_pinned": True,
                     "auto_peft": True}


def test_the_served_config_pins_the_bound_base_and_an_alias_whose_base_moved_is_refused(container, seeded, live,
                                                                                       tmp_path):
    promote(container, seeded["people"], NAME, 2)  # acme/llm@prod now gives other weights
    headers = {"Authorization": f"Bearer {live['token']}"}
    moved = httpx.get(f"{live['url']}/hf/api/models/{ADAPTER_REPO}/revision/prod", headers=headers)
    assert (moved.status_code, moved.headers["x-error-code"]) == (404, "RevisionNotFound"), moved.text
    assert "its base's alias acme/llm@prod gives acme/llm@2, whose weights are not the ones it is bound to" \
        in moved.json()["detail"]
    # main is prod, for the adapter as for any repository.
    assert httpx.get(f"{live['url']}/hf/api/models/{ADAPTER_REPO}", headers=headers).status_code == 404
    pinned = httpx.get(f"{live['url']}/hf/api/models/{ADAPTER_REPO}/revision/1", headers=headers)
    assert pinned.status_code == 200, pinned.text
    # By its number the adapter is still served, naming @1's commit: AutoPeft loads the bound weights, while the
    # base's prod (other weights) with the adapter gives other logits.
    found = _peft(live, seeded, tmp_path, {"auto_peft": ("auto", None, "1"), "on_moved_prod": ("peft", "prod", "1")})
    assert found == {"adapter_changes_the_logits": True, "auto_peft": True, "on_moved_prod": False}
    promote(container, seeded["people"], NAME, 1)
    assert httpx.get(f"{live['url']}/hf/api/models/{ADAPTER_REPO}/revision/prod", headers=headers).status_code == 200


def test_every_answer_describes_the_served_config_and_the_signed_bytes_are_unchanged(container, seeded, live,
                                                                                    tmp_path):
    served = _served_config(container, seeded)
    original = seeded["adapter"][CONFIG]
    assert served != original
    doc = json.loads(served)
    assert (doc["base_model_name_or_path"], doc["revision"]) == (BASE_REPO, _base_commit(container))
    assert {k: v for k, v in doc.items() if k not in ("base_model_name_or_path", "revision")} == {
        k: v for k, v in json.loads(original).items() if k not in ("base_model_name_or_path", "revision")}
    git_sha1 = hf.git_blob_sha1(served)
    weights = seeded["adapter"]["adapter_model.safetensors"]

    api = HfApi(endpoint=f"{live['url']}/hf", token=live["token"])
    info = api.model_info(ADAPTER_REPO, revision="prod", files_metadata=True)
    siblings = {s.rfilename: s for s in info.siblings}
    assert (siblings[CONFIG].size, siblings[CONFIG].blob_id, siblings[CONFIG].lfs) == (len(served), git_sha1, None)
    assert siblings["adapter_model.safetensors"].lfs.sha256 == hashlib.sha256(weights).hexdigest()
    tree = {e.path: e for e in api.list_repo_tree(ADAPTER_REPO, revision=info.sha)}
    assert (tree[CONFIG].size, tree[CONFIG].blob_id) == (len(served), git_sha1)
    [paths] = api.get_paths_info(ADAPTER_REPO, [CONFIG], revision="1")
    assert (paths.size, paths.blob_id) == (len(served), git_sha1)
    downloaded = hf_hub_download(ADAPTER_REPO, CONFIG, revision="prod", endpoint=f"{live['url']}/hf",
                                 token=live["token"], cache_dir=tmp_path / "cache")
    assert Path(downloaded).read_bytes() == served
    with httpx.Client(base_url=f"{live['url']}/hf", headers={"Authorization": f"Bearer {live['token']}"}) as http:
        head = http.head(f"/{ADAPTER_REPO}/resolve/{info.sha}/{CONFIG}")
        assert (head.headers["etag"], head.headers["x-linked-size"]) == (f'"{git_sha1}"', str(len(served)))
        part = http.get(f"/{ADAPTER_REPO}/resolve/1/{CONFIG}", headers={"Range": "bytes=5-24"})
        assert (part.status_code, part.content) == (206, served[5:25])
        assert part.headers["content-range"] == f"bytes 5-24/{len(served)}"
        assert http.get(f"/{ADAPTER_REPO}/resolve/1/adapter_model.safetensors").content == weights

    # The store keeps the submitted bytes, and the signature covers them, not the served ones.
    assert b"".join(container.blob_store.open_range(hashlib.sha256(original).hexdigest())) == original
    with container.session_factory() as session:
        version = versions.find_version_unchecked(session, TENANT, "llm-support", 1)
        statement = verify_model_bundle(version.manifest_bundle, container.ports.signer.public_key)
    signed = {r["name"]: r["digest"] for r in statement["predicate"]["resources"]}
    assert signed[CONFIG] == hashlib.sha256(original).hexdigest()
    # What was served is recomputed from the signed statement alone: its binding names the base and its digest.
    binding = statement["predicate"]["modelreg"]["adapter_of"]
    assert with_base(original, base_name=binding["model"], base_revision=binding["manifest_digest"][:40]) == served


def test_kserve_storage_downloads_the_adapter_from_hf(container, seeded, live, tmp_path):
    dest = tmp_path / "mnt" / "models"
    done = subprocess.run([sys.executable, "-c", INITIALIZER, f"hf://{ADAPTER_REPO}", str(dest)],
                          env=_hub_env(live, tmp_path / "home"), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    got = {p.relative_to(dest).as_posix(): p.read_bytes() for p in sorted(dest.rglob("*"))
           if p.is_file() and ".cache" not in p.relative_to(dest).parts}
    assert got == {**seeded["adapter"], CONFIG: _served_config(container, seeded)}
