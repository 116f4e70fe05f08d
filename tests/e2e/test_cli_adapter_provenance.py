"""An auditor's questions about adapters (issue 34) with ``modelreg`` against a real ``modelreg serve``: acme/llm@1
(the tiny Llama) and acme/llm-support@1 (a LoRA adapter PEFT made for it), each approved and in ``prod``.
``modelreg provenance adapters`` names the adapters bound to the base's weights, ``modelreg provenance adapter-base``
which base prod's adapter was bound to (now, and --at a time before it was promoted), ``modelreg evals`` the base
each result ran on; asking the base for its base is one readable line and a non-zero exit."""

from __future__ import annotations

import datetime as dt
import hashlib
import json

import pytest

from registry.client.api import RegistryApi
from tests.support.server import start_server
from tests.support.tiny_adapter import tiny_adapter_files
from tests.support.tiny_llm import tiny_llm_files
from tests.support.uploads import wait_for_state

TENANT, BASE, ADAPTER = "acme", "llm", "llm-support"
PEOPLE = {"sam": ("submitter", ""), "sec": ("approver", "security"), "mia": ("approver", "ml"), "aud": ("auditor", "")}


def _submit(api: RegistryApi, name: str, files: dict[str, bytes], **extra) -> int:
    entries = []
    for path, data in sorted(files.items()):
        digest = hashlib.sha256(data).hexdigest()
        api.put_blob(TENANT, digest, data, len(data))
        entries.append({"path": path, "size": len(data), "sha256": digest})
    body = {"source": f"upload:{name}", "files": entries, "license": "mit", **extra}
    return api.submit(TENANT, name, body)["version"]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("adapter-provenance") / "data")
    try:
        admin = RegistryApi(server.url, server.admin_token)
        admin.create_tenant(TENANT)
        tokens = {}
        for name, (role, capacity) in PEOPLE.items():
            admin.create_principal(name)
            admin.grant_role(name, TENANT, role, capacity)
            tokens[name] = admin.issue_token(name)["token"]
        api = {name: RegistryApi(server.url, token) for name, token in tokens.items()}
        times = {}
        for name, files, extra in ((BASE, tiny_llm_files(), {}),
                                   (ADAPTER, tiny_adapter_files("lora"), {"adapter_of": f"{TENANT}/{BASE}@1"})):
            number = _submit(api["sam"], name, files, **extra)
            wait_for_state(api["sam"], TENANT, name, number)
            for who, capacity in (("sec", "security"), ("mia", "ml")):
                api[who].decide(TENANT, name, number, {"decision": "approve", "capacity": capacity})
            times[name] = dt.datetime.now(dt.timezone.utc).isoformat()
            api["mia"].promote(TENANT, name, "prod", {"version": number})
        yield server, tokens, times
    finally:
        server.stop()


def test_which_adapters_are_bound_to_the_bases_weights(live):
    server, tokens, _ = live
    by_ref = server.cli("provenance", "adapters", f"{TENANT}/{BASE}@prod", "--json", token=tokens["aud"])
    assert by_ref.returncode == 0, by_ref.stderr
    doc = json.loads(by_ref.stdout)
    assert [(a["model"], a["version"], a["base"]) for a in doc["adapters"]] == [
        (f"{TENANT}/{ADAPTER}", 1, {"model": f"{TENANT}/{BASE}", "version": 1})]
    by_digest = server.cli("provenance", "adapters", doc["digest"], "--json", token=tokens["aud"])
    assert json.loads(by_digest.stdout) == doc
    text = server.cli("provenance", "adapters", doc["digest"], token=tokens["aud"]).stdout
    assert text == f"{TENANT}/{ADAPTER}@1 (approved): bound to {TENANT}/{BASE}@1 (asked for {TENANT}/{BASE}@1)\n"
    refused = server.cli("provenance", "adapters", doc["digest"], token=tokens["sam"])
    assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1


def test_which_base_prods_adapter_runs_on_and_the_base_each_eval_ran_on(live):
    server, tokens, times = live
    now = server.cli("provenance", "adapter-base", f"{TENANT}/{ADAPTER}@prod", "--json", token=tokens["aud"])
    assert now.returncode == 0, now.stderr
    doc = json.loads(now.stdout)
    weights = doc["base"]["weights_digest"]
    assert (doc["version"], doc["base"]["model"], doc["base"]["version"], doc["base"]["state"]) == (
        1, f"{TENANT}/{BASE}", 1, "approved")
    assert [(e["suite"], e["ran_on"]["base_weights_digest"]) for e in doc["evals"]] == [("sanity", weights)]
    text = server.cli("provenance", "adapter-base", f"{TENANT}/{ADAPTER}@prod", token=tokens["aud"]).stdout
    assert f"  bound to {TENANT}/{BASE}@1: weights sha256:{weights} (approved)\n" in text
    assert "  sanity: completed on it, weights-sanity " in text
    # Before the adapter's promotion prod pointed at nothing.
    before = server.cli("provenance", "adapter-base", f"{TENANT}/{ADAPTER}@prod", "--at", times[ADAPTER],
                        token=tokens["aud"])
    assert before.stdout == f"{TENANT}/{ADAPTER}@prod at {times[ADAPTER]}: the alias pointed at no version then\n"
    evals = json.loads(server.cli("evals", f"{TENANT}/{ADAPTER}", "1", "--json", token=tokens["aud"]).stdout)
    assert [e["ran_on"]["base_weights_digest"] for e in evals["evals"]] == [weights]
    shown = server.cli("evals", f"{TENANT}/{ADAPTER}", "1", token=tokens["aud"]).stdout
    assert f"    on base {TENANT}/{BASE}@1 (weights sha256:{weights})\n" in shown
    # The base is no adapter: one readable line, a non-zero exit.
    base = server.cli("provenance", "adapter-base", f"{TENANT}/{BASE}@prod", token=tokens["aud"])
    assert base.returncode != 0
    [line] = base.stderr.strip().splitlines()
    assert "acme/llm@1 is no adapter: it is bound to no base" in line
