"""An eval run on a release unit, without a server: cases that name the unit's prompt templates (parsed,
rendered, refused with the reason), and the unit's serving files an ``openai`` serve command asks for."""

from __future__ import annotations

from pathlib import Path

import pytest

from registry.domain.serving_profile import parse_serving_profile
from registry.evals.cases import EvalSetError, parse_case, prompt_templates_read
from registry.evals.prompts import PromptCaseError, UnitPrompts
from registry.evals.runners import RunnerError
from registry.evals.runners.openai import unit_serving_files

BASE = {"id": "c", "category": "support", "language": "en", "expect": {"contains": "x"}}
SUPPORT = "You help {{ customer }} with {{ topic }}."


def case(**fields):
    return parse_case({**BASE, **fields})


@pytest.fixture
def unit(tmp_path) -> Path:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "support.jinja").write_text(SUPPORT)
    (tmp_path / "prompts" / "internals.jinja").write_text("{{ ''.__class__.__mro__ }}")
    return tmp_path


def test_a_case_names_a_prompt_template_as_its_user_or_system_message(unit):
    prompts = UnitPrompts(unit)
    variables = {"customer": "Ann", "topic": "billing"}
    alone = case(prompt={"template": "support", "variables": variables})
    assert alone.messages == () and alone.prompt_chars == len("Annbilling")
    assert prompts.render_case(alone).messages == ({"role": "user", "content": "You help Ann with billing."},)
    after = case(prompt={"template": "support", "variables": variables},
                 messages=[{"role": "system", "content": "Be kind."}, {"role": "assistant", "content": "Hi."}])
    assert [m["role"] for m in prompts.render_case(after).messages] == ["system", "assistant", "user"]
    system = case(prompt={"template": "support", "variables": variables, "role": "system"},
                  messages=[{"role": "user", "content": "Hello?"}])
    rendered = prompts.render_case(system)
    assert rendered.messages[0] == {"role": "system", "content": "You help Ann with billing."}
    assert rendered.prompt is None and rendered.prompt_chars == len("You help Ann with billing.Hello?")
    assert prompt_templates_read([alone, system, case(messages=[{"role": "user", "content": "q"}])]) == ["support"]
    assert alone.as_dict()["prompt"] == {"template": "support", "variables": variables, "role": "user"}
    assert parse_case(alone.as_dict()) == alone and parse_case(system.as_dict()) == system


@pytest.mark.parametrize("fields, message", [
    ({"prompt": {"template": "../etc/passwd"}}, "prompt: prompt template name '../etc/passwd'"),
    ({"prompt": {"template": "support", "vars": {}}}, "prompt is {template, variables, role}"),
    ({"prompt": {"template": "support", "variables": {"topic": 1}}}, "prompt.variables is an object"),
    ({"prompt": {"template": "support", "variables": {"_x": "a"}}}, "prompt.variables is an object"),
    ({"prompt": {"template": "support", "role": "assistant"}}, "prompt.role is user or system"),
    ({"prompt": {"template": "support", "role": "system"}}, "messages is a list of 1 to"),
    ({"prompt": {"template": "support", "role": "system"},
      "messages": [{"role": "system", "content": "a"}, {"role": "user", "content": "b"}]}, "has no other"),
    ({"prompt": {"template": "support", "role": "system"}, "messages": [{"role": "assistant", "content": "a"}]},
     "the last message is the user's"),
    ({}, "messages is a list of 1 to"),
])
def test_a_malformed_prompt_reference_is_refused_with_the_reason(fields, message):
    with pytest.raises(EvalSetError, match=message.replace("(", r"\(").replace("{", r"\{")):
        case(**fields)


@pytest.mark.parametrize("prompt, reason", [
    ({"template": "faq"}, "the unit has no prompt template 'faq' (prompts/faq.jinja)"),
    ({"template": "support", "variables": {"customer": "Ann"}}, "prompt template 'support': missing values for "
                                                                "['topic']"),
    ({"template": "support", "variables": {"customer": "Ann", "topic": "b", "tone": "dry"}},
     "prompt template 'support': values given for undeclared variables ['tone']"),
    ({"template": "internals"}, "prompt template 'internals': the prompt template reaches for Python internals"),
])
def test_a_prompt_template_that_cannot_be_rendered_fails_the_case_with_the_reason(unit, prompt, reason):
    with pytest.raises(PromptCaseError) as raised:
        UnitPrompts(unit).render_case(case(prompt=prompt))
    assert str(raised.value).startswith(reason)


PROFILE = {"engine": "vllm", "gpu": {"type": "L4", "count": 1},
           "settings": {"max_model_len": 512, "max_num_seqs": 4, "chat_template": "default"}}


def _unit_with(tmp_path: Path, profile: dict | None) -> tuple[Path, Path]:
    model, work = tmp_path / "model", tmp_path / "work"
    model.mkdir(parents=True)
    work.mkdir()
    (model / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    (model / "generation_config.json").write_text("{}")
    if profile is not None:
        (model / "serving-profile.json").write_text(parse_serving_profile(profile).canonical_json())
    return model, work


def test_the_serve_command_gets_the_engine_config_and_the_chat_template_fetch_would_write(tmp_path):
    model, work = _unit_with(tmp_path, PROFILE)
    assert unit_serving_files(model, work, {"model_dir", "port"}) == {}
    paths = unit_serving_files(model, work, {"serving_config", "chat_template"})
    assert paths == {"serving_config": str(work / "unit" / "vllm-config.yaml"),
                     "chat_template": str(work / "unit" / "modelreg-chat-template.jinja")}
    config = Path(paths["serving_config"]).read_text().splitlines()
    assert f"chat-template: \"{paths['chat_template']}\"" in config
    assert f"generation-config: \"{model}\"" in config and "max-model-len: 512" in config
    assert Path(paths["chat_template"]).read_text() == "{{ messages[0]['content'] }}"


def test_a_unit_without_the_part_the_serve_command_names_fails_the_run_with_the_reason(tmp_path):
    model, work = _unit_with(tmp_path / "none", None)
    with pytest.raises(RunnerError, match=r"names \{serving_config\}, but the unit has no serving profile"):
        unit_serving_files(model, work, {"serving_config"})
    no_template = {**PROFILE, "settings": {"max_model_len": 512, "max_num_seqs": 4}}
    model, work = _unit_with(tmp_path / "plain", no_template)
    assert set(unit_serving_files(model, work, {"serving_config"})) == {"serving_config", "chat_template"}
    with pytest.raises(RunnerError, match=r"names \{chat_template\}, but the unit's serving profile names no chat"):
        unit_serving_files(model, work, {"chat_template"})
    model, work = _unit_with(tmp_path / "other", {**PROFILE, "settings": {**PROFILE["settings"],
                                                                          "chat_template": "tool_use"}})
    with pytest.raises(RunnerError, match="names chat template 'tool_use', which the unit does not hold"):
        unit_serving_files(model, work, {"serving_config"})
