"""The two rewrites of an adapter's config. A node's: ``base_model_name_or_path`` set to the base's served name,
every other byte as signed; a config that cannot be rewritten without guessing is refused. ``/hf``'s: the base
written into the two keys PEFT reads, a pure function of the signed bytes (same input, same bytes), and a config
that is no strict JSON object refused."""

from __future__ import annotations

import json

import pytest

from registry.domain.adapter_config import (
    AdapterConfigError,
    AdapterConfigUnservableError,
    rewrite_base_name,
    with_base,
)
from registry.domain.adapters import MAX_CONFIG_BYTES
from registry.domain.errors import InvalidInputError

PEFT = (b'{\n  "alpha_pattern": {},\n  "base_model_name_or_path": "/work/checkpoints/llama-tiny",\n'
        b'  "peft_type": "LORA",\n  "r": 4,\n  "target_modules": [\n    "q_proj",\n    "v_proj"\n  ]\n}')


def test_only_the_value_changes_and_the_rewrite_is_a_function_of_its_input():
    rewritten = rewrite_base_name(PEFT, "acme/llm")
    assert rewritten == PEFT.replace(b'"/work/checkpoints/llama-tiny"', b'"acme/llm"')
    assert json.loads(rewritten) == {**json.loads(PEFT), "base_model_name_or_path": "acme/llm"}
    assert rewrite_base_name(PEFT, "acme/llm") == rewritten
    assert rewrite_base_name(rewritten, "acme/llm") == rewritten


@pytest.mark.parametrize("value", [b"null", b'"a \\"quoted\\" \\u00e9 name"', b"{\"nested\": [1, {}]}", b"7"])
def test_any_json_value_is_replaced_whole(value):
    config = b'{"r": 4, "base_model_name_or_path" :  ' + value + b' , "peft_type": "LORA"}'
    assert rewrite_base_name(config, "acme/llm") == (
        b'{"r": 4, "base_model_name_or_path" :  "acme/llm" , "peft_type": "LORA"}')


def test_a_config_without_the_key_gets_it_first():
    assert rewrite_base_name(b'{\n "r": 4\n}', "acme/llm") == b'{"base_model_name_or_path": "acme/llm",\n "r": 4\n}'
    assert rewrite_base_name(b" { } ", "acme/llm") == b' {"base_model_name_or_path": "acme/llm" } '


def test_a_non_ascii_name_is_written_as_json_escapes_and_the_rest_stays_utf8():
    config = '{"note": "é", "base_model_name_or_path": "x"}'.encode()
    expected = '{"note": "é", "base_model_name_or_path": "acme/llm-\\u00e9"}'.encode()
    assert rewrite_base_name(config, "acme/llm-é") == expected


@pytest.mark.parametrize("config,says", [
    (b'{"base_model_name_or_path": "a", "base_model_name_or_path": "b"}', "repeats key"),
    (b'{"r": 4, "r": 5}', "repeats key"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"r": 4} {"r": 5}', "more after its object"),
    (b'{"r": 4', "expected"),
    (b'{"r" 4}', "':' was expected"),
    (b'\xef\xbb\xbf{"r": 4}', "not a JSON object"),
    (b'{"r": "\xff"}', "not UTF-8"),
    (b"{" + b'"k": 1, ' * 200_000 + b'"r": 4}', "over"),
])
def test_a_config_that_cannot_be_rewritten_is_refused(config, says):
    with pytest.raises(AdapterConfigError) as refused:
        rewrite_base_name(config, "acme/llm")
    assert says in str(refused.value)


@pytest.mark.parametrize("name", ["", "a\nb", "x" * 257, None])
def test_a_served_name_is_printable_text(name):
    with pytest.raises(InvalidInputError):
        rewrite_base_name(b"{}", name)


# --- /hf's rewrite ---------------------------------------------------------------------------------------

ORIGINAL = json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"],
                       "base_model_name_or_path": "/home/me/llama", "revision": None, "task_type": "CAUSAL_LM",
                       "note": "é"}, indent=4).encode()


def test_the_base_is_written_into_the_two_keys_and_nothing_else_changes():
    served = with_base(ORIGINAL, base_name="acme/llm", base_revision="ab" * 20)
    doc = json.loads(served)
    assert (doc.pop("base_model_name_or_path"), doc.pop("revision")) == ("acme/llm", "ab" * 20)
    original = json.loads(ORIGINAL)
    del original["base_model_name_or_path"], original["revision"]
    assert doc == original
    # As PEFT's save_pretrained writes it: two-space indent, sorted keys.
    assert served == json.dumps(json.loads(served), indent=2, sort_keys=True).encode()


def test_the_same_signed_bytes_and_base_always_give_the_same_bytes_and_another_base_others():
    one = with_base(ORIGINAL, base_name="acme/llm", base_revision="ab" * 20)
    assert with_base(ORIGINAL, base_name="acme/llm", base_revision="ab" * 20) == one
    assert with_base(one, base_name="acme/llm", base_revision="ab" * 20) == one
    assert with_base(ORIGINAL, base_name="acme/llm", base_revision="cd" * 20) != one
    assert json.loads(with_base(ORIGINAL, base_name="acme/llm", base_revision=None))["revision"] is None


@pytest.mark.parametrize("original", [
    b'{"peft_type": "LORA", "r": 4, "r": 8}',       # readers disagree on which r wins
    b'{"peft_type": "LORA", "lora_alpha": NaN}',
    b'["peft_type"]',
    b"\xff\xfe{}",
    b'{"peft_type": ',
    b"{" + b" " * MAX_CONFIG_BYTES + b"}",
])
def test_a_config_that_is_no_bounded_strict_json_object_is_refused(original):
    with pytest.raises(AdapterConfigUnservableError):
        with_base(original, base_name="acme/llm", base_revision=None)
