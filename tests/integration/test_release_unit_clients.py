"""The release unit as serving clients get it, on SQLite and PostgreSQL: transformers renders the released chat
template byte for byte as the registry does (on a `modelreg fetch` directory and through `/hf` with
``HF_ENDPOINT``), and one alias move, then one rollback, move every component together.

Two versions of the tiny transformers Llama, both approved: version 2 changes only the chat template (one that
uses the special tokens). ``prod`` starts on version 1.
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

from api.app import create_app
from registry.domain.aliases import make_target
from registry.domain.components import components_map, unit_components
from registry.domain.files import FileEntry
from registry.domain.parts import read_parts
from registry.domain.serving_profile import parse_serving_profile
from registry.services import aliases
from registry.templating import STANDARD_CONVERSATIONS, ChatTemplateRenderError, render_chat_template
from tests.support.live_app import serve_in_thread
from tests.support.registry import make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version
from tests.support.server import MODELREG
from tests.support.tiny_llm import tiny_llm_files

TENANT, NAME = "acme", "llm"
REPO = f"{TENANT}/{NAME}"
SPECIAL_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] | trim }}"
                    "{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture
def live(container, tmp_path):
    admin = make_admin(container, TENANT)
    # Every component but the weights and config differs between the two units, registry-held parts included.
    one = {**tiny_llm_files(), "prompts/support.jinja": b"Help {{ customer }}.\n",
           "serving-profile.json": _profile(128)}
    two = {**one, "chat_template.jinja": SPECIAL_TEMPLATE.encode(), "serving-profile.json": _profile(256),
           "prompts/support.jinja": b"Help {{ customer }}, briefly.\n",
           "generation_config.json": _edited(one["generation_config.json"], temperature=0.25),
           "tokenizer_config.json": _edited(one["tokenizer_config.json"], model_max_length=256)}
    numbers = [awaiting_version(container, admin, tmp_path / f"v{i}", TENANT, NAME, files=files)
               for i, files in ((1, one), (2, two))]
    for number in numbers:
        approve_standin(container, TENANT, NAME, number)
    move(container, admin, numbers[0])
    token = role_token(container, "node-1", TENANT, "node")
    auditor = role_token(container, "aud", TENANT, "auditor")
    with serve_in_thread(create_app(container)) as url:
        root = tmp_path / "root.json"
        root.write_text(httpx.get(f"{url}/v1/trust-root", timeout=30).text)
        env = {**os.environ, "MODELREG_URL": url, "MODELREG_TOKEN": token, "MODELREG_TRUST_ROOT": str(root),
               "MODELREG_CACHE": str(tmp_path / "cache")}
        yield {"url": url, "env": env, "token": token, "admin": admin, "numbers": numbers, "files": (one, two),
               "tmp": tmp_path, "container": container, "auditor": auditor}


def _profile(max_model_len: int) -> bytes:
    return parse_serving_profile({"engine": "vllm", "gpu": {"type": "L4", "count": 1}, "settings": {
        "max_model_len": max_model_len, "max_num_seqs": 4}}).canonical_json().encode()


def _edited(document: bytes, **changes) -> bytes:
    return json.dumps({**json.loads(document), **changes}).encode()


def move(container, admin, number: int) -> None:
    with container.session_factory() as session:
        aliases.promote(session, admin, TENANT, NAME, "prod", make_target(number), policy=container.policy,
                        clock=container.clock)


def fetch(live, label: str) -> Path:
    dest = live["tmp"] / f"dest-{label}"
    done = subprocess.run([MODELREG, "fetch", f"{REPO}@prod", str(dest), "--json"], env=live["env"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return dest


# Renders every standard conversation with transformers, from a directory and from the registry's /hf.
RENDER = """
import json, sys
from transformers import AutoTokenizer
conversations, sources = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {}
for label, (source, revision) in sources.items():
    tok = AutoTokenizer.from_pretrained(source, **({"revision": revision} if revision else {}))
    out[label] = {}
    for c in conversations:
        try:
            out[label][c["name"]] = tok.apply_chat_template(c["messages"], tools=c["tools"], tokenize=False,
                                                            add_generation_prompt=c["add_generation_prompt"])
        except Exception as exc:  # noqa: BLE001 (the registry must fail on the same conversations)
            out[label][c["name"]] = None
