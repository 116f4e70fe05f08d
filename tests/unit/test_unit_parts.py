"""Reading a unit's registry-held parts: counted and sized before a byte is read (``registry/domain/unit_parts.py``)."""

from __future__ import annotations

import pytest

from registry.domain.errors import InvalidInputError
from registry.domain.files import FileEntry
from registry.domain.unit_parts import MAX_PART_BYTES, MAX_PROMPTS, read_held_parts


def _reader(reads: list[str]):
    def read(digest: str, size: int) -> bytes:
        reads.append(digest)
        return b"x" * size
    return read


def test_only_the_held_parts_are_read_and_given_ones_are_not_read_again():
    reads: list[str] = []
    files = [FileEntry("prompts/a.jinja", 1, "a" * 64), FileEntry("serving-profile.json", 2, "b" * 64),
             FileEntry("model.safetensors", 9, "c" * 64), FileEntry("prompts/deep/x.jinja", 1, "d" * 64)]
    got = read_held_parts(files, _reader(reads), given={"prompts/a.jinja": b"given"})
    assert got == {"prompts/a.jinja": b"given", "serving-profile.json": b"xx"}
    assert reads == ["b" * 64]


def test_too_many_prompt_templates_are_refused_before_any_read():
    reads: list[str] = []
    files = [FileEntry(f"prompts/p{i}.jinja", 1, f"{i:064x}") for i in range(MAX_PROMPTS + 1)]
    with pytest.raises(InvalidInputError, match="at most"):
        read_held_parts(files, _reader(reads))
    assert reads == []


def test_a_part_too_large_is_refused_before_any_read():
    reads: list[str] = []
    files = [FileEntry("prompts/a.jinja", 1, "a" * 64), FileEntry("serving-profile.json", MAX_PART_BYTES + 1, "b" * 64)]
    with pytest.raises(InvalidInputError, match="at most"):
        read_held_parts(files, _reader(reads))
    assert reads == []


def test_check_parts_reads_each_prompt_templates_variables_and_refuses_a_bad_name():
    from registry.services.units import check_parts

    parts = check_parts({"prompts/hi.jinja": b"Hello {{ name }}"}, None, {}, runtime_margin_bytes=0)
    assert parts.prompts == {"hi": ["name"]} and parts.profile is None
    with pytest.raises(InvalidInputError) as refused:
        check_parts({"prompts/-bad.jinja": b"x"}, None, {}, runtime_margin_bytes=0)
    assert refused.value.details["reason"] == "bad-prompt-name"
