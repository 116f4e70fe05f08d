"""The policy engine (registry/policy.py) on the shipped policies, on edited copies, and on broken ones."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from pathlib import Path

import pytest

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
from registry.policy import MAX_INPUT_BYTES, PolicyEngine, default_policy_dir
from registry.signing.canonical import canonical_json

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
WEIGHTS = FileEntry("model.safetensors", 10, "a" * 64)
CODE = FileEntry("modeling_tiny.py", 5, "b" * 64)


def approve(who: str, capacity: str, *files: str) -> Approval:
    return Approval(who, capacity, "approve", T0, files)


BOTH = [approve("sam", "security"), approve("mia", "ml")]


def doc(*, files=(WEIGHTS,), scans=(ScanVerdict("model.safetensors", "safe"),), license="apache-2.0",
        approvals=(), submitter="alice"):
    return approval_input(
        version=VersionRef("acme", "tiny", 1, "awaiting_approval"),
        source=SourceRef("hf", "org/tiny", "c" * 40),
        files=files, scans=scans, license=LicenseInfo(license), approvals=approvals, submitter=submitter,
    )


REMOTE_CODE_SCANS = (
    ScanVerdict("model.safetensors", "safe"),
    ScanVerdict("modeling_tiny.py", "suspicious", (("remote-code.python-file", "suspicious"),)),
)


@pytest.fixture(scope="module")
def shipped() -> PolicyEngine:
    engine = PolicyEngine.from_directory(default_policy_dir())
    assert engine.load_error is None
    return engine


def codes(decision) -> list[str]:
    return [u["code"] for u in decision.unmet]


def test_clean_model_is_approved_by_security_and_ml_and_names_its_digests(shipped):
    assert shipped.approval(doc()).outcome == "pending"
    assert codes(shipped.approval(doc())) == ["approval.missing", "approval.missing"]
    input_doc = doc(approvals=BOTH)
    decision = shipped.approval(input_doc)
    assert (decision.outcome, decision.allowed, decision.unmet) == ("approved", True, [])
    assert decision.input_digest == hashlib.sha256(canonical_json(input_doc)).hexdigest()
    assert len(decision.bundle_digest) == 64 and decision.bundle_digest == shipped.bundle_digest


def test_one_person_counts_once(shipped):
    later = Approval("sam", "ml", "approve", T0 + dt.timedelta(hours=1))
    decision = shipped.approval(doc(approvals=[later, approve("sam", "security")]))
    assert [(u["code"], u["capacity"]) for u in decision.unmet] == [("approval.missing", "ml")]


def test_license_off_the_allow_list_waits_for_legal(shipped):
    decision = shipped.approval(doc(license="other:research-only", approvals=BOTH))
    assert (decision.outcome, codes(decision)) == ("pending", ["legal.license"])
    assert decision.unmet[0]["capacity"] == "legal"
    assert shipped.approval(doc(license="other:research-only", approvals=[*BOTH, approve("lee", "legal")])).allowed


def test_remote_code_waits_for_a_security_approval_naming_the_file(shipped):
    decision = shipped.approval(doc(files=(WEIGHTS, CODE), scans=REMOTE_CODE_SCANS, approvals=[approve("mia", "ml")]))
    assert codes(decision) == ["approval.missing", "security.file-review", "security.remote-code"]
    assert decision.outcome == "pending"
    named = [approve("sam", "security", "modeling_tiny.py"), approve("mia", "ml")]
    assert shipped.approval(doc(files=(WEIGHTS, CODE), scans=REMOTE_CODE_SCANS, approvals=named)).allowed


def test_unsafe_file_is_never_approved(shipped):
    every = [approve("sam", "security", "model.safetensors"), approve("mia", "ml"), approve("lee", "legal")]
    decision = shipped.approval(doc(scans=(ScanVerdict("model.safetensors", "unsafe"),), approvals=every))
    assert (decision.outcome, decision.allowed, codes(decision)) == ("blocked", False, ["scan.unsafe"])


def test_self_approval_does_not_count(shipped):
    decision = shipped.approval(doc(approvals=[approve("alice", "security"), approve("mia", "ml")], submitter="alice"))
    assert not decision.allowed
    assert [(u["code"], u["capacity"]) for u in decision.unmet] == [("approval.missing", "security")]


def test_one_reject_rejects(shipped):
    reject = Approval("rex", "ml", "reject", T0)
    decision = shipped.approval(doc(approvals=[*BOTH, reject]))
    assert (decision.outcome, decision.allowed, codes(decision)) == ("rejected", False, ["rejected"])


def test_promotion_of_prod_needs_ml_or_admin_and_an_approved_version(shipped):
    def move(capacities, state, is_admin=False):
        return shipped.promotion(promotion_input(principal="p", is_admin=is_admin, capacities=capacities,
                                                 alias="prod", target=(2, state), current=(1, "approved")))

    assert move(["ml"], "approved").outcome == "allowed"
    assert move([], "approved", is_admin=True).allowed
    assert codes(move(["security"], "approved")) == ["promotion.not-permitted"]
    assert codes(move(["ml"], "revoked")) == ["promotion.target-not-approved"]


# --- the directory is configuration -------------------------------------------------------------


@pytest.fixture
def policy_copy(tmp_path) -> Path:
    return Path(shutil.copytree(default_policy_dir(), tmp_path / "policies"))


def test_changing_data_json_changes_the_outcome_without_code(policy_copy, shipped):
    input_doc = doc(license="other:research-only", approvals=BOTH)
    assert not shipped.approval(input_doc).allowed
    data = json.loads((policy_copy / "data.json").read_text())
    data["modelreg"]["config"]["license_allow_list"].append("other:research-only")
    (policy_copy / "data.json").write_text(json.dumps(data))
    edited = PolicyEngine.from_directory(policy_copy)
    decision = edited.approval(input_doc)
    assert decision.outcome == "approved"
    assert decision.bundle_digest != shipped.bundle_digest


def test_requiring_another_capacity_in_data_json_adds_an_unmet_requirement(policy_copy):
    data = json.loads((policy_copy / "data.json").read_text())
    data["modelreg"]["config"]["required_capacities"].append("privacy")
    (policy_copy / "data.json").write_text(json.dumps(data))
    decision = PolicyEngine.from_directory(policy_copy).approval(doc(approvals=BOTH))
    assert [(u["code"], u["capacity"]) for u in decision.unmet] == [("approval.missing", "privacy")]


def test_bundle_digest_covers_policies_and_data_only(policy_copy, shipped):
    assert PolicyEngine.from_directory(policy_copy).bundle_digest == shipped.bundle_digest
    (policy_copy / "extra_test.rego").write_text("package x_test\n")
    (policy_copy / "NOTES.md").write_text("notes")
    assert PolicyEngine.from_directory(policy_copy).bundle_digest == shipped.bundle_digest
    (policy_copy / "helpers.rego").write_text("package modelreg.helpers\n\nx := 1\n")
    assert PolicyEngine.from_directory(policy_copy).bundle_digest != shipped.bundle_digest


# --- fail closed --------------------------------------------------------------------------------


def assert_denies(engine: PolicyEngine, reason: str, input_doc=None) -> None:
    decision = engine.approval(input_doc if input_doc is not None else doc(approvals=BOTH))
    assert (decision.outcome, decision.allowed) == ("error", False)
    assert codes(decision) == ["policy.error"] and reason in decision.error, decision.error
    assert reason in decision.unmet[0]["message"]


def test_missing_directory_denies(tmp_path):
    assert_denies(PolicyEngine.from_directory(tmp_path / "nowhere"), "does not exist")


def test_empty_directory_denies(tmp_path):
    assert_denies(PolicyEngine.from_directory(tmp_path), "no policy modules")


def test_missing_approval_rego_denies_approvals_only(policy_copy):
    (policy_copy / "approval.rego").unlink()
    engine = PolicyEngine.from_directory(policy_copy)
    assert_denies(engine, "approval.rego is missing")
    assert engine.promotion(promotion_input(principal="p", is_admin=True, capacities=[], alias="prod",
                                            target=(1, "approved"))).allowed


def test_syntax_error_denies(policy_copy):
    with (policy_copy / "approval.rego").open("a") as f:
        f.write("\nbroken := \n")
    engine = PolicyEngine.from_directory(policy_copy)
    lines = (policy_copy / "approval.rego").read_text().count("\n")
    assert engine.load_error == f"approval.rego does not compile: line {lines}: Invalid assignment operator"
    assert_denies(engine, "approval.rego does not compile")


def test_runtime_error_in_a_builtin_denies_rather_than_dropping_a_requirement(tmp_path):
    # Without strict built-in errors the failing to_number makes the rule undefined, the set empty,
    # and the version approved.
    (tmp_path / "approval.rego").write_text(
        "package modelreg.approval\nimport rego.v1\n"
        "blocks contains {\"code\": \"x\", \"message\": \"m\"} if to_number(input.submitter) >= 0\n"
        "decision := {\"unmet\": blocks, \"rejected\": false}\n"
    )
    assert_denies(PolicyEngine.from_directory(tmp_path), "failed")


def test_conflicting_rule_values_deny(tmp_path):
    (tmp_path / "approval.rego").write_text(
        "package modelreg.approval\nimport rego.v1\n"
        "decision := {\"unmet\": [], \"rejected\": false}\n"
        "decision := {\"unmet\": [], \"rejected\": true} if input.submitter\n"
    )
    assert_denies(PolicyEngine.from_directory(tmp_path), "failed")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("package modelreg.other\nimport rego.v1\ndecision := {\"unmet\": []}\n", "is undefined"),
        ("package modelreg.approval\nimport rego.v1\ndecision := {\"unmet\": []} if input.nope\n", "is undefined"),
        ("package modelreg.approval\nimport rego.v1\ndecision := \"yes\"\n", "not an object"),
        ("package modelreg.approval\nimport rego.v1\ndecision := {\"unmet\": \"none\"}\n", "not a set of objects"),
        ("package modelreg.approval\nimport rego.v1\ndecision := {\"rejected\": false}\n", "not a set of objects"),
        ("package modelreg.approval\nimport rego.v1\ndecision := {\"unmet\": [{\"code\": 1}]}\n", "code and a message"),
        ("package modelreg.approval\nimport rego.v1\ndecision := {\"unmet\": [], \"rejected\": \"no\"}\n",
         "not a boolean"),
    ],
    ids=["other-package", "undefined-rule", "string", "unmet-string", "no-unmet", "bad-item", "rejected-string"],
)
def test_undefined_or_wrongly_typed_result_denies(tmp_path, body, reason):
    (tmp_path / "approval.rego").write_text(body)
    assert_denies(PolicyEngine.from_directory(tmp_path), reason)


def test_bad_data_json_denies(policy_copy):
    (policy_copy / "data.json").write_text("[1, 2")
    assert_denies(PolicyEngine.from_directory(policy_copy), "data.json is not valid JSON")
    (policy_copy / "data.json").write_text("[1, 2]")
    assert_denies(PolicyEngine.from_directory(policy_copy), "data.json is not a JSON object")


def test_policy_using_with_is_refused(policy_copy):
    (policy_copy / "extra.rego").write_text(
        "package modelreg.extra\nimport rego.v1\nx := 1\ny if { x == 1 with input as {} }\n")
    assert_denies(PolicyEngine.from_directory(policy_copy), "uses `with`")
    # The word alone (in a message, a comment) is fine.
    (policy_copy / "extra.rego").write_text(
        "package modelreg.extra\nimport rego.v1\n# checked with input from the scanner\nm := \"signed with data\"\n")
    assert PolicyEngine.from_directory(policy_copy).load_error is None


def test_oversized_input_denies(shipped):
    big = doc(approvals=BOTH)
    big["facts"] = {"blob": "x" * MAX_INPUT_BYTES}
    assert_denies(shipped, "more than", big)
    decision = shipped.approval(big)
    assert decision.input_digest == hashlib.sha256(canonical_json(big)).hexdigest()


def test_input_that_is_not_json_denies(shipped):
    bad = doc(approvals=BOTH)
    bad["facts"] = {"n": float("nan")}
    assert_denies(shipped, "not representable", bad)