print(json.dumps(out))
"""


def transformers_renderings(live, sources: dict[str, tuple[str, str | None]]) -> dict[str, dict[str, str | None]]:
    conversations = [{"name": c.name, "messages": c.message_list(),
                      "tools": json.loads(c.tools_json) if c.tools_json else None,
                      "add_generation_prompt": c.add_generation_prompt} for c in STANDARD_CONVERSATIONS]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_ENDPOINT=f"{live['url']}/hf", HF_TOKEN=live["token"], HF_HOME=str(live["tmp"] / "hf-home"),
               HF_HUB_DISABLE_TELEMETRY="1", TRANSFORMERS_NO_ADVISORY_WARNINGS="1")
    done = subprocess.run([sys.executable, "-c", RENDER, json.dumps(conversations), json.dumps(sources)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def registry_renderings(template: str, tokens: dict[str, str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for c in STANDARD_CONVERSATIONS:
        try:
            out[c.name] = render_chat_template(template, c.message_list(),
                                               add_generation_prompt=c.add_generation_prompt,
                                               tools=json.loads(c.tools_json) if c.tools_json else None, **tokens)
        except ChatTemplateRenderError:
            out[c.name] = None
    return out


def test_transformers_renders_the_released_template_as_the_registry_does(live):
    live_move = live["numbers"][1]
    move(live["container"], live["admin"], live_move)
    dest = fetch(live, "two")
    released = (dest / "chat_template.jinja").read_text()
    assert released == SPECIAL_TEMPLATE
    config = json.loads((dest / "tokenizer_config.json").read_text())
    tokens = {k: config[k] for k in ("bos_token", "eos_token") if isinstance(config.get(k), str)}
    assert tokens == {"bos_token": "<s>", "eos_token": "</s>"}
    ours = registry_renderings(released, tokens)
    assert sum(v is not None for v in ours.values()) >= len(ours) // 2
    theirs = transformers_renderings(live, {"fetched": (str(dest), None), "hf": (REPO, "prod")})
    assert theirs["fetched"] == ours
    assert theirs["hf"] == ours


def _components_of(root: Path) -> dict[str, str]:
    """The unit's components worked out from the bytes a client holds (the parts read from them too)."""
    files = [FileEntry(p.relative_to(root).as_posix(), p.stat().st_size,
                       hashlib.sha256(p.read_bytes()).hexdigest())
             for p in sorted(root.rglob("*"))
             if p.is_file() and p.name != "model.sig" and ".cache" not in p.relative_to(root).parts]
    config = json.loads((root / "tokenizer_config.json").read_text())
    found = components_map(unit_components(files, read_parts(config, None, [])))
    # A client writes files of its own beside the release (fetch's state, the hub cache's): ``other`` holds them.
    return {k: v for k, v in found.items() if k != "other"}


def _hf_snapshot(live, label: str) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(REPO, revision="prod", endpoint=f"{live['url']}/hf", token=live["token"],
                                  cache_dir=live["tmp"] / f"hf-{label}"))


def _released_components(live, number: int) -> dict[str, str]:
    response = httpx.get(f"{live['url']}/v1/models/{TENANT}/{NAME}/versions/{number}",
                         headers={"Authorization": f"Bearer {live['auditor']}"})
    assert response.status_code == 200, response.text
    return {c["name"]: c["digest"] for c in response.json()["components"] if c["name"] != "other"}


def test_one_alias_move_and_one_rollback_move_every_component(live):
    one, two = (_released_components(live, n) for n in live["numbers"])
    assert {k for k in one if one[k] != two[k]} == {"tokenizer", "chat_templates", "generation_config",
                                                    "prompt_templates", "serving_profile"}
    seen = []
    for label, action in (("before", None), ("moved", "move"), ("rolled-back", "rollback")):
        if action == "move":
            move(live["container"], live["admin"], live["numbers"][1])
        elif action == "rollback":
            with live["container"].session_factory() as session:
                aliases.rollback(session, live["admin"], TENANT, NAME, "prod", policy=live["container"].policy,
                                 clock=live["container"].clock)
        seen.append((_components_of(fetch(live, label)), _components_of(_hf_snapshot(live, label))))
    assert seen == [(one, one), (two, two), (one, one)]
