# The release unit's gates, shared by approval.rego (the unit replaced: the version behind
# `evals.baseline_alias`) and promotion.rego (the version behind the alias moved).
#
# Input: a document with `unit` (null, or {components, base, changed, template_review_files, suites,
# suite_prompts, prompts_changed}; see README.md) and `evals` ([{suite, status, ...}]).
#
# When a component named in `unit.eval_components` changed from the unit replaced (with no unit replaced,
# every component is new), every eval suite that applies to the version must have completed on it: a result
# from another unit (its `components` differ from the unit's) never stands in. A suite whose eval sets render
# a prompt template that changed must have completed on it too, whatever `eval_components` holds: its cases
# send that template's text. Approvals cannot satisfy this: a gate is a gate.
package modelreg.unit

import rego.v1

eval_components(cfg) := object.get(object.get(cfg, "unit", {}), "eval_components", [])

gated_changes(doc, cfg) := [c |
	some c in doc.unit.changed
	c in eval_components(cfg)
]

completed(doc, suite) if {
	some e in doc.evals
	e.suite == suite
	e.status == "completed"
	ran_on_this_unit(doc, e)
}

# An eval record names the component digests it ran on; one recorded before records did counts for its own
# version (a version's files never change).
ran_on_this_unit(doc, e) if object.get(e, "components", null) == null

ran_on_this_unit(doc, e) if e.components == doc.unit.components

base_of(doc) := object.get(doc.unit, "base", null)

since(doc) := concat("", [" since version ", format_int(base_of(doc).version, 10), " (", base_of(doc).reason, ")"]) if base_of(doc) != null

since(doc) := " (no unit replaced)" if base_of(doc) == null

evals_required(doc, cfg) := component_evals_required(doc, cfg) | prompt_evals_required(doc, cfg)

component_evals_required(doc, cfg) := {u |
	changed := gated_changes(doc, cfg)
	count(changed) > 0
	some suite in doc.unit.suites
	not completed(doc, suite)
	u := {"code": "unit.evals-required", "message": concat("", [concat(", ", changed), " changed", since(doc), ": eval suite ", suite, " must complete on this unit"]), "suite": suite, "components": changed, "capacity": null, "satisfiable": false}
}

# The prompt templates `suite` renders that were added, edited or removed since the unit replaced.
changed_prompts_read(doc, suite) := [p |
	some p in object.get(object.get(doc.unit, "suite_prompts", {}), suite, [])
	p in object.get(doc.unit, "prompts_changed", [])
]

# With a gated component changed every suite is asked for above already: one unmet requirement per suite.
prompt_evals_required(doc, cfg) := {u |
	count(gated_changes(doc, cfg)) == 0
	some suite in doc.unit.suites
	read := changed_prompts_read(doc, suite)
	count(read) > 0
	not completed(doc, suite)
	u := {"code": "unit.evals-required", "message": concat("", ["prompt template ", concat(", ", read), " changed", since(doc), ": eval suite ", suite, " renders it and must complete on this unit"]), "suite": suite, "components": ["prompt_templates"], "prompts": read, "capacity": null, "satisfiable": false}
}
