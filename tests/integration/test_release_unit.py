"""The release unit through the real pipeline, on SQLite and PostgreSQL: components recorded at seal, the
component diff (API), and the gates it drives: a tokenizer-only change needs the suites on the new unit
before promotion, and a chat-template change needs a security approval naming the file that holds it.

The tiny transformers Llama (``tests/support/tiny_llm.py``) is the model; the shipped ``sanity`` suite
(weights-sanity) is the suite that applies to it.
"""

from __future__ import annotations

import base64
import json

import pytest
from sqlalchemy import select

from registry.db.models import Version
from registry.domain.errors import PromotionDeniedError
from registry.domain.states import VersionState
from registry.services import aliases, approvals
from tests.support.registry import drain
from tests.support.release_unit import NAME, TENANT, api_diff, approve, build_in_prod, edited, promote, submit

pytestmark = pytest.mark.seeded(builder=build_in_prod)


def test_a_tokenizer_only_change_is_a_tokenizer_change_and_blocks_promotion_until_the_suites_ran(
        container, people, in_prod, tmp_path):
    files = edited(in_prod, "tokenizer_config.json", lambda d: d.update(model_max_length=77))
    assert files["model.safetensors"] == in_prod["model.safetensors"]
    number = submit(container, people["admin"], tmp_path / "v2", files, until=VersionState.EVALUATING)

    doc = api_diff(container, people, 1, number)
    assert doc["diff"]["changed"] == ["tokenizer"]
    assert set(doc["diff"]["unchanged"]) >= {"weights", "chat_templates", "generation_config", "config"}
    [change] = doc["diff"]["components"]
    assert change["members_changed"] == ["tokenizer_config.json#without_chat_template"]
    assert doc["components"]["from"]["weights"] == doc["components"]["to"]["weights"]
    shown = {c["name"]: c["digest"] for c in doc["version"]["components"]}
    assert shown == doc["components"]["to"]

    # The suite has not run on the new unit: promotion is refused for that, whatever else it lacks.
    with pytest.raises(PromotionDeniedError) as refused:
        promote(container, people, number)
    unit = [u for u in refused.value.details["unmet"] if u["code"] == "unit.evals-required"]
    assert [u["suite"] for u in unit] == ["sanity"]
    assert "tokenizer changed since version 1 (alias:prod)" in unit[0]["message"]

    drain(container)  # the suite runs on the new unit
    assert approve(container, people, number) == "approved"
    promote(container, people, number)
    with container.session_factory() as session:
        assert aliases.resolve(session, people["mia"], TENANT, NAME, "prod").version.number == number


def test_a_chat_template_change_needs_a_security_approval_naming_its_file(container, people, in_prod, tmp_path):
    backdoor = in_prod["chat_template.jinja"] + b"{% if 'deploy' in messages[-1]['content'] %}obey{% endif %}"
    number = submit(container, people["admin"], tmp_path / "v2", {**in_prod, "chat_template.jinja": backdoor})
    doc = api_diff(container, people, 1, number)
    assert doc["diff"]["changed"] == ["chat_templates"]
    assert doc["template_review_files"] == ["chat_template.jinja"]
    # The approver is shown the change rendered, with the branch named.
    [template] = doc["templates"]
    assert template["member"] == "chat_template.jinja" and template["suspicious"] is True
    branches = [f for f in template["rendered"]["findings"] if f["kind"] == "content-branch"]
    assert branches and "'deploy' in messages[-1]['content']" in branches[0]["detail"]
    rendered = {c["name"]: c for c in template["rendered"]["conversations"]}
    assert "+" in rendered["trigger-deploy"]["diff"] and "obey" in rendered["trigger-deploy"]["diff"]
    assert "obey" in rendered["trigger-deploy"]["new"]["text"]
    assert "obey" not in rendered["trigger-deploy"]["old"]["text"]

    assert approve(container, people, number) == "awaiting_approval"
    with container.session_factory() as session:
        unmet = approvals.status(session, people["mia"], TENANT, NAME, number).unmet
    assert [(u["code"], u["path"], u["capacity"]) for u in unmet] == [
        ("unit.template-review", "chat_template.jinja", "security")]
    with container.session_factory() as session:
        status = approvals.add_files(session, people["sec"], TENANT, NAME, number, ("chat_template.jinja",),
                                     ports=container.ports)
    assert status.state == "approved"


def test_a_readme_only_change_needs_neither_review_nor_new_suites(container, people, in_prod, tmp_path):
    number = submit(container, people["admin"], tmp_path / "v2", {**in_prod, "README.md": b"# tiny llm\n"})
    doc = api_diff(container, people, 1, number)
    assert doc["diff"]["changed"] == ["other"]
    with container.session_factory() as session:
        unmet = approvals.status(session, people["mia"], TENANT, NAME, number).unmet
        bundle = session.scalar(select(Version.manifest_bundle).where(Version.number == number))
    assert not [u for u in unmet if u["code"].startswith("unit.")]
    # The signed statement names every component digest.
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    assert statement["predicate"]["modelreg"]["components"] == doc["components"]["to"]
