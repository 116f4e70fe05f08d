"""The release-unit tests' world: acme/llm (the tiny transformers Llama) with an approver in each capacity,
submitted as a directory, approved by all three and promoted to ``prod``; and the API's diff of two versions.

:func:`build_in_prod` builds it once per worker and database; a module marked
``pytest.mark.seeded(builder=build_in_prod)`` gets a copy per test through the fixtures ``people`` and
``in_prod`` (``tests/integration/conftest.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from registry.auth import load_principal
from registry.db.models import Principal
from registry.domain.aliases import make_target
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


def make_people(container) -> dict:
    tokens = {name: role_token(container, name, TENANT, "approver", capacity)
              for name, capacity in (("sec", "security"), ("mia", "ml"), ("lex", "legal"))}
    people = {"admin": make_admin(container), "tokens": tokens,
              **{name: _principal(container, name) for name in tokens}}
    tokens["sam"] = role_token(container, "sam", TENANT, "submitter")  # derives new units
    return people


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


def put_in_prod(container, people, tmp_path) -> dict[str, bytes]:
    """Version 1 of acme/llm (the tiny Llama) evaluated, approved and in ``prod``; returns its files."""
    files = dict(tiny_llm_files())
    assert submit(container, people["admin"], tmp_path / "v1", files) == 1
    assert approve(container, people, 1) == "approved"
    promote(container, people, 1)
    return files


def build_in_prod(container, root: Path) -> dict:
    """The seeded world: ``{"people": make_people(...), "files": put_in_prod(...)}`` (sources under ``root``)."""
    people = make_people(container)
    return {"people": people, "files": put_in_prod(container, people, root)}


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
