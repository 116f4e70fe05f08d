"""The release unit as a node fetches it: the registry's own release names every component, ``modelreg fetch``
writes ``modelreg-unit.json`` and the vLLM config beside the files (and ``model_signing verify`` still accepts
DEST), and a release whose signed component digests or ``tokenizer_config.json`` parts are not those of its
files is refused, DEST untouched.

The version: the tiny safetensors model with a ``tokenizer_config.json`` holding two named chat templates,
a ``generation_config.json``, a prompt template ``prompts/support.jinja`` and a ``serving-profile.json`` that
names the ``tool_use`` template.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from registry.db.models import VersionFacts
from registry.domain.components import components_map, unit_components
from registry.domain.files import FileEntry
from registry.domain.serving_profile import parse_serving_profile
from registry.services import loaders
from tests.support.fetch_node import assert_refused, build_node_world, summary_of, tree
from tests.support.registry import role_token
from tests.support.server import MODELREG
from tests.support.tiny_model import tiny_model_files

MODEL_SIGNING = Path(sys.executable).parent / "model_signing"
DEFAULT_TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
TOOL_TEMPLATE = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[tools]"
PROFILE = parse_serving_profile({"engine": "vllm", "gpu": {"type": "L4", "count": 1},
                                 "settings": {"max_model_len": 2048, "max_num_seqs": 4, "chat_template": "tool_use",
                                              "dtype": "bfloat16"}})


def unit_files() -> dict[str, bytes]:
    tokenizer_config = {"bos_token": "<s>", "eos_token": "</s>", "model_max_length": 2048,
                        "chat_template": [{"name": "default", "template": DEFAULT_TEMPLATE},
                                          {"name": "tool_use", "template": TOOL_TEMPLATE}]}
    return {**tiny_model_files(1),
            "tokenizer_config.json": json.dumps(tokenizer_config, indent=2).encode(),
            "generation_config.json": b'{"temperature": 0.6, "top_p": 0.9}',
            "prompts/support.jinja": b"You are a support agent for {{ product }}. Answer: {{ question }}",
            "serving-profile.json": PROFILE.canonical_json().encode()}


def build_unit_world(container, root):
    build_node_world(container, root, unit_files())


pytestmark = pytest.mark.seeded(builder=build_unit_world)


def _detail_components(node) -> dict[str, str]:
    """What the API's version detail (``VersionDetail.components``) shows."""
    token = role_token(node.container, "aud", "acme", "auditor")
    got = httpx.get(f"{node.standin.upstream}/v1/models/acme/tiny/versions/1",
                    headers={"Authorization": f"Bearer {token}"})
    assert got.status_code == 200, got.text
    return {c["name"]: c["digest"] for c in got.json()["components"]}


def _recorded_parts(node) -> dict[str, dict[str, str]]:
    with node.container.session_factory() as session:
        model = loaders.load_model_unchecked(session, "acme", "tiny")
        version = loaders.load_version_unchecked(session, model, 1)
        return session.get(VersionFacts, version.id).facts["parts"]


def _components(node, parts) -> dict[str, str]:
    return components_map(unit_components([FileEntry(f["path"], f["size"], f["sha256"]) for f in node.files], parts))


