"""The auditors' release-unit questions through the real pipeline, on SQLite and PostgreSQL: "which units share
these weights" (``/v1/provenance/components/sha256:...``, ``modelreg provenance component``), "when did prod's
chat template last change, who approved it" (``.../aliases/prod/components/chat_templates``, ``modelreg provenance
component-history``), and version detail read from the components recorded at seal, opening no part blob.

acme/llm is the tiny Llama in prod (``tests/support/release_unit.py``); beta/copy is the same files submitted in a
second tenant, so the two share their weights.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from api.app import create_app
from registry.auth import issue_token
from registry.cli import main
from registry.db.models import Principal, VersionComponent
from registry.services import aliases
from tests.support.live_app import serve_in_thread
from tests.support.registry import drain, make_admin, role_token
from tests.support.release_unit import NAME, TENANT, approve, build_in_prod, promote, submit
from tests.support.releases import submit_directory

pytestmark = pytest.mark.seeded(builder=build_in_prod)

SUPPORT = "You help {{ customer }} with {{ topic }}.\n"
FITS = {"engine": "vllm", "gpu": {"type": "L4", "count": 1}, "settings": {"max_model_len": 512, "max_num_seqs": 4}}


@pytest.fixture
def api(container):
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        yield client


def _get(api, token: str, path: str, **params):
    return api.get(path, params=params, headers={"Authorization": f"Bearer {token}"})


def _ok(response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


def _components(api, token: str, tenant: str, name: str, ref: str) -> dict[str, str]:
    doc = _ok(_get(api, token, f"/v1/provenance/{tenant}/{name}/components", ref=ref))
    return {c["name"]: c["digest"] for c in doc["components"]}


def _admin_token(container, people) -> str:
    with container.session_factory() as session:
        token = issue_token(session, session.scalar(select(Principal).where(Principal.name == people["admin"].name)))
        session.commit()
        return token.token


def _cli(url: str, token: str, *args: str, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["provenance", *args, "--url", url, "--token", token])
    out, err = capsys.readouterr()
    return code, out, err


def test_units_sharing_weights_are_found_by_digest_only_in_the_tenants_the_auditor_audits(
        container, people, in_prod, api, tmp_path, capsys):
    make_admin(container, "beta")
    # beta's copy has a README of its own: an "other" component acme's auditor may not learn of.
    submit_directory(container, people["admin"], tmp_path / "beta", "beta", "copy",
                     {**in_prod, "README.md": b"# beta's copy\n"})
    # A derived unit of acme/llm shares the weights too (a new prompt template only).
    derived = api.post(f"/v1/models/{TENANT}/{NAME}/versions/1/derive", json={"prompts": {"support": SUPPORT}},
                       headers={"Authorization": f"Bearer {people['tokens']['sam']}"})
    assert derived.status_code == 202, derived.text
    drain(container)
    tokens = {"aud-acme": role_token(container, "aud-acme", TENANT, "auditor"),
              "aud-beta": role_token(container, "aud-beta", "beta", "auditor")}
    admin = _admin_token(container, people)

    weights = _components(api, tokens["aud-acme"], TENANT, NAME, "prod")["weights"]
    assert _components(api, tokens["aud-beta"], "beta", "copy", "1")["weights"] == weights
    path = f"/v1/provenance/components/sha256:{weights}"
    acme = _ok(_get(api, tokens["aud-acme"], path))
    assert [(v["model"], v["version"], v["component"], v["derived_from"]) for v in acme["versions"]] == [
        ("acme/llm", 1, "weights", None), ("acme/llm", 2, "weights", 1)]
    beta = _ok(_get(api, tokens["aud-beta"], path, component="weights"))
    assert [(v["model"], v["version"]) for v in beta["versions"]] == [("beta/copy", 1)]
    # Paged like the other provenance lists: one version a page, the cursor goes on.
    first = _ok(_get(api, tokens["aud-acme"], path, limit=1))
    second = _ok(_get(api, tokens["aud-acme"], path, limit=1, cursor=first["next_cursor"]))
    assert [v["version"] for v in first["versions"] + second["versions"]] == [1, 2]
    assert second["next_cursor"] is None

    # beta's own README: to acme's auditor the same answer as a digest no unit has.
    beta_only = _components(api, tokens["aud-beta"], "beta", "copy", "1")["other"]
    assert _ok(_get(api, admin, f"/v1/provenance/components/sha256:{beta_only}"))["versions"][0]["model"] == "beta/copy"
    hidden = _get(api, tokens["aud-acme"], f"/v1/provenance/components/sha256:{beta_only}")
    unknown = _get(api, tokens["aud-acme"], f"/v1/provenance/components/sha256:{'0' * 64}")
    assert hidden.status_code == unknown.status_code == 404
    assert hidden.json()["type"] == unknown.json()["type"] and "beta" not in hidden.text
    assert unknown.headers["content-type"] == "application/problem+json"
    assert unknown.json()["type"].endswith("/component-not-found")
    assert _get(api, tokens["aud-acme"], path, component="lora").json()["type"].endswith("/invalid-input")
    refused = _get(api, people["tokens"]["sam"], path)
    assert refused.status_code == 403 and refused.json()["type"].endswith("/permission-denied")

    with serve_in_thread(create_app(container)) as url:
        code, out, _ = _cli(url, tokens["aud-acme"], "component", f"{TENANT}/{NAME}@prod", "weights", "--json",
                            capsys=capsys)
        assert code == 0 and json.loads(out) == {**acme, "component": "weights"}
        code, out, _ = _cli(url, admin, "component", f"sha256:{weights}", capsys=capsys)
        # Every tenant's, in the order they were sealed.
        assert code == 0 and out.splitlines() == [
            "acme/llm@1 (approved): weights", "beta/copy@1 (awaiting_approval): weights",
            "acme/llm@2 (awaiting_approval): weights, derived from 1"]
        code, out, err = _cli(url, tokens["aud-acme"], "component", f"sha256:{'0' * 64}", capsys=capsys)
        assert code == 1 and out == "" and len(err.splitlines()) == 1 and "no version you audit has" in err
        code, _, err = _cli(url, tokens["aud-acme"], "component", f"{TENANT}/{NAME}@prod", "serving_profile",
                            capsys=capsys)
        assert code == 1 and err.splitlines() == [
            "error: acme/llm@1 has no 'serving_profile' component; it has: weights, tokenizer, chat_templates, "
            "generation_config, config"]


def test_a_chat_template_change_promoted_with_a_security_approval_is_in_the_component_history(
        container, people, in_prod, api, tmp_path, capsys):
    backdoor = in_prod["chat_template.jinja"] + b"{% if 'deploy' in messages[-1]['content'] %}obey{% endif %}"
    assert submit(container, people["admin"], tmp_path / "v2", {**in_prod, "chat_template.jinja": backdoor}) == 2
    assert approve(container, people, 2, security_files=("chat_template.jinja",)) == "approved"
    promote(container, people, 2)
    with container.session_factory() as session:
        aliases.rollback(session, people["mia"], TENANT, NAME, "prod", comment="template reverted",
                         policy=container.policy, clock=container.clock)
    auditor = role_token(container, "aud-acme", TENANT, "auditor")
    one, two = (_components(api, auditor, TENANT, NAME, str(n))["chat_templates"] for n in (1, 2))
    assert one != two

    path = f"/v1/provenance/{TENANT}/{NAME}/aliases/prod/components/chat_templates"
    doc = _ok(_get(api, auditor, path))
    assert (doc["version"], doc["digest"], doc["next_cursor"]) == (1, one, None)
    assert [(c["action"], c["by"], c["from_version"], c["to_version"], c["from_digest"], c["to_digest"])
            for c in doc["changes"]] == [
        ("promote", "mia", None, 1, None, one), ("promote", "mia", 1, 2, one, two),
        ("rollback", "mia", 2, 1, two, one)]
    brought = doc["changes"][1]
    assert [(a["principal"], a["capacity"], a["files"]) for a in brought["security_approvals"]] == [
        ("sec", "security", ["chat_template.jinja"])]
    assert {(a["principal"], a["capacity"]) for a in brought["approvals"]} == {
        ("sec", "security"), ("mia", "ml"), ("lex", "legal")}
    assert all(a["at"] for a in brought["approvals"])
    # The weights never changed: only the first promotion brought them.
    weights = _ok(_get(api, auditor, f"/v1/provenance/{TENANT}/{NAME}/aliases/prod/components/weights"))
    assert [(c["from_version"], c["to_version"]) for c in weights["changes"]] == [(None, 1)]
    # A page is a page of the alias's moves; the cursor walks on.
    pages, cursor = [], None
    while True:
        page = _ok(_get(api, auditor, path, limit=1, **({"cursor": cursor} if cursor else {})))
        pages.append([c["move"] for c in page["changes"]])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sum(pages, []) == [c["move"] for c in doc["changes"]] and len(pages) == 3

    assert _get(api, auditor, f"{path[:-len('chat_templates')]}lora").json()["type"].endswith("/invalid-input")
    assert _get(api, auditor, f"/v1/provenance/{TENANT}/{NAME}/aliases/canary/components/weights").json()[
        "type"].endswith("/alias-not-found")
    assert _get(api, people["tokens"]["sec"], path).status_code == 403

    with serve_in_thread(create_app(container)) as url:
        code, out, _ = _cli(url, auditor, "component-history", f"{TENANT}/{NAME}", "prod", "chat_templates", "--json",
                            capsys=capsys)
        assert code == 0 and json.loads(out) == doc
        code, out, _ = _cli(url, auditor, "component-history", f"{TENANT}/{NAME}", "prod", "chat_templates",
                            capsys=capsys)
        assert code == 0 and "promote by mia: 1 -> 2" in out and "approve by sec as security" in out
        code, _, err = _cli(url, auditor, "component-history", f"{TENANT}/{NAME}", "prod", "lora", capsys=capsys)
        assert code == 1 and len(err.splitlines()) == 1 and "is no component" in err


class CountingBlobStore:
    """The container's blob store, counting the blobs opened for reading (by digest)."""

    def __init__(self, store) -> None:
        self.store, self.opened = store, Counter()

    def open_range(self, digest, *args, **kwargs):
        self.opened[digest] += 1
        return self.store.open_range(digest, *args, **kwargs)

    def open_seekable(self, digest):
        self.opened[digest] += 1
        return self.store.open_seekable(digest)

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_version_detail_reads_the_components_recorded_at_seal_and_no_part_blob(container, people, in_prod):
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        r = client.post(f"/v1/models/{TENANT}/{NAME}/versions/1/derive",
                        json={"prompts": {"support": SUPPORT}, "serving_profile": FITS},
                        headers={"Authorization": f"Bearer {people['tokens']['sam']}"})
        assert r.status_code == 202, r.text
    drain(container)
    counting = CountingBlobStore(container.blob_store)
    container.__dict__["blob_store"] = counting  # the server is real; its store counts
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        def detail() -> dict:
            return _ok(client.get(f"/v1/models/{TENANT}/{NAME}/versions/2",
                                  headers={"Authorization": f"Bearer {people['tokens']['mia']}"}))

        shown = detail()
        assert counting.opened == Counter(), "version detail opened a blob"
        assert shown["unit_parts"]["prompts"] == [{"name": "support", "variables": ["customer", "topic"]}]
        capacity = shown["unit_parts"]["serving_profile"]["capacity"]
        assert capacity["fits"] is True and capacity["arithmetic"]
        assert {c["name"]: c["members"] for c in shown["components"]}["prompt_templates"] == 1

        # A unit sealed before the parts' detail was recorded (migration 0033): its parts are read from the store.
        with container.session_factory() as session:
            session.execute(update(VersionComponent).where(
                VersionComponent.name.in_(["prompt_templates", "serving_profile"])).values(detail=None))
            session.commit()
            parts = {r.name for r in session.scalars(select(VersionComponent)) if r.detail is None}
        assert {"prompt_templates", "serving_profile"} <= parts
        assert detail()["unit_parts"] == shown["unit_parts"]
        assert sum(counting.opened.values()) == 2
