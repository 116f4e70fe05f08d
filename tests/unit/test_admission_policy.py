"""The admission policy (``policies/admission.rego``) through the engine: per-namespace tenant and mode, a rule per
reference, and fail closed."""

from __future__ import annotations

import json
import shutil

import pytest

from registry.policy import PolicyEngine, default_policy_dir

NAMESPACES = {"team-a": {"tenant": "acme", "mode": "enforce", "hf": "registry"},
              "team-warn": {"tenant": "acme", "mode": "warn"}, "team-off": {"tenant": "acme", "mode": "off"},
              "team-typo": {"tenant": "acme", "mode": "enforcing"}}


def ref(scheme="modelreg", tenant="acme", status="served", problem=None, registry_host=False):
    return {"uri": "u", "kind": "storage-uri", "path": "/spec/x", "scheme": scheme, "registry_host": registry_host,
            "model": f"{tenant}/llm", "tenant": tenant, "problem": problem, "status": status}


@pytest.fixture
def engine(tmp_path):
    shutil.copytree(default_policy_dir(), tmp_path / "p")
    data = json.loads((tmp_path / "p" / "data.json").read_text())
    data["modelreg"]["config"]["admission"]["namespaces"] = NAMESPACES
    (tmp_path / "p" / "data.json").write_text(json.dumps(data))
    return PolicyEngine.from_directory(tmp_path / "p")


def verdicts(engine, namespace, *refs):
    decision = engine.admission({"namespace": namespace, "references": list(refs)})
    assert decision.error is None, decision.error
    return [(v["outcome"], v["rule"]) for v in decision.references]


def test_a_rule_per_reference_in_enforce_mode(engine):
    assert verdicts(engine, "team-a",
                    ref(), ref(tenant="other"), ref(status="revoked"), ref(status="not-approved"),
                    ref(status="deleted"), ref(status="unknown"), ref(problem="bad"),
                    ref(scheme="hf"), ref(scheme="s3"), ref(scheme="image"), ref(scheme="oci", registry_host=True),
                    ref(scheme="other")) == [
        ("allowed", "admission.approved"), ("denied", "admission.tenant"), ("denied", "admission.revoked"),
        ("denied", "admission.not-approved"), ("denied", "admission.not-approved"), ("denied", "admission.unknown"),
        ("denied", "admission.malformed"), ("allowed", "admission.approved"), ("denied", "admission.elsewhere"),
        ("denied", "admission.elsewhere"), ("allowed", "admission.approved"), ("denied", "admission.elsewhere")]


def test_warn_off_an_unknown_mode_and_a_namespace_of_no_tenant(engine):
    assert verdicts(engine, "team-warn", ref(), ref(scheme="other"), ref(status="revoked")) == [
        ("allowed", "admission.approved"), ("warned", "admission.elsewhere"), ("warned", "admission.revoked")]
    assert verdicts(engine, "team-off", ref(status="revoked")) == [("allowed", "admission.off")]
    # A mode the policy does not know enforces.
    assert verdicts(engine, "team-typo", ref(scheme="other")) == [("denied", "admission.elsewhere")]
    assert verdicts(engine, "elsewhere-ns", ref(), ref(scheme="other")) == [
        ("denied", "admission.no-tenant"), ("denied", "admission.elsewhere")]


def test_a_broken_or_missing_admission_policy_fails_closed(engine, tmp_path):
    (tmp_path / "p" / "admission.rego").write_text("package modelreg.admission\n\ndecision := {\"references\": 3}\n")
    broken = PolicyEngine.from_directory(tmp_path / "p")
    decision = broken.admission({"namespace": "team-a", "references": [ref()]})
    assert decision.error and decision.references == []
    (tmp_path / "p" / "admission.rego").unlink()
    missing = PolicyEngine.from_directory(tmp_path / "p").admission({"namespace": "team-a", "references": [ref()]})
    assert missing.error and "admission.rego is missing" in missing.error
