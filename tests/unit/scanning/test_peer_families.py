"""Every attack and benign family of the peer scanners' test suites, with the verdict meant for it.

The samples are written here (``tests/support/peer_families.py``), each named after its family;
this test keeps every verdict: an attack that runs code is ``unsafe``, one that is only unusual or
uninspectable is ``suspicious``, and a benign file is ``safe``. A change of verdict in either
direction fails here.
"""

from __future__ import annotations

import io
import warnings

import pytest

from registry.scanning import Severity, Verdict, scan_stream
from tests.support.peer_families import FAMILIES


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_verdict(family: str) -> None:
    fam = FAMILIES[family]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = fam.build()
    scan = scan_stream(fam.filename, io.BytesIO(data), len(data))
    assert scan.verdict is Verdict(fam.want), scan.as_dict()
    if fam.want == "unsafe":
        # Explainable: the worst finding says where.
        assert any(f.severity is Severity.UNSAFE and f.location for f in scan.findings), scan.as_dict()


def test_families_cover_each_peer_and_both_kinds() -> None:
    sources = " ".join(f.source for f in FAMILIES.values())
    for peer in ("picklescan", "fickling", "modelscan"):
        assert peer in sources
    assert sum(f.attack for f in FAMILIES.values()) >= 100
    assert sum(f.want == "safe" for f in FAMILIES.values()) >= 40