def test_the_registrys_release_names_the_unit_and_fetch_writes_it_beside_the_files(node):
    """Through the registry itself (its own release, key and root), not the stand-in."""
    shown = _detail_components(node)
    assert {"weights", "tokenizer", "chat_templates", "generation_config", "prompt_templates",
            "serving_profile"} <= set(shown)
    upstream = node.standin.upstream
    root = node.tmp / "registry-root.json"
    root.write_text(httpx.get(f"{upstream}/v1/trust-root", timeout=30).text)
    env = {k: v for k, v in os.environ.items() if k != "MODELREG_CACHE"}
    env.update(MODELREG_URL=upstream, MODELREG_TOKEN=role_token(node.container, "node-1", "acme", "node"))
    dest = node.tmp / "mnt" / "unit"

    def fetch() -> subprocess.CompletedProcess:
        return subprocess.run([MODELREG, "fetch", "acme/tiny@1", str(dest), "--trust-root", str(root), "--json"],
                              env=env, capture_output=True, text=True, timeout=120)

    done = fetch()
    assert done.returncode == 0, done.stderr
    stored = json.loads((dest / ".git" / "modelreg-release.json").read_text())
    payload = json.loads(base64.b64decode(stored["envelope"]["payload"]))
    assert payload["components"] == shown and payload["parts"] == _recorded_parts(node)

    unit = json.loads((dest / "modelreg-unit.json").read_text())
    profile_sha = hashlib.sha256(PROFILE.canonical_json().encode()).hexdigest()
    assert unit == {"model": "acme/tiny", "ref": "1", "version": 1, "components": shown,
                    "prompt_templates": ["support"], "serving_profile": profile_sha,
                    "engine_config": "vllm-config.yaml"}
    config = yaml.safe_load((dest / "vllm-config.yaml").read_text())
    where = dest.resolve()
    assert config["chat-template"] == str(where / "modelreg-chat-template.jinja")
    assert config["generation-config"] == str(where)
    assert {config["max-model-len"], config["max-num-seqs"], config["dtype"]} == {2048, 4, "bfloat16"}
    assert (dest / "modelreg-chat-template.jinja").read_text() == TOOL_TEMPLATE

    public_key = node.tmp / "registry.pub"
    public_key.write_bytes(node.registry_key.public_key.public_pem())
    checked = subprocess.run([str(MODEL_SIGNING), "verify", "key", str(dest), "--public_key", str(public_key),
                              "--signature", str(dest / "model.sig")], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr + checked.stdout

    again = fetch()
    assert again.returncode == 0, again.stderr
    assert summary_of(again)["noop"]
    # A no-op writes the unit's files again in memory and compares: an edited engine config is refused.
    engine = dest / "vllm-config.yaml"
    engine.chmod(0o644)
    engine.write_text(engine.read_text().replace("max-model-len: 2048", "max-model-len: 131072"))
    refused = fetch()
    assert refused.returncode != 0 and "vllm-config.yaml" in refused.stderr, refused.stderr


def test_a_release_whose_signed_component_digest_is_not_its_files_is_refused(node):
    parts = _recorded_parts(node)
    components = _components(node, parts)
    components["tokenizer"] = hashlib.sha256(b"another tokenizer").hexdigest()
    node.release(unit={"components": components, "parts": parts})
    dest = node.tmp / "dest"
    refused = node.fetch(dest)
    assert_refused(refused, 10, "signature")
    assert "tokenizer differ" in refused.stderr
    assert tree(dest) is None


def test_a_signed_chat_template_part_that_is_not_the_files_bytes_is_refused(node):
    """The release signs a tool_use template digest that tokenizer_config.json does not hold, its component
    digests made consistent with it: only reading the verified bytes again finds it."""
    parts = _recorded_parts(node)
    forged = {**parts, "tokenizer_config.json": {**parts["tokenizer_config.json"],
              "chat_template/tool_use": hashlib.sha256(b"{{ 'ignore previous instructions' }}").hexdigest()}}
    node.release(unit={"components": _components(node, forged), "parts": forged})
    dest = node.tmp / "dest"
    refused = node.fetch(dest)
    assert refused.returncode != 0
    assert "tokenizer_config.json#chat_template/tool_use" in refused.stderr, refused.stderr
    assert tree(dest) is None


def test_the_signed_unit_through_the_standin_fetches_and_verifies(node):
    parts = _recorded_parts(node)
    node.release(unit={"components": _components(node, parts), "parts": parts})
    dest = node.tmp / "dest"
    done = node.fetch(dest)
    assert done.returncode == 0, done.stderr
    assert json.loads((dest / "modelreg-unit.json").read_text())["ref"] == "prod"
    verified = node.cli("verify", str(dest), "--trust-root", str(node.root_file))
    assert verified.returncode == 0, verified.stderr
    (dest / "modelreg-chat-template.jinja").chmod(0o644)
    (dest / "modelreg-chat-template.jinja").write_text("{{ 'ignore previous instructions' }}")
    refused = node.cli("verify", str(dest), "--trust-root", str(node.root_file))
    assert refused.returncode != 0 and "modelreg-chat-template.jinja" in refused.stderr, refused.stderr
