"""The release unit's components: the one classification table, part splitting, digests and the diff."""

from __future__ import annotations

import hashlib

import pytest

from registry.domain.components import (
    COMPONENTS,
    Member,
    classify,
    component_digest,
    diff_components,
    template_review_files,
    unit_components,
)
from registry.domain.files import FileEntry
from registry.domain.parts import gguf_parts, read_parts, tokenizer_config_parts


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize(("path", "component"), [
    ("model.safetensors", "weights"),
    ("model-00001-of-00002.safetensors", "weights"),
    ("model.safetensors.index.json", "weights"),
    ("pytorch_model.bin.index.json", "weights"),
    ("original/consolidated.00.pth", "weights"),
    ("tiny-Q4_K_M.gguf", "weights"),
    ("tokenizer.json", "tokenizer"),
    ("tokenizer_config.json", "tokenizer"),
    ("special_tokens_map.json", "tokenizer"),
    ("tokenizer.model", "tokenizer"),
    ("vocab.txt", "tokenizer"),
    ("merges.txt", "tokenizer"),
    ("cl100k.tiktoken", "tokenizer"),
    ("chat_template.jinja", "chat_templates"),
    ("chat_template.json", "chat_templates"),
    ("additional_chat_templates/tool_use.jinja", "chat_templates"),
    ("generation_config.json", "generation_config"),
    ("config.json", "config"),
    ("preprocessor_config.json", "config"),
    ("README.md", "other"),
    ("LICENSE", "other"),
    (".gitattributes", "other"),
    ("notes/config.json.md", "other"),
])
def test_every_file_falls_in_one_component_by_the_one_table(path, component):
    assert classify(path) == component
    assert component in COMPONENTS


def test_a_component_digest_is_the_sha256_of_its_sorted_member_lines():
    members = [Member("b.json", "2" * 64), Member("a.json", "1" * 64, "part")]
    expected = hashlib.sha256(f"{'1' * 64}  a.json#part\n{'2' * 64}  b.json\n".encode()).hexdigest()
    assert component_digest(members) == expected == component_digest(list(reversed(members)))


def _unit(tok_config: dict | None, *, weights="w" * 64, extra=()):
    files = [FileEntry("model.safetensors", 10, weights), FileEntry("tokenizer.json", 5, "t" * 64),
             FileEntry("tokenizer_config.json", 3, sha(repr(tok_config))), *extra]
    parts = read_parts(tok_config, None, []) if tok_config is not None else {}
    return {c.name: c for c in unit_components(files, parts)}


BASE = {"eos_token": "</s>", "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}


def test_a_chat_template_change_inside_tokenizer_config_is_a_chat_template_change_only():
    old = _unit(BASE)
    new = _unit({**BASE, "chat_template": BASE["chat_template"] + "{{ eos_token }}"})
    diff = diff_components(old.values(), new.values())
    assert diff.changed == ("chat_templates",)
    assert set(diff.unchanged) == {"weights", "tokenizer"}
    assert [m.name for m in diff.changes[0].changed] == ["tokenizer_config.json#chat_template"]
    assert template_review_files(diff) == ("tokenizer_config.json",)


def test_a_tokenizer_only_change_with_byte_identical_weights_is_a_tokenizer_change():
    old = _unit(BASE)
    new = _unit({**BASE, "eos_token": "<|end|>"})
    diff = diff_components(old.values(), new.values())
    assert diff.changed == ("tokenizer",)
    assert old["weights"].digest == new["weights"].digest
    assert template_review_files(diff) == ()


def test_a_weights_change_is_a_weights_change():
    diff = diff_components(_unit(BASE).values(), _unit(BASE, weights="v" * 64).values())
    assert diff.changed == ("weights",)
    assert diff.changes[0].status == "changed"


def test_a_tokenizer_config_without_recorded_parts_counts_whole_in_both_components():
    """Facts recorded before parts were (or an unreadable file): a change to it is never missed."""
    files = [FileEntry("tokenizer_config.json", 3, "a" * 64)]
    edited = [FileEntry("tokenizer_config.json", 3, "b" * 64)]
    diff = diff_components(unit_components(files, {}), unit_components(edited, {}))
    assert diff.changed == ("tokenizer", "chat_templates")
    assert template_review_files(diff) == ("tokenizer_config.json",)


def test_a_new_chat_template_file_is_an_added_component_to_review():
    plain = {"eos_token": "</s>"}
    diff = diff_components(_unit(plain).values(),
                           _unit(plain, extra=(FileEntry("chat_template.jinja", 4, "c" * 64),)).values())
    assert [(c.name, c.status) for c in diff.changes] == [("chat_templates", "added")]
    assert template_review_files(diff) == ("chat_template.jinja",)


def test_named_templates_are_parts_of_their_own():
    parts = tokenizer_config_parts({"chat_template": [{"name": "default", "template": "a"},
                                                      {"name": "tool_use", "template": "b"}]})
    assert set(parts) == {"without_chat_template", "chat_template/default", "chat_template/tool_use"}
    assert parts["chat_template/tool_use"] == sha("b")


def test_a_gguf_template_is_a_chat_templates_member_and_the_file_stays_weights():
    files = [FileEntry("tiny.gguf", 100, "g" * 64)]
    parts = read_parts(None, "no tokenizer_config.json", [
        {"path": "tiny.gguf", "metadata": {"tokenizer.chat_template": "{{ x }}",
                                           "tokenizer.chat_template.rag": "{{ y }}", "general.name": "tiny"}}])
    components = {c.name: c for c in unit_components(files, parts)}
    assert [m.name for m in components["weights"].members] == ["tiny.gguf"]
    assert [m.name for m in components["chat_templates"].members] == [
        "tiny.gguf#tokenizer.chat_template", "tiny.gguf#tokenizer.chat_template/rag"]
    assert gguf_parts({"general.name": "x"}) == {}


def test_a_part_this_table_does_not_know_is_ignored_not_trusted():
    files = [FileEntry("tokenizer_config.json", 3, "a" * 64)]
    components = unit_components(files, {"tokenizer_config.json": {"without_chat_template": "d" * 64,
                                                                   "evil": "e" * 64, "chat_template": 7}})
    assert {c.name: [m.name for m in c.members] for c in components} == {
        "tokenizer": ["tokenizer_config.json#without_chat_template"]}


def test_identical_units_have_an_empty_diff():
    unit = _unit(BASE)
    diff = diff_components(unit.values(), _unit(BASE).values())
    assert diff.changed == () and diff.as_dict()["components"] == []
