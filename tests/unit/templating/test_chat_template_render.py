"""Chat templates render byte-identically to transformers' ``apply_chat_template``; prompt templates are strict.

The reference is transformers itself, on a tokenizer built here (a word-level ``PreTrainedTokenizerFast``
with BOS/EOS/UNK, no hub): every benign template of ``tests/support/chat_templates.py`` over every
standard conversation, with and without the generation prompt. Where transformers raises, so must we.
"""

from __future__ import annotations

import functools
import json

import pytest

from registry.domain.errors import InvalidInputError
from registry.scanning.jinja_check import MAX_TEMPLATE_CHARS
from registry.templating import (
    MAX_OUTPUT_CHARS,
    STANDARD_CONVERSATIONS,
    ChatTemplateRenderError,
    PromptTemplateError,
    declared_variables,
    render_chat_template,
    render_prompt_template,
)
from tests.support.chat_templates import BENIGN, CHATML, NO_SYSTEM_ROLE

CASES = [(name, c.name, g) for name in BENIGN for c in STANDARD_CONVERSATIONS for g in (False, True)]


@functools.cache
def _tokenizer():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<s>": 0, "</s>": 1, "<unk>": 2, "hello": 3}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def _reference(template: str, conversation, add_generation_prompt: bool) -> tuple[str, str]:
    import jinja2

    try:
        return "ok", _tokenizer().apply_chat_template(
            conversation.message_list(), tools=conversation.tools, chat_template=template,
            add_generation_prompt=add_generation_prompt, tokenize=False)
    except jinja2.TemplateError as exc:
        return "raised", str(exc)


def _ours(template: str, conversation, add_generation_prompt: bool) -> tuple[str, str]:
    try:
        return "ok", render_chat_template(template, conversation.message_list(), tools=conversation.tools,
                                          add_generation_prompt=add_generation_prompt,
                                          **_tokenizer().special_tokens_map)
    except ChatTemplateRenderError as exc:
        return exc.reason, exc.message


@pytest.mark.parametrize("template_name,conversation_name,generation_prompt", CASES)
def test_renders_byte_identically_to_transformers(template_name, conversation_name, generation_prompt):
    template = BENIGN[template_name]
    conversation = next(c for c in STANDARD_CONVERSATIONS if c.name == conversation_name)
    expected, ours = _reference(template, conversation, generation_prompt), _ours(template, conversation,
                                                                                  generation_prompt)
    if expected[0] == "raised":
        assert ours[0] == "raised"
        assert expected[1] in ours[1]
    else:
        assert ours == expected
        assert ours[1].encode("utf-8") == expected[1].encode("utf-8")


def test_the_references_are_not_trivial():
    """The families above actually exercise what they claim: tools, BOS, refusals, non-ASCII JSON."""
    tool_call = next(c for c in STANDARD_CONVERSATIONS if c.name == "tool-calls+generation-prompt")
    rendered = _ours(BENIGN["tools-tojson"], tool_call, True)[1]
    assert '"arguments": {"city": "Berlin"}' in rendered
    assert json.dumps(tool_call.tools[0]) in rendered
    assert _ours(BENIGN["llama3-headers"], tool_call, True)[1].startswith("<s><|start_header_id|>system")
    assert _ours(NO_SYSTEM_ROLE, tool_call, True) == ("raised", "the template raised: System role not supported")
    chinese = next(c for c in STANDARD_CONVERSATIONS if c.name == "chinese")
    extras = _ours(BENIGN["non-ascii-extras"], chinese, False)[1]
    assert '"谢谢！"' in extras and '"\\u8c22\\u8c22\\uff01"' in extras


def test_special_tokens_and_keyword_variables_reach_the_template():
    template = "{{ bos_token }}{{ messages[0].content }}{% if enable_thinking %}<think>{% endif %}{{ eos_token }}"
    out = render_chat_template(template, [{"role": "user", "content": "x"}], bos_token="<s>", eos_token="</s>",
                               enable_thinking=True)
    assert out == "<s>x<think></s>"


