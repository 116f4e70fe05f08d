"""An ``openai`` suite serves an adapter on its base, as vLLM does (``--enable-lora --lora-modules NAME=DIR``), on
SQLite and PostgreSQL, through the real ``run_eval`` jobs: acme/llm@1 (the tiny Llama, in prod) is the base and
acme/llm-support@1 a LoRA adapter PEFT made for it. The suite's serve command names ``{base_dir}``, ``{adapter_dir}``
and ``{adapter_name}``; the project's OpenAI-compatible stand-in (``tests/support/openai_server.py``) applies the
adapter with PEFT and answers requests naming it. The eval set expects the greedy answer of base + adapter (worked out
here with the same stand-in's model from the submitted files): it passes, and the base's own answer fails. A serve
command that starts the adapter's files without its base fails the suite with the reason."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy import select

from registry.db.models import EvalResult
from registry.policy import default_policy_dir
from registry.services import evals, versions
from tests.support.adapter_submissions import ADAPTER, api, base_row, submit_adapter
from tests.support.openai_server import Backend
from tests.support.registry import drain
from tests.support.release_unit import TENANT, build_in_prod
from tests.support.tiny_adapter import tiny_adapter_files, write_files
from tests.support.tiny_llm import tiny_llm_files

pytestmark = pytest.mark.seeded(builder=build_in_prod)

SERVER = str(Path(__file__).resolve().parents[1] / "support" / "openai_server.py")
LORA_SERVE = ["{python}", SERVER, "--model-dir", "{base_dir}", "--port", "{port}", "--request-log", "-",
              "--enable-lora", "--lora-modules", "{adapter_name}={adapter_dir}"]
# The adapter's files served as if they were a model: no base, which the runner refuses before starting anything.
ALONE_SERVE = ["{python}", SERVER, "--model-dir", "{model_dir}", "--port", "{port}"]
PROMPT = [{"role": "user", "content": "Where does the river Seine flow?"}]
MAX_TOKENS = 8


def answers(tmp_path) -> dict[str, str]:
    """The greedy answers to PROMPT of the tiny Llama with the adapter (by its name) and without (``tiny-llm``), as
    the stand-in gives them, from the files submitted."""
    base = write_files(tmp_path / "base", tiny_llm_files())
    adapter = write_files(tmp_path / "adapter", tiny_adapter_files("lora"))
    backend = Backend(str(base), "tiny-llm", lora_modules={ADAPTER: str(adapter)})
    prompt = backend.prompt_ids(PROMPT)
    return {served: "".join(backend.generate(prompt, MAX_TOKENS, {}, served)).strip()
            for served in (ADAPTER, "tiny-llm")}


@pytest.fixture
def chat_suites(container, people, tmp_path):
    """The shipped policy with two suites for the adapter's model: ``chat`` (the stand-in serving base + adapter)
    and ``alone`` (a command that does not start the base); and their eval set, expecting each model's answer."""
    expected = answers(tmp_path)
    assert expected[ADAPTER] and expected[ADAPTER] != expected["tiny-llm"], expected
    cases = [{"id": served, "category": "adapter", "language": "en", "messages": PROMPT, "expect": {"exact": text}}
             for served, text in expected.items()]
    with container.session_factory() as session:
        evals.add_evalset(session, people["admin"], "adapter-chat", "".join(json.dumps(c) + "\n" for c in cases)
                          .encode(), "", blob_store=container.blob_store, clock=container.clock)
    ours = tmp_path / "policies"
    shutil.copytree(default_policy_dir(), ours)
    data = json.loads((ours / "data.json").read_text())
    for name, serve in (("chat", LORA_SERVE), ("alone", ALONE_SERVE)):
        data["modelreg"]["suites"][name] = {
            "runner": "openai", "evalsets": ["adapter-chat"], "applies_to": {"models": [f"{TENANT}/{ADAPTER}"]},
            "settings": {"serve": serve, "max_tokens": MAX_TOKENS, "startup_timeout_s": 120}, "timeout_s": 300}
    (ours / "data.json").write_text(json.dumps(data))
    container.settings.policy_dir = ours
    container.settings.eval_read_only_paths = [Path(SERVER).parent]
    container.__dict__.pop("policy", None)
    return expected


def test_an_openai_suite_serves_the_adapter_on_its_base_as_vllm_does(container, people, in_prod, chat_suites):
    sam = people["tokens"]["sam"]
    weights, _ = base_row(container)
    with api(container) as client:
        assert submit_adapter(client, sam, tiny_adapter_files("lora"), "acme/llm@1").status_code == 202
        drain(container)
    with container.session_factory() as session:
        version = versions.find_version_unchecked(session, TENANT, ADAPTER, 1)
        rows = {r.suite: r for r in session.scalars(select(EvalResult).where(EvalResult.version_id == version.id))}
        log = evals.eval_log(session, people["admin"], TENANT, ADAPTER, 1, "chat",
                             blob_store=container.blob_store).decode()
        session.expunge_all()
    chat = rows["chat"]
    assert chat.status == "completed", (chat.reason, chat.error)
    outcomes = {c["id"]: c["passed"] for c in chat.cases}
    # The answer is base + adapter's, not the base's alone.
    assert outcomes == {ADAPTER: True, "tiny-llm": False}, chat.cases
    assert chat.ran_on["base_weights_digest"] == weights and chat.ran_on["base_version"] == 1
    said = [line.split("openai_server: ", 1)[1] for line in log.splitlines() if "[serve] openai_server: " in line]
    argv = json.loads(next(line for line in said if line.startswith("argv "))[5:])
    base_dir = argv[argv.index("--model-dir") + 1]
    lora = argv[argv.index("--lora-modules") + 1]
    assert "--enable-lora" in argv and lora.startswith(f"{ADAPTER}=")
    adapter_dir = lora.removeprefix(f"{ADAPTER}=")
    # The base and the adapter, each copied out of the store into the run's directory.
    assert (Path(base_dir).name, Path(adapter_dir).name) == ("base", "model")
    assert Path(base_dir).parent == Path(adapter_dir).parent
    assert f"lora {ADAPTER} {adapter_dir}" in said
    requests = [json.loads(line.removeprefix("request ")) for line in said if line.startswith("request ")]
    assert [r["model"] for r in requests] == [ADAPTER, ADAPTER]
    alone = rows["alone"]
    assert (alone.status, alone.reason) == ("failed", "runner_error")
    assert "the version is an adapter of acme/llm@1: the serve command must start the base ({base_dir}) with the " \
           "adapter ({adapter_dir}, named {adapter_name})" in alone.error
