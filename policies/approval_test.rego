# Tests of approval.rego, run by tests/unit/test_policy_rego.py (every `test_` rule must be true).
# Documents are passed to the policy's functions (rego-cpp 1.5.2 crashes on `with input as`).
package modelreg.approval_test

import data.modelreg.approval
import rego.v1

cfg := data.modelreg.config

clean := {
	"version": {"tenant": "acme", "model": "tiny", "number": 1, "state": "awaiting_approval"},
	"source": {"kind": "hf", "repo": "org/tiny", "revision": "abc"},
	"facts": null,
	"files": [{"path": "model.safetensors", "size": 10, "sha256": "aa"}],
	"scans": [{"path": "model.safetensors", "verdict": "safe", "findings": []}],
	"unscanned": [],
	"license": {"id": "apache-2.0", "findings": []},
	"evals": [],
	"baseline": null,
	"approvals": [],
	"submitter": "alice",
}

approve(who, capacity, files) := {"principal": who, "capacity": capacity, "decision": "approve", "files": files, "at": "2026-01-01T00:00:00+00:00"}

both := [approve("sam", "security", []), approve("mia", "ml", [])]

codes(doc) := {u.code | some u in approval.unmet_of(doc, cfg)}

with_approvals(doc, list) := object.union(doc, {"approvals": list})

python_file := object.union(clean, {
	"files": [{"path": "model.safetensors", "size": 10, "sha256": "aa"}, {"path": "modeling.py", "size": 5, "sha256": "bb"}],
	"scans": [
		{"path": "model.safetensors", "verdict": "safe", "findings": []},
		{"path": "modeling.py", "verdict": "suspicious", "findings": [{"rule_id": "remote-code.python-file", "severity": "suspicious"}]},
	],
})

test_clean_model_needs_security_and_ml if {
	codes(clean) == {"approval.missing"}
	count(approval.unmet_of(clean, cfg)) == 2
}

test_clean_model_with_both_approvals_has_nothing_unmet if {
	count(approval.unmet_of(with_approvals(clean, both), cfg)) == 0
}

test_self_approval_does_not_count if {
	doc := object.union(with_approvals(clean, [approve("alice", "security", []), approve("mia", "ml", [])]), {"submitter": "alice"})
	some u in approval.unmet_of(doc, cfg)
	u.code == "approval.missing"
	u.capacity == "security"
}

test_one_person_counts_once if {
	doc := with_approvals(clean, [approve("sam", "security", []), approve("sam", "ml", [])])
	some u in approval.unmet_of(doc, cfg)
	u.code == "approval.missing"
	u.capacity == "ml"
}

test_a_later_reject_by_an_approver_still_rejects if {
	doc := with_approvals(clean, array.concat(both, [{"principal": "sam", "capacity": "security", "decision": "reject", "files": [], "at": "2026-01-02T00:00:00+00:00"}]))
	codes(doc) == {"rejected"}
}

test_license_off_the_allow_list_needs_legal if {
	doc := object.union(with_approvals(clean, both), {"license": {"id": "other:custom", "findings": []}})
	codes(doc) == {"legal.license"}
	count(approval.unmet_of(with_approvals(doc, array.concat(both, [approve("lee", "legal", [])])), cfg)) == 0
}

test_a_license_conflict_needs_legal if {
	conflict := {"source": "conflict", "raw": null, "raw_length": null, "normalized": null, "problem": null, "detail": {"declared": "Apache-2.0", "card": "CC-BY-NC-4.0"}}
	doc := object.union(with_approvals(clean, both), {"license": {"id": "apache-2.0", "findings": [conflict]}})
	codes(doc) == {"legal.license-conflict"}
}

test_an_unmatched_license_file_needs_legal_whatever_was_declared if {
	edited := {"source": "license_file:LICENSE", "raw": "GNU GENERAL PUBLIC LICENSE", "raw_length": null, "normalized": null, "problem": "matches no SPDX text (closest GPL-3.0-only at 0.81)", "detail": {"closest": "GPL-3.0-only", "similarity": 0.81}}
	doc := object.union(with_approvals(clean, both), {"license": {"id": "apache-2.0", "findings": [edited]}})
	codes(doc) == {"legal.license-file"}
	[u] := [u | some u in approval.unmet_of(doc, cfg)]
	u.path == "LICENSE"
	count(approval.unmet_of(with_approvals(doc, array.concat(both, [approve("lee", "legal", [])])), cfg)) == 0
}

