"""An ``openai`` suite serves the release unit as it will be served, on SQLite and PostgreSQL, through the real
``run_eval`` jobs and the project's OpenAI-compatible stand-in (world: ``tests/support/eval_unit.py``):

- the serve command gets the engine config written from the unit's serving profile (``{serving_config}``, what
  ``modelreg fetch`` writes as ``vllm-config.yaml``) and the chat template the profile names (``{chat_template}``),
  and the stand-in renders every prompt with that template: the eval log holds what it was started with and each
  request it received;
- a case naming one of the unit's prompt templates sends the rendered text; a case naming a template the unit
  lacks fails with the reason, unsent; the eval record names the unit's component digests;
- a unit without a serving profile fails a suite whose command asks for one, with the reason.
"""

from __future__ import annotations

import json

import pytest

from registry.services import approvals, derive, evals
from tests.support.eval_unit import MARKED, PROFILE, build_world, chat_result, derive_from_1, requests_seen
from tests.support.registry import drain
from tests.support.release_unit import NAME, TENANT


@pytest.fixture
def world(container, tmp_path):
    return build_world(container, tmp_path)


def test_the_server_gets_the_units_engine_config_and_chat_template_and_cases_its_prompt_templates(container, world):
    """Version 1 is served with its own engine config and chat template; a unit derived from it without a
    serving profile fails the suite (its command asks for the profile's files) with the reason, and the
    policy wants the suite on that unit."""
    chat, said, components = chat_result(container, world["admin"], 1)
    assert chat.status == "completed", (chat.reason, chat.error)
    argv = json.loads(next(line for line in said if line.startswith("argv "))[5:])
    config_path, template_path = argv[argv.index("--config") + 1], argv[argv.index("--chat-template") + 1]
    assert config_path.endswith("/unit/vllm-config.yaml")
    assert template_path.endswith("/unit/modelreg-chat-template.jinja")
    config = [line.removeprefix("config| ") for line in said if line.startswith("config| ")]
    # What modelreg fetch writes for this profile, the template named where the runner wrote it.
    assert config[0] == f"# vllm engine config written by modelreg from serving profile sha256:{PROFILE.digest}"
    assert f"chat-template: {json.dumps(template_path)}" in config
    assert "max-model-len: 512" in config and "max-num-seqs: 4" in config
    assert [line.removeprefix("chat-template| ") for line in said if line.startswith("chat-template| ")] == \
        MARKED.splitlines()
    # The prompt template rendered with the case's variables is the message sent; the unit's chat template
    # rendered the prompt the stand-in saw (its echo passed); the config the stand-in read is the one above.
    sent = [r["messages"] for r in requests_seen(said)]
    assert [{"role": "user", "content": "Echo: You help Ann with billing."}] in sent
    assert len(sent) == 2
    outcomes = {c["id"]: c for c in chat.cases}
    assert outcomes["rendered"]["passed"] is True and outcomes["config"]["passed"] is True
    assert outcomes["missing"]["passed"] is False
    assert outcomes["missing"]["detail"] == "not sent: the unit has no prompt template 'faq' (prompts/faq.jinja)"
    assert chat.metrics["requests.failed"] == 1 and chat.metrics["support.passed"] == 2
    # The record names the unit it ran on, registry-held parts included.
    assert chat.components == components
    with container.session_factory() as session:
        shown = evals.version_eval(session, world["admin"], TENANT, NAME, 1, "chat")
    assert shown["components"] == components
    assert {"weights", "chat_templates", "prompt_templates", "serving_profile"} <= set(components)
    number = derive_from_1(container, derive.DeriveRequest(remove_serving_profile=True))
    drain(container)
    chat, _, _ = chat_result(container, world["admin"], number)
    assert (chat.status, chat.reason) == ("failed", "runner_error")
    assert "names {chat_template}, {serving_config}, but the unit has no serving profile (serving-profile.json)" \
        in chat.error
    with container.session_factory() as session:
        _, decision = approvals.evaluate(session, world["admin"], TENANT, NAME, number, engine=container.policy)
    assert [u["suite"] for u in decision.unmet if u["code"] == "unit.evals-required"] == ["chat"]
