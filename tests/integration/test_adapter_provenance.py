"""The provenance of adapters (issue 34) through the API, on SQLite and PostgreSQL: acme/llm@1 (the tiny Llama, in
prod) and acme/llm@2 are bases; acme/llm-support@1 is an adapter bound to version 1 and acme/llm-support@2 one bound
to version 2, ``prod`` of the adapter pointing at 1 and then at 2; globex/globex-support@1, of another tenant, is
bound to acme/llm@1's weights too.

- "which adapters are bound to these weights" (``/v1/provenance/adapters/sha256:{digest}``) names only the adapters
  of the tenants the caller audits;
- "which base did prod's adapter run on" (``/v1/provenance/{tenant}/{name}/adapter-base``) answers for the alias now
  and at a time, with the eval results that ran on that base; the base's state only to whoever may read its tenant;
- the adapter's CycloneDX ML-BOM names its base as a component with the bound weights digest and a dependency on it,
  and validates with ``cyclonedx-python-lib``'s validator.
"""

from __future__ import annotations

import json

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from sqlalchemy import select

from registry.db.models import Principal, RoleBinding, Tenant
from registry.domain.aliases import make_target
from registry.services import aliases, provenance_adapters
from tests.support.adapter_submissions import ADAPTER, PROBLEMS, api, approve_adapter, auth, base_row, submit_adapter
from tests.support.registry import drain, make_admin, person, role_token
from tests.support.release_unit import NAME, TENANT, approve, build_in_prod, submit
from tests.support.tiny_adapter import tiny_adapter_files
from tests.support.tiny_llm import tiny_llm_files

pytestmark = pytest.mark.seeded(builder=build_in_prod)


def promote_adapter(container, people, number: int) -> None:
    with container.session_factory() as session:
        aliases.promote(session, people["mia"], TENANT, ADAPTER, "prod", make_target(number), policy=container.policy,
                        clock=container.clock)


@pytest.fixture
def bound(container, people, in_prod, tmp_path) -> dict:
    """The world of the module's docstring; the times around the adapter's promotions and the auditors' tokens."""
    sam = people["tokens"]["sam"]
    make_admin(container, "globex")
    # rae submits in globex and reads in acme: it may bind globex's adapter to acme's base.
    rae = person(container, "rae", TENANT, ("submitter", ""))
    with container.session_factory() as session:
        session.add(RoleBinding(principal_id=session.scalar(select(Principal.id).where(Principal.name == "rae")),
                                tenant_id=session.scalar(select(Tenant.id).where(Tenant.name == "globex")),
                                role="submitter", capacity=""))
        session.commit()
    assert submit(container, people["admin"], tmp_path / "v2", tiny_llm_files(2)) == 2
    assert approve(container, people, 2) == "approved"
    times = {"before": container.clock.now()}
    with api(container) as client:
        assert submit_adapter(client, sam, tiny_adapter_files("lora"), "acme/llm@1").status_code == 202
        assert submit_adapter(client, rae, tiny_adapter_files("lora"), "acme/llm@1", tenant="globex",
                              name="globex-support").status_code == 202
        assert submit_adapter(client, sam, tiny_adapter_files("lora"), "acme/llm@2").status_code == 202
        drain(container)
    for number in (1, 2):
        assert approve_adapter(container, people, number) == "approved"
    promote_adapter(container, people, 1)
    times["on-1"] = container.clock.now()
    promote_adapter(container, people, 2)
    times["on-2"] = container.clock.now()
    return {"times": times, "weights": {n: base_row(container, n)[0] for n in (1, 2)},
            "aud-acme": role_token(container, "aud-acme", TENANT, "auditor"),
            "aud-globex": role_token(container, "aud-globex", "globex", "auditor")}


def ask(client, token: str, path: str, **params):
    return client.get(f"/v1/provenance/{path}", params=params, headers=auth(token))


def test_which_adapters_are_bound_to_these_weights_names_only_the_callers_tenants(container, people, bound):
    weights = bound["weights"]
    with api(container) as client:
        acme = ask(client, bound["aud-acme"], f"adapters/sha256:{weights[1]}")
        globex = ask(client, bound["aud-globex"], f"adapters/sha256:{weights[1]}")
        second = ask(client, bound["aud-acme"], f"adapters/sha256:{weights[2]}")
        none = ask(client, bound["aud-acme"], f"adapters/sha256:{'e' * 64}")
        submitter = ask(client, people["tokens"]["sam"], f"adapters/sha256:{weights[1]}")
        malformed = ask(client, bound["aud-acme"], "adapters/sha256:ABC")
    assert acme.status_code == 200, acme.text
    rows = acme.json()["adapters"]
    assert [(a["model"], a["version"], a["base"]) for a in rows] == [
        (f"{TENANT}/{ADAPTER}", 1, {"model": f"{TENANT}/{NAME}", "version": 1})]
    assert (rows[0]["state"], rows[0]["requested"], rows[0]["peft_type"]) == ("approved", "acme/llm@1", "LORA")
    # globex's adapter, bound to acme's weights, is named to globex's auditor only, and acme's adapter never.
    assert [(a["model"], a["base"]["model"]) for a in globex.json()["adapters"]] == [
        ("globex/globex-support", f"{TENANT}/{NAME}")]
    assert [(a["model"], a["version"]) for a in second.json()["adapters"]] == [(f"{TENANT}/{ADAPTER}", 2)]
    assert none.json() == {"digest": f"sha256:{'e' * 64}", "adapters": [], "next_cursor": None}
    assert (submitter.status_code, submitter.json()["type"]) == (403, PROBLEMS + "permission-denied")
    assert malformed.status_code == 422
    with container.session_factory() as session:
        everyone = provenance_adapters.adapters_bound_to(session, people["admin"], weights[1], limit=1)
        rest = provenance_adapters.adapters_bound_to(session, people["admin"], weights[1], limit=1,
                                                     cursor=everyone["next_cursor"])
    assert [a["model"] for a in everyone["adapters"] + rest["adapters"]] == [f"{TENANT}/{ADAPTER}",
                                                                             "globex/globex-support"]
    assert rest["next_cursor"] is None


