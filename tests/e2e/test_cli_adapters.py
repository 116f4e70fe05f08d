"""``modelreg submit DIR --adapter-of BASE`` against a real ``modelreg serve``: a PEFT adapter bound to the tiny
Llama's version, shown with its base and weights digest; an adapter made for another base fails with every reason
printed; a base that cannot be bound, or a malformed ``--adapter-of``, is one readable line and a non-zero exit."""

from __future__ import annotations

import json

import pytest

from registry.client.api import RegistryApi
from tests.support.server import start_server
from tests.support.tiny_adapter import tiny_adapter_files, write_files
from tests.support.tiny_llm import write_tiny_llm
from tests.support.uploads import wait_for_state

TENANT, BASE, ADAPTER = "acme", "llm", "llm-support"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("adapters") / "data")
    RegistryApi(s.url, s.admin_token).create_tenant(TENANT)
    root = tmp_path_factory.mktemp("dirs")
    s.root = root
    write_tiny_llm(root / "llm")
    for variant in ("lora", "other_shapes"):
        write_files(root / variant, tiny_adapter_files(variant))
    s.base = json.loads(s.cli("submit", str(root / "llm"), "--model", f"{TENANT}/{BASE}", "--json",
                              check=True).stdout)["version"]
    wait_for_state(RegistryApi(s.url, s.admin_token), TENANT, BASE, s.base)
    yield s
    s.stop()


def test_an_adapter_is_submitted_bound_to_its_base_and_shown_with_it(server):
    base = f"{TENANT}/{BASE}@{server.base}"
    submitted = json.loads(server.cli("submit", str(server.root / "lora"), "--model", f"{TENANT}/{ADAPTER}",
                                      "--adapter-of", base, "--json", check=True).stdout)
    bound = submitted["adapter_of"]
    assert (bound["model"], bound["version"], bound["requested"]) == (f"{TENANT}/{BASE}", server.base, base)
    wait_for_state(RegistryApi(server.url, server.admin_token), TENANT, ADAPTER, submitted["version"])
    shown = json.loads(server.cli("version", "show", f"{TENANT}/{ADAPTER}", str(submitted["version"]), "--json",
                                  check=True).stdout)
    assert shown["adapter_of"]["weights_digest"] == bound["weights_digest"]
    assert shown["adapter_of"]["check"]["peft_type"] == "LORA" and shown["adapter_of"]["check"]["refusals"] == []
    base_components = json.loads(server.cli("version", "show", f"{TENANT}/{BASE}", str(server.base), "--json",
                                            check=True).stdout)["components"]
    assert {c["name"]: c["digest"] for c in base_components}["weights"] == bound["weights_digest"]
    text = server.cli("version", "show", f"{TENANT}/{ADAPTER}", str(submitted["version"]), check=True).stdout
    assert f"  adapter of: {base} (weights sha256:{bound['weights_digest']})\n" in text


def test_an_adapter_for_another_base_fails_with_every_reason_printed(server):
    result = server.cli("submit", str(server.root / "other_shapes"), "--model", f"{TENANT}/other-support",
                        "--adapter-of", f"{TENANT}/{BASE}@{server.base}", "--wait")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "failed: adapter_incompatible: the adapter does not fit its base acme/llm@1" in result.stdout
    refused = [line for line in result.stdout.splitlines() if line.startswith("    refused: adapter.shape: ")]
    assert len(refused) == 8, result.stdout


@pytest.mark.parametrize("ref,says", [
    ("acme/nope@1", "adapter-base-not-found"),
    ("acme/llm@7", "adapter-base-not-found"),
    ("acme/llm", "TENANT/NAME@VERSION"),
    ("sha256:abc", "64 lower-case hex"),
    ("Acme/llm@1", "invalid tenant name"),
])
def test_a_base_that_cannot_be_bound_is_one_readable_line(server, ref, says):
    # --json: no upload progress lines (the base is judged by the registry, after the directory's blobs are sent).
    result = server.cli("submit", str(server.root / "lora"), "--model", f"{TENANT}/refused", "--adapter-of", ref,
                        "--json")
    assert result.returncode != 0
    [line] = result.stderr.strip().splitlines()
    assert says in line, line
    assert server.cli("version", "show", f"{TENANT}/refused", "1").returncode != 0, "nothing was created"
