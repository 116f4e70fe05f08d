"""LICENSE files matched against the shipped SPDX texts (word 3-gram Dice similarity, threshold and margin)."""

from __future__ import annotations

import pytest

from registry.domain.licenses import normalize_license
from registry.licenses import matching

TEXTS = sorted(p.stem for p in matching.TEXTS_DIR.glob("*.txt"))


def _text(spdx_id: str) -> str:
    return (matching.TEXTS_DIR / f"{spdx_id}.txt").read_text(encoding="utf-8")


def test_the_texts_are_the_common_model_hub_licenses_and_their_names_are_spdx_ids():
    assert {"Apache-2.0", "MIT", "BSD-3-Clause", "CC-BY-4.0", "CC-BY-NC-4.0", "CC-BY-SA-4.0",
            "CC-BY-NC-SA-4.0", "CC0-1.0", "GPL-3.0-only", "AGPL-3.0-only", "LGPL-3.0-only"} <= set(TEXTS)
    for spdx_id in TEXTS:
        assert normalize_license(spdx_id).id == spdx_id


@pytest.mark.parametrize("spdx_id", TEXTS)
def test_each_text_matches_itself_reflowed_and_in_another_case(spdx_id):
    reflowed = " ".join(_text(spdx_id).split()).upper()
    match = matching.match_license_text(reflowed)
    assert (match.spdx_id, match.similarity) == (spdx_id, 1.0)


def test_a_filled_in_copyright_and_a_markdown_title_still_match():
    text = "# MIT License\n\n" + _text("MIT").replace("<year> <copyright holders>", "2024 Acme Research, Inc.")
    match = matching.match_license_text(text)
    assert match.spdx_id == "MIT" and match.similarity >= matching.THRESHOLD


def test_a_noncommercial_text_never_matches_its_permissive_sibling():
    match = matching.match_license_text(_text("CC-BY-NC-4.0"))
    assert match.spdx_id == "CC-BY-NC-4.0"
    assert matching.match_license_text(_text("CC-BY-NC-SA-4.0")).spdx_id == "CC-BY-NC-SA-4.0"


def test_a_text_about_as_close_to_two_licenses_matches_neither():
    common = " ".join(f"w{i}" for i in range(200))
    permissive = matching.shingles(common + " you may use it for any purpose")
    restrictive = matching.shingles(common + " you may use it for noncommercial purposes only")
    refs = {"Permissive-1.0": permissive, "Restrictive-1.0": restrictive}
    assert matching.match_license_text(common + " you may use it for any purpose", refs).spdx_id == "Permissive-1.0"
    ambiguous = matching.match_license_text(common + " you may use it", refs)
    assert ambiguous.similarity >= matching.THRESHOLD and ambiguous.spdx_id is None


def test_other_text_matches_nothing_and_names_the_closest():
    match = matching.match_license_text("LLAMA 3.1 COMMUNITY LICENSE AGREEMENT. You may not use the Llama "
                                        "Materials to improve any other large language model.")
    assert match.spdx_id is None and match.similarity < matching.THRESHOLD
    assert matching.match_license_text("").spdx_id is None
    assert matching.match_license_text("\x00\xff" * 1000).spdx_id is None