def test_documents_render_as_transformers_renders_them():
    template = ("{% if documents %}{% for d in documents %}[{{ loop.index }}] {{ d.title }}: {{ d.text }}\n"
                "{% endfor %}{% endif %}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
    documents = [{"title": "Paris", "text": "Paris is the capital of France."},
                 {"title": "Берлин", "text": "Берлин — столица Германии."}]
    messages = [{"role": "user", "content": "Capitals?"}]
    ours = render_chat_template(template, messages, documents=documents)
    assert ours == _tokenizer().apply_chat_template(messages, documents=documents, chat_template=template,
                                                    tokenize=False)
    assert ours.startswith("[1] Paris: ")


def test_none_fields_are_dropped_and_reasoning_is_aliased_as_transformers_does():
    template = ("{% for m in messages %}{{ m.tool_calls is defined }} {{ m.thinking }}|{{ m.reasoning_content }}"
                "{% endfor %}")
    messages = [{"role": "assistant", "content": "a", "tool_calls": None, "reasoning": "because"}]
    assert render_chat_template(template, messages) == "False because|because"
    assert _tokenizer().apply_chat_template(messages, chat_template=template, tokenize=False) == \
        "False because|because"


def test_a_template_that_raises_becomes_a_render_error_with_a_stable_code():
    with pytest.raises(ChatTemplateRenderError) as caught:
        render_chat_template(NO_SYSTEM_ROLE, [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    assert isinstance(caught.value, InvalidInputError)
    assert caught.value.code == "chat-template-render"
    assert caught.value.reason == "raised"
    assert caught.value.details["reason"] == "raised"


@pytest.mark.parametrize("template,reason", [
    ("{% for m in messages %}{{ m.content }", "syntax"),
    ("{{ ''.__class__.__mro__ }}", "security"),
    ("{{ namespace(__class__=1) }}", "security"),
    ("{{ messages.append(1) }}", "security"),
    ("{{ messages[0].content + 1 }}", "error"),
    ("{{ 'x' * 100000000 }}", "too-much-work"),
    ("{{ 10 ** 100000 }}", "too-much-work"),
    ("{% set n = 100000 %}{{ 7 ** n }}", "too-much-work"),
    ("{{ '%0999999999d' % 1 }}", "too-much-work"),
    ("{{ '%0999999999d' | format(1) }}", "too-much-work"),
    ("{% set ns = namespace(s='x') %}{% for i in range(24) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
     "too-much-work"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "too-much-work"),
    ("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", "output-too-large"),
])
def test_hostile_or_broken_templates_are_refused_with_a_reason(template, reason):
    with pytest.raises(ChatTemplateRenderError) as caught:
        render_chat_template(template, [{"role": "user", "content": "hi"}])
    assert caught.value.reason == reason


def test_size_bounds():
    with pytest.raises(ChatTemplateRenderError) as caught:
        render_chat_template("a" * (MAX_TEMPLATE_CHARS + 1), [{"role": "user", "content": "hi"}])
    assert caught.value.reason == "template-too-large"
    just_fits = "{% for i in range(" + str(MAX_OUTPUT_CHARS // 1024) + ") %}{{ 'x' * 1024 }}{% endfor %}"
    assert len(render_chat_template(just_fits, [{"role": "user", "content": "hi"}])) == MAX_OUTPUT_CHARS
    deep: dict = {"role": "user", "content": "x"}
    for _ in range(40):
        deep = {"role": "user", "content": "x", "nested": deep}
    with pytest.raises(ChatTemplateRenderError) as caught:
        render_chat_template(CHATML, [deep])
    assert caught.value.reason == "bad-input"


@pytest.mark.parametrize("messages", [[], "hello", [["user", "hi"]]])
def test_malformed_messages_are_refused(messages):
    with pytest.raises(ChatTemplateRenderError) as caught:
        render_chat_template(CHATML, messages)
    assert caught.value.reason == "bad-input"


def test_strftime_now_can_be_pinned_for_repeatable_renders():
    from datetime import datetime

    out = render_chat_template("{{ strftime_now('%d %b %Y') }}", [{"role": "user", "content": "x"}],
                               strftime_at=datetime(2026, 1, 2))
    assert out == "02 Jan 2026"


# --- prompt templates ------------------------------------------------------------------------------


def test_prompt_template_renders_with_exactly_its_declared_variables():
    text = "You answer in {{ language }}.{% for part in topic.split(',') %} [{{ part | trim }}]{% endfor %}"
    assert declared_variables(text) == ["language", "topic"]
    assert render_prompt_template(text, {"language": "German", "topic": "a, b"}, ["language", "topic"]) == \
        "You answer in German. [a] [b]"


def test_prompt_template_using_an_undeclared_variable_is_refused():
    with pytest.raises(PromptTemplateError) as caught:
        render_prompt_template("{{ a }} {{ b }}", {"a": "1"}, ["a"])
    assert caught.value.details["undeclared"] == ["b"]
    assert caught.value.code == "prompt-template"


def test_prompt_template_missing_a_declared_variable_is_refused():
    with pytest.raises(PromptTemplateError) as caught:
        render_prompt_template("{{ a }}", {"a": "1"}, ["a", "b"])
    assert caught.value.details["missing"] == ["b"]


def test_prompt_template_given_an_extra_variable_is_refused():
    with pytest.raises(PromptTemplateError) as caught:
        render_prompt_template("{{ a }}", {"a": "1", "c": "2"}, ["a"])
    assert caught.value.details["extra"] == ["c"]


@pytest.mark.parametrize("variables,declared", [
    ({"a": 1}, ["a"]),
    ({"a": "1"}, ["a", "a"]),
    ({"_a": "1"}, ["_a"]),
])
def test_prompt_template_bad_values_and_names_are_refused(variables, declared):
    with pytest.raises(PromptTemplateError):
        render_prompt_template("{{ a }}", variables, declared)


@pytest.mark.parametrize("text", [
    "{{ ''.__class__.__mro__ }}",
    "{{ cycler.__init__.__globals__.os }}",
    "{{ x | attr('__cla' ~ 'ss__') }}",
])
def test_prompt_template_sandbox_escape_is_refused(text):
    with pytest.raises(PromptTemplateError):
        render_prompt_template(text, {"x": "y"} if "x |" in text else {}, ["x"] if "x |" in text else [])


def test_prompt_template_that_does_not_parse_is_refused():
    with pytest.raises(PromptTemplateError) as caught:
        declared_variables("{% if x %}")
    assert "does not parse" in caught.value.message