test_a_matched_license_file_needs_nothing_more if {
	matched := {"source": "license_file:LICENSE", "raw": "Apache License", "raw_length": null, "normalized": "Apache-2.0", "problem": null, "detail": {"closest": "Apache-2.0", "similarity": 1.0}}
	doc := object.union(with_approvals(clean, both), {"license": {"id": "apache-2.0", "findings": [matched]}})
	count(approval.unmet_of(doc, cfg)) == 0
}

test_unknown_license_needs_legal if {
	doc := object.union(with_approvals(clean, both), {"license": {"id": null, "findings": []}})
	codes(doc) == {"legal.license"}
}

test_remote_code_needs_a_security_approval_naming_the_file if {
	codes(python_file) == {"approval.missing", "security.file-review", "security.remote-code"}
	# A security approval that does not name the suspicious file clears remote code, not the file.
	codes(with_approvals(python_file, both)) == {"security.file-review"}
	named := [approve("sam", "security", ["modeling.py"]), approve("mia", "ml", [])]
	count(approval.unmet_of(with_approvals(python_file, named), cfg)) == 0
}

test_auto_map_is_remote_code if {
	doc := object.union(clean, {"scans": [{"path": "model.safetensors", "verdict": "safe", "findings": [{"rule_id": "remote-code.auto-map", "severity": "suspicious"}]}]})
	"security.remote-code" in codes(doc)
}

test_unsafe_file_is_never_satisfiable if {
	doc := object.union(with_approvals(clean, both), {"scans": [{"path": "model.safetensors", "verdict": "unsafe", "findings": []}]})
	some u in approval.unmet_of(doc, cfg)
	u.code == "scan.unsafe"
	u.satisfiable == false
}

test_file_without_scan_is_unmet if {
	doc := object.union(with_approvals(clean, both), {"scans": [], "unscanned": ["model.safetensors"]})
	codes(doc) == {"scan.missing"}
}

test_an_input_without_its_unscanned_list_is_unmet if {
	doc := json.remove(with_approvals(clean, both), ["unscanned"])
	codes(doc) == {"scan.missing"}
}

test_reject_rejects if {
	doc := with_approvals(clean, array.concat(both, [{"principal": "rex", "capacity": "ml", "decision": "reject", "files": [], "at": "2026-01-01T00:00:00+00:00"}]))
	codes(doc) == {"rejected"}
	count(approval.rejections(doc)) == 1
}

test_required_capacities_come_from_data if {
	cfg2 := object.union(cfg, {"required_capacities": ["ml"]})
	count(approval.unmet_of(with_approvals(clean, [approve("mia", "ml", [])]), cfg2)) == 0
}

# --- the release unit ------------------------------------------------------------------------------

template_changed := object.union(clean, {"unit": {
	"components": {"weights": "w", "chat_templates": "t2"},
	"base": {"version": 3, "reason": "alias:prod", "components": {"weights": "w", "chat_templates": "t1"}},
	"changed": ["chat_templates"],
	"template_review_files": ["tokenizer_config.json"],
	"suites": [],
}})

test_a_changed_chat_template_needs_a_security_approval_naming_its_file if {
	codes(with_approvals(template_changed, both)) == {"unit.template-review"}
	some u in approval.unmet_of(with_approvals(template_changed, both), cfg)
	u.path == "tokenizer_config.json"
	u.capacity == "security"
	u.satisfiable == true
	contains(u.message, "since version 3 (alias:prod)")
	codes(with_approvals(template_changed, [approve("sam", "security", ["tokenizer_config.json"]), approve("mia", "ml", [])])) == set()
}

test_an_ml_approval_naming_the_template_file_does_not_review_it if {
	codes(with_approvals(template_changed, [approve("sam", "security", []), approve("mia", "ml", ["tokenizer_config.json"])])) == {"unit.template-review"}
}

test_the_submitter_cannot_review_their_own_template if {
	codes(with_approvals(template_changed, [approve("alice", "security", ["tokenizer_config.json"]), approve("mia", "ml", [])])) == {"unit.template-review", "approval.missing"}
}

test_a_tokenizer_change_needs_the_suites_that_apply_on_the_new_unit if {
	doc := object.union(template_changed, {"unit": object.union(template_changed.unit, {"changed": ["tokenizer"], "template_review_files": [], "suites": ["lm"]})})
	codes(with_approvals(doc, both)) == {"unit.evals-required"}
	done := object.union(doc, {"evals": [{"suite": "lm", "suite_version": "v1", "runner": "r", "runner_version": "1", "status": "completed", "reason": null, "metrics": {}}]})
	codes(with_approvals(done, both)) == set()
}
