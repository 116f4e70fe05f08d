"""The release unit through the real pipeline, on SQLite and PostgreSQL: components recorded at seal, the
component diff (API), and the gates it drives: a tokenizer-only change needs the suites on the new unit
before promotion, and a chat-template change needs a security approval naming the file that holds it.

The tiny transformers Llama (``tests/support/tiny_llm.py``) is the model; the shipped ``sanity`` suite
(weights-sanity) is the suite that applies to it.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from registry.auth import load_principal
from registry.db.models import Principal, Version
from registry.domain.aliases import make_target
from registry.domain.errors import PromotionDeniedError
from registry.domain.states import VersionState
from registry.services import aliases, approvals, loaders
from tests.support.registry import drain, make_admin, role_token
from tests.support.releases import submit_directory
from tests.support.tiny_llm import tiny_llm_files
from workers.handlers import build_handlers
from workers.loop import Worker

TENANT, NAME = "acme", "llm"


def _principal(container, name: str):
    with container.session_factory() as session:
        return load_principal(session.scalar(select(Principal).where(Principal.name == name)))


@pytest.fixture
def people(container):
    tokens = {name: role_token(container, name, TENANT, "approver", capacity)
              for name, capacity in (("sec", "security"), ("mia", "ml"), ("lex", "legal"))}
    return {"admin": make_admin(container), "tokens": tokens,
            **{name: _principal(container, name) for name in tokens}}


def _state(container, number: int) -> str:
    with container.session_factory() as session:
        model = loaders.load_model_unchecked(session, TENANT, NAME)
        return loaders.load_version_unchecked(session, model, number).state


def submit(container, admin, root: Path, files: dict[str, bytes], *, until: VersionState | None = None) -> int:
    """Submit ``files`` as a directory and run jobs: all of them, or until the version reaches ``until``."""
    number = submit_directory(container, admin, root, TENANT, NAME, files, run_jobs=False)[1]
    if until is None:
        drain(container)
    else:
        worker = Worker(container, build_handlers(), worker_id="unit-test-worker")
        while _state(container, number) != until.value:
            assert worker.run_once(), f"no job left before {until.value}: {_state(container, number)}"
    return number


def approve(container, people, number: int, *, security_files: tuple[str, ...] = ()) -> str:
    # The tiny Llama declares no license: legal approves it too.
    for who, capacity, files in (("sec", "security", security_files), ("mia", "ml", ()), ("lex", "legal", ())):
        with container.session_factory() as session:
            status = approvals.decide(session, people[who], TENANT, NAME, number,
                                      approvals.ApprovalRequest("approve", capacity, "", list(files)),
                                      ports=container.ports)
    return status.state


def promote(container, people, number: int) -> None:
    with container.session_factory() as session:
        aliases.promote(session, people["mia"], TENANT, NAME, "prod", make_target(number), policy=container.policy,
                        clock=container.clock)


def edited(files: dict[str, bytes], path: str, change) -> dict[str, bytes]:
    doc = json.loads(files[path])
    change(doc)
    return {**files, path: json.dumps(doc).encode()}


@pytest.fixture
def in_prod(container, people, tmp_path) -> dict[str, bytes]:
    """Version 1 of acme/llm (the tiny Llama) evaluated, approved and in ``prod``; returns its files."""
    files = dict(tiny_llm_files())
    assert submit(container, people["admin"], tmp_path / "v1", files) == 1
    assert approve(container, people, 1) == "approved"
    promote(container, people, 1)
    return files


def api_diff(container, people, old: int, new: int) -> dict:
    token = people["tokens"]["mia"]
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        response = client.get(f"/v1/models/{TENANT}/{NAME}/diff/{old}/{new}",
                              headers={"Authorization": f"Bearer {token}"})
        version = client.get(f"/v1/models/{TENANT}/{NAME}/versions/{new}",
                             headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    assert version.status_code == 200, version.text
    return {**response.json(), "version": version.json()}


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
