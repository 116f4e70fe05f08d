# The eval gates, shared by approval.rego (baseline: the version behind `evals.baseline_alias`) and
# promotion.rego (baseline: the version behind the alias moved).
#
# Input: a document with `evals` ([{suite, suite_version, status, reason, metrics}]) and `baseline`
# (null or {alias, version, evals: [{suite, suite_version, metrics}]}); see README.md.
#
# Every suite that ran must have completed, every metric in `evals.thresholds[suite]` must lie within
# its {min, max}, and no metric in `evals.regressions[suite]` may be worse than the baseline's (the
# version behind `evals.baseline_alias`, same suite version) by more than `tolerance` plus
# `relative_tolerance` times the baseline's value. Approvals cannot satisfy these: a gate is a gate.
package modelreg.evals

import rego.v1

eval_config(cfg) := object.get(cfg, "evals", {})

suite_thresholds(cfg, suite) := object.get(object.get(eval_config(cfg), "thresholds", {}), suite, {})

suite_regressions(cfg, suite) := object.get(object.get(eval_config(cfg), "regressions", {}), suite, {})

# Messages are built with concat: regopy's sprintf quotes a string that reached it through a function
# argument or object.get, and the quotes break its JSON output.
text(value, _) := concat("", [": ", value]) if is_string(value)

text(value, otherwise) := otherwise if not is_string(value)

value_text(metrics, metric) := sprintf("%v", [metrics[metric]]) if is_number(metrics[metric])

value_text(metrics, metric) := "missing" if not is_number(metrics[metric])

min_text(bound) := [sprintf("at least %v", [bound.min])] if is_number(bound.min)

min_text(bound) := [] if not is_number(bound.min)

max_text(bound) := [sprintf("at most %v", [bound.max])] if is_number(bound.max)

max_text(bound) := [] if not is_number(bound.max)

bound_text(bound) := concat(" and ", array.concat(min_text(bound), max_text(bound)))

gates(doc, cfg) := not_completed(doc) | thresholds(doc, cfg)

not_completed(doc) := {u |
	some e in doc.evals
	e.status != "completed"
	u := {"code": "eval.failed", "message": concat("", ["eval suite ", e.suite, " is ", e.status, text(e.reason, "")]), "suite": e.suite, "capacity": null, "satisfiable": false}
}

below_min(value, bound) if value < bound.min

above_max(value, bound) if value > bound.max

within(metrics, metric, bound) if {
	value := metrics[metric]
	is_number(value)
	not below_min(value, bound)
	not above_max(value, bound)
}

thresholds(doc, cfg) := {u |
	some e in doc.evals
	e.status == "completed"
	thresholds := suite_thresholds(cfg, e.suite)
	bound := thresholds[metric]
	not within(e.metrics, metric, bound)
	u := {"code": "eval.threshold", "message": concat("", ["eval suite ", e.suite, ": ", metric, " is ", value_text(e.metrics, metric), ", needs ", bound_text(bound)]), "suite": e.suite, "metric": metric, "capacity": null, "satisfiable": false}
}

worse_by(value, base, rule) := base - value if rule.better == "higher"

worse_by(value, base, rule) := value - base if rule.better == "lower"

allowed_worse(base, rule) := object.get(rule, "tolerance", 0) + (object.get(rule, "relative_tolerance", 0) * abs(base))

baseline_metrics(doc, e) := b.metrics if {
	some b in doc.baseline.evals
	b.suite == e.suite
	b.suite_version == e.suite_version
}

regressed(e, metric, rule, base_metrics) if {
	base := base_metrics[metric]
	not is_number(e.metrics[metric])
	is_number(base)
}

regressed(e, metric, rule, base_metrics) if {
	worse_by(e.metrics[metric], base_metrics[metric], rule) > allowed_worse(base_metrics[metric], rule)
}

regressions(doc, cfg) := {u |
	some e in doc.evals
	e.status == "completed"
	base_metrics := baseline_metrics(doc, e)
	rules := suite_regressions(cfg, e.suite)
	rule := rules[metric]
	regressed(e, metric, rule, base_metrics)
	u := {"code": "eval.regression", "message": concat("", ["eval suite ", e.suite, ": ", metric, " is ", value_text(e.metrics, metric), ", worse than ", sprintf("%v", [base_metrics[metric]]), " on ", doc.baseline.alias, sprintf(" (version %v)", [doc.baseline.version]), " by more than the tolerance"]), "suite": e.suite, "metric": metric, "capacity": null, "satisfiable": false}
}
