"""Free text (registry/domain/text.py): what is refused, what is shown escaped."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from registry.domain.errors import InvalidTextError
from registry.domain.text import FreeText, printable, text_problem, validate_text

REFUSED = [chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]] + [
    "\u061c", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
    "\u2066", "\u2067", "\u2068", "\u2069", "\ud800", "\udfff",
]
ACCEPTED = ["main", "v1.0-rc/2", "café", "模型", "emoji 🤗", "zero\u200bwidth space", "a\u00a0b", "\u05d0\u05d1"]


@pytest.mark.parametrize("char", REFUSED, ids=[f"U+{ord(c):04X}" for c in REFUSED])
def test_control_and_bidi_characters_are_refused(char):
    with pytest.raises(InvalidTextError) as error:
        validate_text(f"ab{char}c", field="label", max_length=10)
    assert error.value.code == "invalid-text"
    assert error.value.details == {"field": "label", "reason": error.value.details["reason"],
                                   "character": f"U+{ord(char):04X}", "position": 2}


@pytest.mark.parametrize("text", ACCEPTED)
def test_ordinary_text_in_any_script_is_accepted(text):
    assert validate_text(text, field="label", max_length=64) == text
    assert printable(text) == text


def test_length_cap():
    assert validate_text("x" * 8, field="revision", max_length=8)
    with pytest.raises(InvalidTextError) as error:
        validate_text("x" * 9, field="revision", max_length=8)
    assert error.value.details["max_length"] == 8
    with pytest.raises(InvalidTextError):
        validate_text(None, field="revision", max_length=8)  # type: ignore[arg-type]


def test_the_pydantic_type_applies_the_same_check():
    class Body(BaseModel):
        label: FreeText(8)
        tags: list[FreeText(4)] = []

    assert Body(label="ok").label == "ok"
    for bad in ({"label": "a\x00"}, {"label": "x" * 9}, {"label": "ok", "tags": ["\u202e"]}):
        with pytest.raises(ValidationError) as error:
            Body(**bad)
        assert {e["type"] for e in error.value.errors()} == {"invalid_text"}
    with pytest.raises(ValidationError) as error:
        Body(label=3)
    assert error.value.errors()[0]["type"] == "string_type"
    assert Body.model_json_schema()["properties"]["label"]["maxLength"] == 8


def test_printable_escapes_every_refused_character_visibly():
    for char in REFUSED:
        shown = printable(f"a{char}b")
        assert shown.startswith("a\\") and shown.endswith("b") and char not in shown
    assert printable("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m"
    assert printable("evil\u202egnp.exe") == "evil\\u202egnp.exe"
    assert printable("line\nforged") == "line\\x0aforged"


@pytest.mark.parametrize("char", ["\u200b", "\u00ad", "\u2028", "\u2029", "\u00a0", "\u3000", "\ufeff", "\u2060"],
                         ids=lambda c: f"U+{ord(c):04X}")
def test_a_label_refuses_invisible_and_separator_characters_that_free_text_allows(char):
    from registry.domain.text import label_problem, validate_label

    assert text_problem(f"tiny{char}", 256) is None
    assert label_problem(f"tiny{char}", 256) == (
        f"invisible or separator character U+{ord(char):04X} at position 4",
        {"character": f"U+{ord(char):04X}", "position": 4})
    with pytest.raises(InvalidTextError):
        validate_label(f"tiny{char}", field="label", max_length=256)
    assert validate_label("my model été", field="label", max_length=256) == "my model été"
