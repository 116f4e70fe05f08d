"""``modelreg submit --prompt/--serving-profile`` and ``modelreg derive`` against a real ``modelreg serve``:
registry-held parts ride with a directory or are derived onto a version, ``version show`` prints them and the
capacity arithmetic, and a serving profile that does not fit its GPU is one readable refusal."""

from __future__ import annotations

import json

import pytest

from registry.client.api import RegistryApi
from tests.support.server import start_server
from tests.support.tiny_model import tiny_model_files
from tests.support.uploads import wait_for_state

TENANT, MODEL = "acme", "tiny"
PROFILE = "engine: vllm\ngpu: {type: L4, count: 1}\nsettings:\n  max_model_len: 1024\n  max_num_seqs: 8\n"
TOO_BIG = "engine: vllm\ngpu: {type: L4, count: 1}\nsettings: {max_model_len: 16777216, max_num_seqs: 65536}\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("derive") / "data")
    RegistryApi(s.url, s.admin_token).create_tenant(TENANT)
    root = tmp_path_factory.mktemp("parts")
    model = root / "tiny"
    for path, data in tiny_model_files(5).items():
        (model / path).parent.mkdir(parents=True, exist_ok=True)
        (model / path).write_bytes(data)
    (root / "support.jinja").write_text("Help {{ customer }}.\n")
    (root / "brief.jinja").write_text("Be brief, {{ customer }}.\n")
    (root / "vllm.yaml").write_text(PROFILE)
    (root / "big.yaml").write_text(TOO_BIG)
    s.root = root
    # A plain version to derive from (each test stands alone).
    s.base = json.loads(s.cli("submit", str(model), "--model", f"{TENANT}/{MODEL}", "--json",
                              check=True).stdout)["version"]
    wait_for_state(RegistryApi(s.url, s.admin_token), TENANT, MODEL, s.base)
    yield s
    s.stop()


def test_a_directory_submitted_with_a_prompt_and_a_profile_holds_them_and_shows_the_arithmetic(server):
    root = server.root
    submitted = json.loads(server.cli(
        "submit", str(root / "tiny"), "--model", f"{TENANT}/{MODEL}", "--prompt", f"support={root / 'support.jinja'}",
        "--serving-profile", str(root / "vllm.yaml"), "--json", check=True).stdout)
    number = submitted["version"]
    assert {f["path"] for f in submitted["files"]} >= {"prompts/support.jinja", "serving-profile.json"}
    wait_for_state(RegistryApi(server.url, server.admin_token), TENANT, MODEL, number)
    shown = server.cli("version", "show", f"{TENANT}/{MODEL}", str(number), check=True).stdout
    assert "  prompt template support: variables customer\n" in shown
    assert "  serving profile: vllm on 1 x L4" in shown
    assert "    capacity: fits\n" in shown and "budget 22.35 GiB x 0.9 - 2.00 GiB margin" in shown

    derived = json.loads(server.cli("derive", f"{TENANT}/{MODEL}@{number}", "--prompt",
                                    f"brief={root / 'brief.jinja'}", "--remove-prompt", "support", "--json",
                                    check=True).stdout)
    assert derived["derived_from"] == number
    assert {f["path"] for f in derived["files"] if f["path"].startswith("prompts/")} == {"prompts/brief.jinja"}
    wait_for_state(RegistryApi(server.url, server.admin_token), TENANT, MODEL, derived["version"])
    diff = json.loads(server.cli("diff", f"{TENANT}/{MODEL}", str(number), str(derived["version"]), "--json",
                                 check=True).stdout)
    assert diff["diff"]["changed"] == ["prompt_templates"]
    text = server.cli("version", "show", f"{TENANT}/{MODEL}", str(derived["version"]), check=True).stdout
    assert f"  derived from: version {number}\n" in text


def test_a_profile_that_does_not_fit_is_refused_in_one_line_and_a_bad_option_too(server):
    root = server.root
    refused = server.cli("derive", f"{TENANT}/{MODEL}@{server.base}", "--serving-profile", str(root / "big.yaml"))
    assert refused.returncode == 1
    [line] = refused.stderr.strip().splitlines()
    assert "serving-profile-does-not-fit" in line and "needed per GPU" in line
    for args, says in ((("--prompt", "support"), "NAME=FILE"), (("--prompt", "bad name=x"), "letters"),
                       (("--prompt", f"x={root / 'missing.jinja'}"), "cannot read")):
        bad = server.cli("derive", f"{TENANT}/{MODEL}@{server.base}", *args)
        assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and says in bad.stderr, bad.stderr
    no_version = server.cli("derive", f"{TENANT}/{MODEL}", "--prompt", f"x={root / 'support.jinja'}")
    assert no_version.returncode != 0 and "TENANT/NAME@VERSION" in no_version.stderr
    hub = server.cli("submit", "hf://org/repo", "--model", f"{TENANT}/{MODEL}", "--prompt",
                     f"x={root / 'support.jinja'}")
    assert hub.returncode != 0 and "modelreg derive" in hub.stderr
