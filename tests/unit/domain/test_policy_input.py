"""The policy input documents (registry/domain/policy_input.py): pure, deterministic, validated."""

from __future__ import annotations

import datetime as dt

import pytest

from registry.domain.errors import InvalidInputError
from registry.domain.files import FileEntry
from registry.domain.policy_input import (
    Approval,
    LicenseInfo,
    ScanVerdict,
    SourceRef,
    VersionRef,
    approval_input,
    promotion_input,
)

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def build(**overrides):
    args = dict(
        version=VersionRef("acme", "tiny", 3, "awaiting_approval"),
        source=SourceRef("hf", "org/tiny", "c" * 40),
        files=[FileEntry("b.json", 2, "2" * 64), FileEntry("a.safetensors", 1, "1" * 64)],
        scans=[ScanVerdict("b.json", "safe"), ScanVerdict("a.safetensors", "safe")],
        license=LicenseInfo("mit", ({"kind": "declared-conflict"},)),
        approvals=[Approval("mia", "ml", "approve", T0 + dt.timedelta(hours=1)),
                   Approval("sam", "security", "approve", T0, ("b.json", "b.json"))],
        submitter="alice",
    )
    return approval_input(**{**args, **overrides})


def test_every_field_of_the_schema_is_present():
    doc = build()
    assert set(doc) == {"version", "source", "facts", "files", "scans", "unscanned", "license", "evals", "baseline",
                        "approvals", "submitter", "unit", "adapter_of"}
    assert doc["version"] == {"tenant": "acme", "model": "tiny", "number": 3, "state": "awaiting_approval"}
    assert doc["source"] == {"kind": "hf", "repo": "org/tiny", "revision": "c" * 40}
    assert doc["facts"] is None and doc["evals"] == [] and doc["baseline"] is None
    assert doc["license"] == {"id": "mit", "findings": [{"kind": "declared-conflict"}]}
    assert doc["approvals"][0] == {"principal": "sam", "capacity": "security", "decision": "approve",
                                   "files": ["b.json"], "at": "2026-01-01T00:00:00+00:00"}


def test_lists_are_sorted_so_the_same_facts_give_the_same_document():
    doc = build()
    assert [f["path"] for f in doc["files"]] == ["a.safetensors", "b.json"]
    assert [s["path"] for s in doc["scans"]] == ["a.safetensors", "b.json"]
    assert [a["principal"] for a in doc["approvals"]] == ["sam", "mia"]
    reordered = build(
        files=[FileEntry("a.safetensors", 1, "1" * 64), FileEntry("b.json", 2, "2" * 64)],
        scans=[ScanVerdict("a.safetensors", "safe"), ScanVerdict("b.json", "safe")],
        approvals=[Approval("sam", "security", "approve", T0, ("b.json",)),
                   Approval("mia", "ml", "approve", T0 + dt.timedelta(hours=1))],
    )
    assert reordered == doc


def test_verdicts_of_one_file_merge_into_the_worst_with_every_finding():
    doc = build(scans=[
        ScanVerdict("a.safetensors", "suspicious", (("remote-code.auto-map", "suspicious"),)),
        ScanVerdict("a.safetensors", "unsafe", (("pickle.global", "unsafe"),)),
        ScanVerdict("a.safetensors", "safe"),
        ScanVerdict("b.json", "error", (("x.fail", "error"),)),
        ScanVerdict("b.json", "suspicious"),
    ])
    assert doc["scans"] == [
        {"path": "a.safetensors", "verdict": "unsafe", "findings": [
            {"rule_id": "pickle.global", "severity": "unsafe"},
            {"rule_id": "remote-code.auto-map", "severity": "suspicious"}]},
        {"path": "b.json", "verdict": "error", "findings": [{"rule_id": "x.fail", "severity": "error"}]},
    ]


def test_a_file_without_a_verdict_stays_without_one():
    assert [s["path"] for s in build(scans=[ScanVerdict("b.json", "safe")])["scans"]] == ["b.json"]


@pytest.mark.parametrize(
    "overrides",
    [
        {"files": [FileEntry("a", 1, "1" * 64), FileEntry("a", 2, "2" * 64)]},
        {"scans": [ScanVerdict("a", "fine")]},
        {"approvals": [Approval("mia", "ml", "maybe", T0)]},
        {"approvals": [Approval("mia", "ml", "approve", dt.datetime(2026, 1, 1))]},
    ],
    ids=["duplicate-file", "unknown-verdict", "unknown-decision", "naive-time"],
)
def test_bad_input_is_refused(overrides):
    with pytest.raises(InvalidInputError):
        build(**overrides)


def test_promotion_input():
    doc = promotion_input(principal="mia", is_admin=False, capacities=["ml", "security", "ml"], alias="prod",
                          target=(2, "approved"), current=(1, "approved"))
    assert doc == {
        "principal": {"name": "mia", "is_admin": False, "capacities": ["ml", "security"]},
        "alias": "prod", "target": {"number": 2, "state": "approved"}, "canary": None,
        "current": {"number": 1, "state": "approved"}, "evals": [], "baseline": None, "unit": None,
        "adapter_of": None,
    }


def test_the_files_without_a_verdict_are_listed_sorted():
    doc = approval_input(version=VersionRef("acme", "tiny", 1, "scanning"), source=SourceRef("hf", "org/tiny", "c"),
                         files=[FileEntry(p, 1, "a" * 64) for p in ("z.json", "b.bin", "a.safetensors")],
                         scans=[ScanVerdict("b.bin", "safe")], license=LicenseInfo("mit"), approvals=[],
                         submitter="alice")
    assert doc["unscanned"] == ["a.safetensors", "z.json"]