def test_which_base_prods_adapter_was_bound_to_now_and_at_a_time(container, people, bound):
    token, times, weights = bound["aud-acme"], bound["times"], bound["weights"]
    with api(container) as client:
        now = ask(client, token, f"{TENANT}/{ADAPTER}/adapter-base", ref="prod")
        then = {k: ask(client, token, f"{TENANT}/{ADAPTER}/adapter-base", ref="prod", at=times[k].isoformat())
                for k in ("before", "on-1", "on-2")}
        by_number = ask(client, token, f"{TENANT}/{ADAPTER}/adapter-base", ref="1")
        number_at = ask(client, token, f"{TENANT}/{ADAPTER}/adapter-base", ref="1", at=times["on-1"].isoformat())
        naive = ask(client, token, f"{TENANT}/{ADAPTER}/adapter-base", ref="prod", at="2026-01-01T00:00:00")
        base_asked = ask(client, token, f"{TENANT}/{NAME}/adapter-base", ref="prod")
        other_tenant = ask(client, bound["aud-globex"], f"{TENANT}/{ADAPTER}/adapter-base", ref="prod")
        globex = ask(client, bound["aud-globex"], "globex/globex-support/adapter-base", ref="1")
    assert now.status_code == 200, now.text
    doc = now.json()
    assert (doc["version"], doc["ref"]["alias"], doc["at"]) == (2, "prod", None)
    assert doc["base"] == {"model": f"{TENANT}/{NAME}", "version": 2, "weights_digest": weights[2],
                           "manifest_digest": base_row(container, 2)[1], "requested": "acme/llm@2",
                           "state": "approved"}
    assert [(e["suite"], e["status"], e["ran_on"]["base_weights_digest"]) for e in doc["evals"]] == [
        ("sanity", "completed", weights[2])]
    assert doc["elsewhere"] == []
    assert then["before"].json()["version"] is None and then["before"].json()["base"] is None
    assert (then["on-1"].json()["version"], then["on-1"].json()["base"]["version"]) == (1, 1)
    assert then["on-1"].json()["base"]["weights_digest"] == weights[1]
    assert then["on-1"].json()["ref"]["move"] is not None
    assert (then["on-2"].json()["version"], then["on-2"].json()["base"]["version"]) == (2, 2)
    assert by_number.json()["base"]["version"] == 1 and by_number.json()["ref"]["alias"] is None
    assert (number_at.status_code, number_at.json()["type"]) == (422, PROBLEMS + "invalid-input")
    assert naive.status_code == 422
    assert (base_asked.status_code, base_asked.json()["type"]) == (409, PROBLEMS + "not-an-adapter")
    assert base_asked.json()["detail"] == "acme/llm@1 is no adapter: it is bound to no base"
    assert (other_tenant.status_code, other_tenant.json()["type"]) == (403, PROBLEMS + "permission-denied")
    # globex's auditor is told which acme version its adapter is bound to (its signed statement says so), not
    # that version's state in a tenant it may not read.
    assert globex.status_code == 200, globex.text
    assert (globex.json()["base"]["model"], globex.json()["base"]["state"]) == (f"{TENANT}/{NAME}", None)


def test_the_adapters_ml_bom_names_its_base_and_depends_on_it(container, bound):
    with api(container) as client:
        r = client.get(f"/v1/provenance/{TENANT}/{ADAPTER}/versions/1/export", params={"format": "cyclonedx"},
                       headers=auth(bound["aud-acme"]))
        base_bom = client.get(f"/v1/provenance/{TENANT}/{NAME}/versions/1/export", params={"format": "cyclonedx"},
                              headers=auth(bound["aud-acme"]))
    assert r.status_code == 200, r.text
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(r.text) is None
    doc = json.loads(r.text)
    components = {c["bom-ref"]: c for c in doc["components"]}
    base = components["base-model"]
    assert (base["type"], base["group"], base["name"], base["version"]) == (
        "machine-learning-model", TENANT, NAME, "1")
    [weights] = base["components"]
    assert (weights["name"], weights["hashes"]) == ("weights", [{"alg": "SHA-256", "content": bound["weights"][1]}])
    assert {"name": "modelreg:manifest:digest", "value": base_row(container, 1)[1]} in base["properties"]
    assert {"ref": "model", "dependsOn": ["base-model"]} in doc["dependencies"]
    adapter = components["model"]
    assert (adapter["name"], adapter["version"]) == (ADAPTER, "1")
    properties = {p["name"]: p["value"] for p in adapter["properties"]}
    assert properties["modelreg:adapter-of"] == "acme/llm@1"
    assert properties["modelreg:adapter-of:weights-digest"] == bound["weights"][1]
    assert adapter["modelCard"]["bom-ref"] == "model-card"
    # The base's own BOM names no base.
    assert base_bom.status_code == 200
    assert [c["bom-ref"] for c in json.loads(base_bom.text)["components"]] == ["model"]
