# The approval policy: what a version still needs before it may become `approved`.
#
# Input: the document built by registry/domain/policy_input.py (see README.md).
# Output: `decision`, an object: `unmet`, a set of {code, message, capacity, satisfiable, path?},
# and `rejected`, a boolean. The version is approved when `unmet` is empty. (One object, because
# rego-cpp reports a rule whose value is `false` as undefined.) Written as functions of (doc, cfg) so the tests
# call them with their own documents (rego-cpp 1.5.2 crashes on `with input as`).
package modelreg.approval

import data.modelreg.adapters
import data.modelreg.evals
import data.modelreg.unit
import rego.v1

decision := {
	"unmet": unmet_of(input, data.modelreg.config),
	"rejected": count(rejections(input)) > 0,
}

# Nobody approves their own submission, and one person counts once: only a principal's first
# decision (approvals are sorted by time) can approve. Any reject by someone else counts.
counted(doc) := {a |
	a := doc.approvals[i]
	a.principal != doc.submitter
	not decided_before(doc, i, a.principal)
}

decided_before(doc, i, principal) if {
	b := doc.approvals[j]
	j < i
	b.principal == principal
}

approved_as(doc, capacity) if {
	some a in counted(doc)
	a.decision == "approve"
	a.capacity == capacity
}

# A security approval that names the file.
approved_file(doc, cfg, path) if {
	some a in counted(doc)
	a.decision == "approve"
	a.capacity == cfg.security_capacity
	path in a.files
}

unmet_of(doc, cfg) := (((((((((((((rejections(doc) | unsafe_files(doc)) | unscanned_files(doc)) | suspicious_files(doc, cfg)) | remote_code(doc, cfg)) | license(doc, cfg)) | license_conflict(doc, cfg)) | license_file_unmatched(doc, cfg)) | capacities(doc, cfg)) | evals.gates(doc, cfg)) | evals.regressions(doc, cfg)) | template_review(doc, cfg)) | unit.evals_required(doc, cfg)) | adapters.eval_base(doc))

rejections(doc) := {u |
	some a in doc.approvals
	a.principal != doc.submitter
	a.decision == "reject"
	u := {"code": "rejected", "message": sprintf("rejected by %s (%s)", [a.principal, a.capacity]), "capacity": null, "satisfiable": false}
}

# Unsafe and failed scans are never satisfiable by approvals.
unsafe_files(doc) := {u |
	some s in doc.scans
	s.verdict in {"unsafe", "error"}
	u := {"code": sprintf("scan.%s", [s.verdict]), "message": sprintf("%s: scan verdict %s", [s.path, s.verdict]), "path": s.path, "capacity": null, "satisfiable": false}
}

# The files without a scan verdict come worked out in the input (`unscanned`): rego-cpp builds sets and
# looks up keys in time linear in their size, so computing them here was quadratic in the file count.
unscanned_files(doc) := {u |
	some path in doc.unscanned
	u := {"code": "scan.missing", "message": sprintf("%s has no scan verdict", [path]), "path": path, "capacity": null, "satisfiable": false}
} | {u |
	not is_array(doc.unscanned)
	u := {"code": "scan.missing", "message": "the input does not say which files have no scan verdict", "capacity": null, "satisfiable": false}
}

suspicious_files(doc, cfg) := {u |
	some s in doc.scans
	s.verdict == "suspicious"
	not approved_file(doc, cfg, s.path)
	u := {"code": "security.file-review", "message": sprintf("%s is suspicious: a %s approval must name it", [s.path, cfg.security_capacity]), "path": s.path, "capacity": cfg.security_capacity, "satisfiable": true}
}

remote_code_rules(doc, cfg) := {f.rule_id |
	some s in doc.scans
	some f in s.findings
	f.rule_id in cfg.remote_code_rules
}

remote_code(doc, cfg) := {u |
	rules := remote_code_rules(doc, cfg)
	count(rules) > 0
	not approved_as(doc, cfg.security_capacity)
	u := {"code": "security.remote-code", "message": sprintf("remote code needs a %s approval", [cfg.security_capacity]), "rules": sort(rules), "capacity": cfg.security_capacity, "satisfiable": true}
}

license_allowed(doc, cfg) if doc.license.id in cfg.license_allow_list

license(doc, cfg) := {u |
	not license_allowed(doc, cfg)
	not approved_as(doc, cfg.license_capacity)
	u := {"code": "legal.license", "message": sprintf("license %v is not on the allow-list: needs a %s approval", [doc.license.id, cfg.license_capacity]), "capacity": cfg.license_capacity, "satisfiable": true}
}

# The submitter declared one license and the upstream's card, README or LICENSE file says another.
license_conflicts(doc) := {f.detail |
	some f in doc.license.findings
	f.source == "conflict"
}

license_conflict(doc, cfg) := {u |
	conflicts := license_conflicts(doc)
	count(conflicts) > 0
	not approved_as(doc, cfg.license_capacity)
	u := {"code": "legal.license-conflict", "message": sprintf("the licenses found disagree: needs a %s approval", [cfg.license_capacity]), "capacity": cfg.license_capacity, "satisfiable": true}
}

# A LICENSE file that matches no shipped text (an edited known license, or another license altogether):
# what it says is unknown, whatever the declaration or the card says, so legal reads it.
license_file_unmatched(doc, cfg) := {u |
	some f in doc.license.findings
	startswith(f.source, "license_file:")
	f.normalized == null
	not approved_as(doc, cfg.license_capacity)
	path := substring(f.source, count("license_file:"), -1)
	u := {"code": "legal.license-file", "message": sprintf("%s matches no known license text (closest %v at %v): needs a %s approval", [path, f.detail.closest, f.detail.similarity, cfg.license_capacity]), "path": path, "capacity": cfg.license_capacity, "satisfiable": true}
}

capacities(doc, cfg) := {u |
	some c in cfg.required_capacities
	not approved_as(doc, c)
	u := {"code": "approval.missing", "message": sprintf("needs an approval by %s", [c]), "capacity": c, "satisfiable": true}
}

# A chat or prompt template that changed from the unit replaced shapes every prompt the model sees: a
# security approval must name each file holding one (after reading the rendered diff).
template_review(doc, cfg) := {u |
	some path in doc.unit.template_review_files
	not approved_file(doc, cfg, path)
	u := {"code": "unit.template-review", "message": concat("", [path, ": a chat or prompt template changed", unit.since(doc), ": a ", cfg.security_capacity, " approval must name it"]), "path": path, "capacity": cfg.security_capacity, "satisfiable": true}
}
