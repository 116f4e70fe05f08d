"""Free text on the HTTP API: control and bidirectional characters refused in every free-text field, invisible
and separator characters in labels, length caps, a name with a final newline (SQLite and PostgreSQL)."""

from __future__ import annotations

import pytest

from registry.db.models import ApiToken, Version
from tests.support.api_inputs import (
    PROBLEM,
    assert_invalid_text,
    count_rows,
    upload_weights,
)

# One of each kind the free-text check refuses: C0, DEL, C1, and every bidirectional formatting character.
REFUSED = ["\x00", "\t", "\n", "\x1b", "\x7f", "\x85", "\x9f", "\u061c", "\u200e", "\u200f",
           "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]


@pytest.mark.parametrize("char", REFUSED, ids=[f"U+{ord(c):04X}" for c in REFUSED])
def test_free_text_fields_refuse_control_and_bidi_characters(api, container, tmp_path, char):
    tokens = count_rows(container, ApiToken)
    r = api.post("/v1/principals/root/tokens", json={"description": f"ci{char}key"})
    assert_invalid_text(r, "description")
    assert count_rows(container, ApiToken) == tokens

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    for body, field in [
        ({"source": str(tmp_path / "m"), "revision": f"main{char}"}, "revision"),
        ({"source": str(tmp_path / "m"), "include": ["*.json", f"{char}*"]}, "include"),
        ({"source": str(tmp_path / "m"), "exclude": [f"*{char}"]}, "exclude"),
        ({"source": f"upload:my{char}model", "files": [upload_weights(api, b"weights")]}, "source"),
    ]:
        assert_invalid_text(api.post("/v1/models/acme/m/versions", json=body), field)
    assert count_rows(container, Version) == 0


# Issue 18: characters that show as nothing or as a break; a label holding one reads as another label.
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u180e", "\u2028", "\u2029",
             "\u00a0", "\u2003", "\u3000", "\U000e0041"]


@pytest.mark.parametrize("char", INVISIBLE, ids=[f"U+{ord(c):04X}" for c in INVISIBLE])
def test_labels_refuse_invisible_and_separator_characters(api, container, tmp_path, char):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    r = api.post("/v1/models/acme/m/versions", json={"source": str(tmp_path / "m"), "revision": f"main{char}"})
    assert_invalid_text(r, "revision")
    assert f"U+{ord(char):04X}" in r.text
    r = api.post("/v1/models/acme/m/versions",
                 json={"source": f"upload:tiny{char}", "files": [upload_weights(api, b"w")]})
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", r.text
    assert (r.json()["type"], r.json()["field"]) == (PROBLEM + "invalid-text", "label")
    assert f"U+{ord(char):04X}" in r.json()["detail"]
    assert count_rows(container, Version) == 0


def test_a_label_may_hold_ascii_spaces_and_other_scripts(api):
    r = api.post("/v1/models/acme/m/versions", json={"source": "upload:my model été 模型",
                                                     "files": [upload_weights(api, b"w")]})
    assert r.status_code == 202, r.text


def test_free_text_fields_have_length_caps(api, container, tmp_path):
    from registry.domain.text import MAX_DESCRIPTION_LENGTH, MAX_LABEL_LENGTH, MAX_REVISION_LENGTH
    from registry.sources.filters import MAX_GLOB_LENGTH, MAX_GLOBS

    assert_invalid_text(api.post("/v1/principals/root/tokens",
                                  json={"description": "d" * (MAX_DESCRIPTION_LENGTH + 1)}), "description")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    source = str(tmp_path / "m")
    for body, field in [
        ({"source": source, "revision": "r" * (MAX_REVISION_LENGTH + 1)}, "revision"),
        ({"source": source, "include": ["g" * (MAX_GLOB_LENGTH + 1)]}, "include"),
    ]:
        assert_invalid_text(api.post("/v1/models/acme/m/versions", json=body), field)
    # The label is what follows "upload:"; it used to be cut silently at 512 characters.
    r = api.post("/v1/models/acme/m/versions",
                 json={"source": "upload:" + "l" * (MAX_LABEL_LENGTH + 1), "files": [upload_weights(api, b"w")]})
    assert r.status_code == 422 and r.json()["type"] == PROBLEM + "invalid-text", r.text
    assert r.json()["field"] == "label"
    r = api.post("/v1/models/acme/m/versions", json={"source": source, "include": ["*"] * (MAX_GLOBS + 1)})
    assert r.status_code == 422, r.text
    assert count_rows(container, Version) == 0
    # At the caps, everything is accepted.
    r = api.post("/v1/models/acme/m/versions",
                 json={"source": "upload:" + "l" * MAX_LABEL_LENGTH, "files": [upload_weights(api, b"w")]})
    assert r.status_code == 202, r.text
    r = api.post("/v1/principals/root/tokens", json={"description": "d" * MAX_DESCRIPTION_LENGTH})
    assert r.status_code == 201, r.text


def test_a_name_with_a_final_newline_is_refused(api, container, tmp_path):
    """A pattern ending in "$" also matched "m\\n": such a model was created."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    r = api.post("/v1/models/acme/m%0A/versions", json={"source": str(tmp_path / "m")})
    assert r.status_code == 422 and r.json()["type"] == PROBLEM + "invalid-input", r.text
    assert count_rows(container, Version) == 0
