"""A changed prompt template asks for the ``openai`` suites that render it, on SQLite and PostgreSQL, through the
real ``run_eval`` jobs (world: ``tests/support/eval_unit.py``): the policy's ``input.unit`` names the suites' prompt
templates and the ones changed, approval waits for the suite on the new unit even where ``prompt_templates`` is not
a gated component, and the suite sends the new template's text.
"""

from __future__ import annotations

import json

import pytest

from registry.services import approvals, derive
from registry.services.stages.approval import approval_input_for
from tests.support.eval_unit import SUPPORT_V2, build_world, chat_result, derive_from_1, find_version, requests_seen
from tests.support.registry import drain
from tests.support.release_unit import NAME, TENANT
from workers.handlers import build_handlers
from workers.loop import Worker


@pytest.fixture
def world(container, tmp_path):
    return build_world(container, tmp_path)


def test_a_changed_prompt_template_asks_for_the_suites_that_render_it_on_the_new_unit(container, world):
    # Only the suites that render a changed prompt template are asked for: take prompt_templates out of the
    # components that ask for every suite.
    data = json.loads((world["policy_dir"] / "data.json").read_text())
    data["modelreg"]["config"]["unit"]["eval_components"].remove("prompt_templates")
    (world["policy_dir"] / "data.json").write_text(json.dumps(data))
    container.__dict__.pop("policy", None)
    number = derive_from_1(container, derive.DeriveRequest(prompts={"support": SUPPORT_V2}))
    worker = Worker(container, build_handlers(), worker_id="unit-test-worker")
    while True:
        with container.session_factory() as session:
            if find_version(session, number).state == "evaluating":
                break
        assert worker.run_once(), "no job left before evaluating"

    def judged() -> tuple[dict, list[dict]]:
        with container.session_factory() as session:
            doc = approval_input_for(session, find_version(session, number), container.policy)
            _, decision = approvals.evaluate(session, world["admin"], TENANT, NAME, number, engine=container.policy)
        return doc["unit"], [u for u in decision.unmet if u["code"] == "unit.evals-required"]

    unit, required = judged()
    assert unit["suite_prompts"] == {"chat": ["faq", "support"]} and unit["prompts_changed"] == ["support"]
    assert unit["changed"] == ["prompt_templates"]
    assert [(u["suite"], u["prompts"]) for u in required] == [("chat", ["support"])]
    assert "prompt template support changed since version 1 (derived): eval suite chat" in required[0]["message"]
    drain(container)
    chat, said, components = chat_result(container, world["admin"], number)
    assert chat.status == "completed" and chat.components == components
    first = chat_result(container, world["admin"], 1)[0]
    assert chat.components["prompt_templates"] != first.components["prompt_templates"]
    assert [{"role": "user", "content": "Echo: Be brief. You help Ann with billing."}] in [
        r["messages"] for r in requests_seen(said)]
    assert judged()[1] == []
