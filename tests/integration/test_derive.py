"""Deriving a unit (``POST .../versions/{n}/derive``) through the real pipeline, on SQLite and PostgreSQL:
registry-held prompt templates and a serving profile added to a version in prod, every other file shared by
digest (no mirror, no scan of it again), the component diff against the parent deciding what is judged
again, and a serving profile that does not fit its GPU refused with the arithmetic, whether it comes
through a derive (422 at once) or inside a submitted directory (the version fails at seal).
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.app import create_app
from registry.db.models import EvalResult, Job, ScanResult, Version
from registry.domain.serving_profile import parse_serving_profile
from registry.services import approvals
from tests.support.registry import drain
from tests.support.release_unit import NAME, TENANT, api_diff, approve, build_in_prod, submit

pytestmark = pytest.mark.seeded(builder=build_in_prod)

SUPPORT = "You help {{ customer }} with {{ topic }}.\n"
FITS = {"engine": "vllm", "gpu": {"type": "L4", "count": 1}, "settings": {"max_model_len": 512, "max_num_seqs": 4}}
# The tiny Llama's KV cache is 128 bytes a token: 2^20 tokens x 1024 sequences is 128 GiB, over an L4.
TOO_BIG = {"engine": "vllm", "gpu": {"type": "L4", "count": 1},
           "settings": {"max_model_len": 1_048_576, "max_num_seqs": 1024}}


def _derive(container, token: str, number: int, body: dict):
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        return client.post(f"/v1/models/{TENANT}/{NAME}/versions/{number}/derive", json=body,
                           headers={"Authorization": f"Bearer {token}"})


def _version(container, number: int) -> Version:
    with container.session_factory() as session:
        version = session.scalar(select(Version).where(Version.number == number))
        session.expunge_all()
        return version


def _files(container, number: int) -> dict[str, str]:
    with container.session_factory() as session:
        version = session.scalar(select(Version).where(Version.number == number))
        return {f.path: f.sha256 for f in version.files}


def test_a_derived_unit_adds_a_prompt_and_a_profile_and_shares_every_other_file_by_digest(
        container, people, in_prod):
    token = people["tokens"]["sam"]
    with container.session_factory() as session:
        scans_before = {(s.blob_digest, s.scanner) for s in session.scalars(select(ScanResult))}
    r = _derive(container, token, 1, {"prompts": {"support": SUPPORT}, "serving_profile": FITS})
    assert r.status_code == 202, r.text
    assert r.json()["version"] == 2 and r.json()["derived_from"] == 1
    # The same parts derived from the same version again: the one version made the first time.
    again = _derive(container, token, 1, {"prompts": {"support": SUPPORT}, "serving_profile": FITS})
    assert again.status_code == 200 and again.json()["version"] == 2
    drain(container)

    one, two = _files(container, 1), _files(container, 2)
    assert {p: d for p, d in two.items() if p in one} == one
    assert set(two) - set(one) == {"prompts/support.jinja", "serving-profile.json"}
    with container.session_factory() as session:
        v2 = session.scalar(select(Version).where(Version.number == 2))
        mirrored = session.scalar(select(func.count()).select_from(Job).where(
            Job.kind == "mirror_file", Job.payload["version_id"].as_integer() == v2.id))
        scans_after = {(s.blob_digest, s.scanner) for s in session.scalars(select(ScanResult))}
        evals = session.scalars(select(EvalResult).where(EvalResult.version_id == v2.id)).all()
    assert mirrored == 0, "a derived unit's shared files are not mirrored again"
    # Only the two new parts were scanned: the shared blobs' verdicts carry over by digest.
    assert {digest for digest, _ in scans_after - scans_before} == {two["prompts/support.jinja"],
                                                                    two["serving-profile.json"]}
    # The unit changed: the suites ran on it.
    assert [(e.suite, e.status) for e in evals] == [("sanity", "completed")]

    doc = api_diff(container, people, 1, 2)
    assert doc["diff"]["changed"] == ["prompt_templates", "serving_profile"]
    assert doc["components"]["from"]["weights"] == doc["components"]["to"]["weights"]
    assert doc["template_review_files"] == ["prompts/support.jinja"]
    shown = doc["version"]
    assert shown["derived_from"] == 1
    assert shown["unit_parts"]["prompts"] == [{"name": "support", "variables": ["customer", "topic"]}]
    profile = shown["unit_parts"]["serving_profile"]
    assert profile["digest"] == parse_serving_profile(FITS).digest
    assert profile["capacity"]["fits"] is True and profile["capacity"]["arithmetic"]

    # A new prompt template is a template change: the security approval must name it.
    assert approve(container, people, 2) == "awaiting_approval"
    with container.session_factory() as session:
        unmet = approvals.status(session, people["mia"], TENANT, NAME, 2).unmet
    assert [(u["code"], u["path"]) for u in unmet] == [("unit.template-review", "prompts/support.jinja")]
    assert "changed since version 1 (derived)" in unmet[0]["message"]


def test_a_prompt_template_change_runs_the_suites_on_the_new_unit(container, people, in_prod):
    token = people["tokens"]["sam"]
    assert _derive(container, token, 1, {"prompts": {"support": SUPPORT}}).status_code == 202
    drain(container)
    changed = _derive(container, token, 2, {"prompts": {"support": SUPPORT + "Be brief.\n"}})
    assert changed.status_code == 202, changed.text
    drain(container)
    doc = api_diff(container, people, 2, 3)
    assert doc["diff"]["changed"] == ["prompt_templates"]
    [change] = doc["diff"]["components"]
    assert change["members_changed"] == ["prompts/support.jinja"]
    with container.session_factory() as session:
        v3 = session.scalar(select(Version).where(Version.number == 3))
        evals = session.scalars(select(EvalResult).where(EvalResult.version_id == v3.id)).all()
    assert [(e.suite, e.status) for e in evals] == [("sanity", "completed")]
    # The record names the unit it ran on: the new prompt's digest, not the old one's.
    assert evals[0].components == doc["components"]["to"] != doc["components"]["from"]
    # Removing the template is a change too, and names nothing to review (no template added or altered).
    removed = _derive(container, token, 3, {"remove_prompts": ["support"]})
    assert removed.status_code == 202, removed.text
    drain(container)
    assert "prompts/support.jinja" not in _files(container, 4)


def test_a_serving_profile_that_does_not_fit_its_gpu_is_refused_with_the_arithmetic(
        container, people, in_prod, tmp_path):
    token = people["tokens"]["sam"]
    r = _derive(container, token, 1, {"serving_profile": TOO_BIG})
    assert r.status_code == 403, r.text  # a gate refuses it, as policy violations are
    problem = r.json()
    assert problem["type"].endswith("serving-profile-does-not-fit")
    assert any("budget" in line for line in problem["arithmetic"])
    assert any("KV" in line or "kv" in line for line in problem["arithmetic"])
    assert problem["per_gpu_needed"] > problem["per_gpu_budget"]
    with container.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Version)) == 1, "nothing was made"

    # The same profile inside a submitted directory: the version fails at seal, with the arithmetic.
    profile = parse_serving_profile(TOO_BIG).canonical_json().encode()
    number = submit(container, people["admin"], tmp_path / "v2", {**in_prod, "serving-profile.json": profile})
    version = _version(container, number)
    assert version.state == "failed" and version.failure_reason == "serving_profile_does_not_fit"
    assert any("budget" in line for line in version.failure_detail["arithmetic"])


@pytest.mark.parametrize("body, status, kind", [
    ({}, 422, "invalid-input"),
    ({"prompts": {"bad name": "x"}}, 422, "invalid-input"),
    ({"prompts": {"evil": "{{ ''.__class__.__mro__ }}"}}, 422, "prompt-template"),
    ({"prompts": {"broken": "{% if %}"}}, 422, "prompt-template"),
    ({"prompts": {"nul": "Hi\x00 {{ name }}"}}, 422, "invalid-input"),
    ({"remove_prompts": ["absent"]}, 422, "invalid-input"),
    ({"serving_profile": {"engine": "vllm", "gpu": {"type": "Z80", "count": 1},
                          "settings": {"max_model_len": 8, "max_num_seqs": 1}}}, 422, "invalid-serving-profile"),
    ({"serving_profile": FITS, "remove_serving_profile": True}, 422, "invalid-input"),
])
def test_bad_derives_are_refused_and_make_nothing(container, people, in_prod, body, status, kind):
    r = _derive(container, people["tokens"]["sam"], 1, body)
    assert r.status_code == status, r.text
    assert r.json()["type"].endswith(kind), r.json()
    with container.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Version)) == 1
