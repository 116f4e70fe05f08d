"""License normalization: what hubs and cards write -> an SPDX expression or other:<name>, never an exception."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.domain.licenses import LICENSE_ID_MAX_LENGTH, normalize_license


@pytest.mark.parametrize(("raw", "expected"), [
    ("apache-2.0", "Apache-2.0"),
    ("mit", "MIT"),
    ("MIT", "MIT"),
    ("cc-by-nc-4.0", "CC-BY-NC-4.0"),
    ("cc-by-nc-sa-4.0", "CC-BY-NC-SA-4.0"),
    ("bsd-3-clause", "BSD-3-Clause"),
    ("gpl-3.0", "GPL-3.0-only"),  # the Hub's id is SPDX's deprecated one
    ("odbl", "ODbL-1.0"),
    ("  apache-2.0 ", "Apache-2.0"),
    ("llama3", "other:llama3"),
    ("llama3.1", "other:llama3.1"),
    ("gemma", "other:gemma"),
    ("openrail++", "other:openrail++"),
    ("creativeml-openrail-m", "other:creativeml-openrail-m"),
    ("other:Acme-Research", "other:acme-research"),
    ("mit or apache-2.0", "MIT OR Apache-2.0"),
    ("MIT AND (apache-2.0 OR bsd-3-clause)", "MIT AND (Apache-2.0 OR BSD-3-Clause)"),
    ("gpl-2.0-or-later with classpath-exception-2.0", "GPL-2.0-or-later WITH Classpath-exception-2.0"),
    (["mit", "apache-2.0"], "MIT AND Apache-2.0"),
    (["apache-2.0", "Apache-2.0"], "Apache-2.0"),
    (["llama3.1", "mit or apache-2.0"], "other:llama3.1 AND (MIT OR Apache-2.0)"),
])
def test_hub_and_card_values_normalize_to_spdx_or_other(raw, expected):
    result = normalize_license(raw)
    assert (result.id, result.problem) == (expected, None)


def test_license_other_takes_its_name_from_license_name():
    assert normalize_license("other", license_name="Acme Research License v2").id == "other:acme-research-license-v2"
    assert normalize_license("Other", license_name="tongyi-qianwen").id == "other:tongyi-qianwen"
    nameless = normalize_license("other")
    assert nameless.id is None and "license_name" in nameless.problem
    assert normalize_license("other", license_name="!!!").id is None
    assert normalize_license("other", license_name="a" * 200).id is None


@pytest.mark.parametrize(("raw", "problem"), [
    ("a license of many words " * 11, "longer than 256"),  # issue 7: the card value that was a 500
    ("x" * 100_000, "longer than 256"),
    ("mit\x1b[2J", "control character U+001B"),
    ("mit\x00", "NUL"),
    ("apache\u202e-2.0", "bidirectional"),
    ("", "empty"),
    ("   ", "empty"),
    ("unknown", "declared as unknown"),
    ("not-a-license", "not an SPDX license"),
    ("llama3 OR mit", "not an SPDX license"),
    ("(mit", "not a license expression"),
    ("mit AND", "AND requires two or more licenses"),
    ("Apache-2.0 WITH MIT", "not a license expression"),
    (None, "not text"),
    (42, "not text"),
    ({"id": "mit"}, "not text"),
    ([], "empty list"),
    ([["mit"]], "nested list"),
    (["mit"] * 17, "more than 16"),
    (["mit", "bogus"], "not an SPDX license"),
])
def test_garbage_is_unrecognized_with_a_reason(raw, problem):
    result = normalize_license(raw)
    assert result.id is None and not result.recognized
    assert problem in result.problem


def test_an_expression_longer_than_a_stored_id_is_unrecognized_not_cut():
    long_expression = " OR ".join(["Apache-2.0", "MIT", "BSD-3-Clause", "BSD-2-Clause", "ISC", "Zlib"] * 3)
    assert 128 < len(long_expression) <= 256
    result = normalize_license(long_expression)
    assert result.id is None and "longer than 128" in result.problem


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=400), st.lists(st.text(max_size=40), max_size=20), st.none(), st.integers()),
       st.one_of(st.none(), st.text(max_size=300)))
def test_any_input_gives_an_outcome_never_an_exception(raw, name):
    result = normalize_license(raw, license_name=name)
    assert (result.id is None) != (result.problem is None)
    if result.id is not None:
        assert len(result.id) <= LICENSE_ID_MAX_LENGTH
