"""``modelreg diff`` and ``modelreg version show`` against a real ``modelreg serve``: the release unit's
components and the diff between two uploaded versions that differ only in their tokenizer."""

from __future__ import annotations

import json

import pytest

from registry.client.api import RegistryApi
from tests.support.server import start_server
from tests.support.tiny_model import tiny_model_files
from tests.support.uploads import submit_upload, wait_for_state

TENANT, MODEL = "acme", "tiny"


def _upload(api: RegistryApi, files: dict[str, bytes], label: str) -> int:
    number = submit_upload(api, TENANT, MODEL, files, label)
    wait_for_state(api, TENANT, MODEL, number)
    return number


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("diff") / "data")
    api = RegistryApi(s.url, s.admin_token)
    api.create_tenant(TENANT)
    files = tiny_model_files(3)
    config = json.loads(files["tokenizer_config.json"])
    config["eos_token"] = "<|end|>"
    s.numbers = (_upload(api, files, "one"),
                 _upload(api, {**files, "tokenizer_config.json": json.dumps(config).encode()}, "two"))
    yield s
    s.stop()


def test_diff_names_the_tokenizer_change_member_by_member(server):
    old, new = server.numbers
    shown = server.cli("diff", f"{TENANT}/{MODEL}", str(old), str(new), check=True).stdout
    assert f"{TENANT}/{MODEL}: version {old} -> {new}" in shown
    assert "  changed: tokenizer\n" in shown
    assert "    ~ tokenizer_config.json#without_chat_template\n" in shown
    doc = json.loads(server.cli("diff", f"{TENANT}/{MODEL}", str(old), str(new), "--json", check=True).stdout)
    assert doc["diff"]["changed"] == ["tokenizer"]
    assert doc["components"]["from"]["weights"] == doc["components"]["to"]["weights"]
    assert doc["components"]["from"]["chat_templates"] == doc["components"]["to"]["chat_templates"]


def test_version_show_lists_the_components_and_their_digests(server):
    _, new = server.numbers
    doc = json.loads(server.cli("version", "show", f"{TENANT}/{MODEL}", str(new), "--json", check=True).stdout)
    assert [c["name"] for c in doc["components"]] == ["weights", "tokenizer", "chat_templates",
                                                      "generation_config", "config"]
    text = server.cli("version", "show", f"{TENANT}/{MODEL}", str(new), check=True).stdout
    for c in doc["components"]:
        assert f"    {c['name']}: {c['digest']} ({c['members']} member(s))" in text


def test_a_diff_of_a_version_that_does_not_exist_is_one_readable_line(server):
    result = server.cli("diff", f"{TENANT}/{MODEL}", "1", "99")
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1 and "99" in result.stderr
