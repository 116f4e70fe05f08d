"""Model and version references: every accepted form, and a clear error for everything else."""

from __future__ import annotations

import pytest

from registry.domain.errors import InvalidInputError, InvalidRefError
from registry.domain.refs import ModelRef, parse_model, parse_ref


@pytest.mark.parametrize("text,expected", [
    ("acme/llama", ModelRef("acme", "llama")),
    ("acme/llama@prod", ModelRef("acme", "llama", alias="prod")),
    ("acme/llama@3", ModelRef("acme", "llama", version=3)),
    ("modelreg://acme/llama@canary", ModelRef("acme", "llama", alias="canary")),
    ("modelreg://acme/llama@12", ModelRef("acme", "llama", version=12)),
    ("modelreg://acme/llama", ModelRef("acme", "llama")),
    ("a.b/c_d-e@v1.2", ModelRef("a.b", "c_d-e", alias="v1.2")),
])
def test_accepted_forms(text, expected) -> None:
    assert parse_ref(text) == expected


@pytest.mark.parametrize("text", ["acme/llama", "acme/llama@prod", "acme/llama@3"])
def test_a_ref_prints_as_written(text) -> None:
    assert str(parse_ref(text)) == text


@pytest.mark.parametrize("text,reason", [
    ("llama", "a model is tenant/name"),
    ("", "a model is tenant/name"),
    ("acme/", "the model name is empty"),
    ("/llama", "the tenant name is empty"),
    ("acme/team/llama", "with one '/'"),
    ("acme/llama@", "nothing after '@'"),
    ("acme/llama@prod@3", "more than one '@'"),
    ("acme/llama@0", "positive integer"),
    ("acme/llama@007", "without leading zeros"),
    ("acme/Llama", "invalid model name 'Llama'"),
    ("ACME/llama", "invalid tenant name 'ACME'"),
    ("acme/llama@Prod", "invalid alias name 'Prod'"),
    ("acme/llama@-x", "invalid alias name '-x'"),
    ("acme/llama\n", "invalid model name"),
    ("acme/llama@prod\n", "invalid alias name"),
    ("https://acme/llama@prod", "the only scheme is modelreg://"),
    ("modelreg://modelreg://acme/llama", "the only scheme is modelreg://"),
    ("acme/" + "m" * 64, "invalid model name"),
])
def test_everything_else_is_refused_with_why(text, reason) -> None:
    with pytest.raises(InvalidRefError) as caught:
        parse_ref(text)
    assert reason in caught.value.message
    assert caught.value.details == {"ref": text, "reason": caught.value.details["reason"]}
    assert isinstance(caught.value, InvalidInputError) and caught.value.code == "invalid-ref"


def test_a_model_argument_names_no_version() -> None:
    assert parse_model("acme/llama") == ModelRef("acme", "llama")
    for text in ("acme/llama@3", "acme/llama@prod", "modelreg://acme/llama"):
        with pytest.raises(InvalidRefError, match="tenant/name"):
            parse_model(text)
