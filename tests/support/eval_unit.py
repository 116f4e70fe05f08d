"""The world of the tests of an ``openai`` suite run on a release unit (``tests/integration/test_eval_unit_*.py``):
acme/llm version 1, the tiny Llama with a serving profile that names the unit's own chat template ``marked`` and
the prompt template ``support``, evaluated by one suite, ``chat``, whose serve command starts the project's
OpenAI-compatible stand-in (``tests/support/openai_server.py``) with the unit's engine config and chat template.
The stand-in prints what it was started with and each request it received; :func:`chat_result` reads that back
from the eval's log.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from sqlalchemy import select

from registry.auth import load_principal
from registry.db.models import EvalResult, Principal, Version
from registry.domain.components import components_map
from registry.domain.serving_profile import parse_serving_profile
from registry.policy import default_policy_dir
from registry.services import derive, evals, units
from tests.support.openai_server import ECHO, SHOW_CONFIG
from tests.support.registry import make_admin, role_token
from tests.support.release_unit import NAME, TENANT, submit
from tests.support.tiny_llm import tiny_llm_files

SERVER = str(Path(__file__).resolve().parent / "openai_server.py")
SERVE = ["{python}", SERVER, "--model-dir", "{model_dir}", "--port", "{port}", "--request-log", "-",
         "--config", "{serving_config}", "--chat-template", "{chat_template}"]
# The unit's own chat template, named by its serving profile: it marks every prompt it renders.
MARKED = "{% for m in messages %}<<unit {{ m['role'] }}>>{{ m['content'] }}\n{% endfor %}<<unit assistant>>"
PROFILE = parse_serving_profile({"engine": "vllm", "gpu": {"type": "L4", "count": 1},
                                 "settings": {"max_model_len": 512, "max_num_seqs": 4, "chat_template": "marked"}})
SUPPORT = ECHO + " You help {{ customer }} with {{ topic }}."
SUPPORT_V2 = ECHO + " Be brief. You help {{ customer }} with {{ topic }}."
CASES = [
    {"id": "rendered", "category": "support", "language": "en", "expect": {"contains": "<<unit user>>Echo:"},
     "prompt": {"template": "support", "variables": {"customer": "Ann", "topic": "billing"}}},
    {"id": "config", "category": "support", "language": "en", "expect": {"contains": "max-model-len: 512"},
     "messages": [{"role": "user", "content": SHOW_CONFIG}]},
    {"id": "missing", "category": "support", "language": "en", "expect": {"contains": "x"},
     "prompt": {"template": "faq", "variables": {}}},
]


def build_world(container, tmp_path: Path) -> dict:
    """The shipped policy with one suite, ``chat`` (the stand-in served by its command, the unit's files
    handed to it), its eval set, and acme/llm version 1: the tiny Llama with a serving profile naming its own
    chat template ``marked`` and the prompt template ``support``, evaluated (about 12 s); and the submitter ``sam``.

    Returns:
        ``{"admin": the administrator, "policy_dir": the policy copy in use (a test may edit it)}``.
    """
    ours = tmp_path / "policies"
    shutil.copytree(default_policy_dir(), ours)
    data = json.loads((ours / "data.json").read_text())
    data["modelreg"]["suites"] = {"chat": {"runner": "openai", "evalsets": ["unit-cases"], "timeout_s": 300,
                                           "settings": {"serve": SERVE, "max_tokens": 8, "startup_timeout_s": 120}}}
    (ours / "data.json").write_text(json.dumps(data))
    container.settings.policy_dir = ours
    container.settings.eval_read_only_paths = [Path(SERVER).parent]
    container.__dict__.pop("policy", None)
    admin = make_admin(container)
    with container.session_factory() as session:
        evals.add_evalset(session, admin, "unit-cases", "".join(json.dumps(c) + "\n" for c in CASES).encode(), "",
                          blob_store=container.blob_store, clock=container.clock)
    files = {**tiny_llm_files(), "additional_chat_templates/marked.jinja": MARKED.encode(),
             "serving-profile.json": PROFILE.canonical_json().encode(), "prompts/support.jinja": SUPPORT.encode()}
    assert submit(container, admin, tmp_path / "v1", files) == 1
    role_token(container, "sam", TENANT, "submitter")
    return {"admin": admin, "policy_dir": ours}



def find_version(session, number: int) -> Version:
    return session.scalar(select(Version).where(Version.number == number))


def chat_result(container, admin, number: int) -> tuple[EvalResult, list[str], dict]:
    """The version's ``chat`` result, what the stand-in printed in its log, and the unit's component digests."""
    with container.session_factory() as session:
        found = find_version(session, number)
        row = session.scalar(select(EvalResult).where(EvalResult.version_id == found.id,
                                                      EvalResult.suite == "chat"))
        components = components_map(units.components_of(session, found))
        log = evals.eval_log(session, admin, TENANT, NAME, number, "chat",
                             blob_store=container.blob_store).decode()
        session.expunge_all()
    said = [line.split("openai_server: ", 1)[1] for line in log.splitlines() if "[serve] openai_server: " in line]
    return row, said, components


def requests_seen(said: list[str]) -> list[dict]:
    """The chat requests the stand-in printed (``--request-log -``), in order."""
    return [json.loads(line.removeprefix("request ")) for line in said if line.startswith("request ")]


def derive_from_1(container, request: derive.DeriveRequest) -> int:
    """Derive a unit from version 1 as the submitter ``sam``; its number."""
    with container.session_factory() as session:
        sam = load_principal(session.scalar(select(Principal).where(Principal.name == "sam")))
        version, _ = derive.derive(session, sam, TENANT, NAME, 1, request, blob_store=container.blob_store,
                                   limits=container.limits(), ports=container.ports)
        return version.number
