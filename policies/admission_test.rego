# Tests of admission.rego, run by tests/unit/test_policy_rego.py (every `test_` rule must be true).
package modelreg.admission_test

import data.modelreg.admission
import rego.v1

cfg := {"admission": {"namespaces": {
	"team-a": {"tenant": "acme", "mode": "enforce", "hf": "registry", "s3": "serve-s3"},
	"team-warn": {"tenant": "acme", "mode": "warn"},
	"team-off": {"tenant": "acme", "mode": "off"},
	"team-typo": {"tenant": "acme", "mode": "enforcing"},
}}}

ref(scheme, tenant, status) := {
	"uri": "u", "kind": "storage-uri", "path": "/spec/x", "scheme": scheme, "registry_host": false,
	"model": concat("/", [tenant, "llm"]), "tenant": tenant, "problem": null, "status": status,
}

rules(ns, refs) := [[v.outcome, v.rule] | some v in admission.decision_of({"namespace": ns, "references": refs}, cfg).references]

test_a_served_version_of_the_namespaces_tenant_is_allowed if {
	rules("team-a", [ref("modelreg", "acme", "served"), ref("hf", "acme", "served"), ref("s3", "acme", "served")]) == [
		["allowed", "admission.approved"], ["allowed", "admission.approved"], ["allowed", "admission.approved"]]
}

test_each_failed_check_names_its_rule if {
	rules("team-a", [ref("modelreg", "other", "served"), ref("modelreg", "acme", "revoked"),
		ref("modelreg", "acme", "not-approved"), ref("modelreg", "acme", "unknown"),
		object.union(ref("modelreg", "acme", null), {"problem": "bad"})]) == [
		["denied", "admission.tenant"], ["denied", "admission.revoked"], ["denied", "admission.not-approved"],
		["denied", "admission.unknown"], ["denied", "admission.malformed"]]
}

test_elsewhere_is_denied_in_enforce_and_warned_in_warn if {
	rules("team-a", [ref("other", "x", null), ref("image", "acme", "served")]) == [
		["denied", "admission.elsewhere"], ["denied", "admission.elsewhere"]]
	rules("team-warn", [ref("other", "x", null), ref("hf", "acme", "served")]) == [
		["warned", "admission.elsewhere"], ["warned", "admission.elsewhere"]]
}

test_the_registrys_own_image_host_is_the_registry if {
	rules("team-a", [object.union(ref("oci", "acme", "served"), {"registry_host": true})]) == [
		["allowed", "admission.approved"]]
}

test_off_allows_and_an_unknown_mode_or_namespace_enforces if {
	rules("team-off", [ref("modelreg", "acme", "revoked")]) == [["allowed", "admission.off"]]
	rules("team-typo", [ref("other", "x", null)]) == [["denied", "admission.elsewhere"]]
	rules("team-none", [ref("modelreg", "acme", "served")]) == [["denied", "admission.no-tenant"]]
}
