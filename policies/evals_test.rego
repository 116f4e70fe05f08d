# Tests of evals.rego, run by tests/unit/test_policy_rego.py (every `test_` rule must be true).
package modelreg.evals_test

import data.modelreg.evals
import rego.v1

cfg := {"evals": {
	"thresholds": {"lm": {"factual.accuracy": {"min": 0.8}, "latency.ttft_ms_p95": {"max": 500}}},
	"regressions": {"lm": {
		"factual.accuracy": {"better": "higher", "tolerance": 0.02},
		"lm.perplexity.en": {"better": "lower", "relative_tolerance": 0.1},
	}},
}}

good := {"factual.accuracy": 0.9, "latency.ttft_ms_p95": 100, "lm.perplexity.en": 10}

run(metrics) := {"suite": "lm", "suite_version": "v1", "runner": "openai", "runner_version": "1.0.0", "status": "completed", "reason": null, "metrics": metrics}

doc(metrics, baseline) := {"evals": [run(metrics)], "baseline": baseline}

prod(metrics) := {"alias": "prod", "version": 3, "evals": [{"suite": "lm", "suite_version": "v1", "metrics": metrics}]}

codes(d) := {u.code | some u in (evals.gates(d, cfg) | evals.regressions(d, cfg))}

metrics_of(d) := {u.metric | some u in (evals.gates(d, cfg) | evals.regressions(d, cfg))}

test_within_thresholds_and_no_baseline_passes if {
	codes(doc(good, null)) == set()
}

test_no_evals_pass if {
	codes({"evals": [], "baseline": null}) == set()
}

test_failed_run_is_unmet_and_unsatisfiable if {
	d := {"evals": [object.union(run({}), {"status": "failed", "reason": "timeout"})], "baseline": null}
	codes(d) == {"eval.failed"}
	every u in evals.gates(d, cfg) { u.satisfiable == false }
}

test_below_min_is_unmet if {
	d := doc(object.union(good, {"factual.accuracy": 0.5}), null)
	codes(d) == {"eval.threshold"}
	metrics_of(d) == {"factual.accuracy"}
}

test_above_max_is_unmet if {
	metrics_of(doc(object.union(good, {"latency.ttft_ms_p95": 501}), null)) == {"latency.ttft_ms_p95"}
}

test_bounds_are_inclusive if {
	codes(doc(object.union(good, {"factual.accuracy": 0.8, "latency.ttft_ms_p95": 500}), null)) == set()
}

test_missing_metric_is_unmet if {
	metrics_of(doc({"latency.ttft_ms_p95": 1, "lm.perplexity.en": 1}, null)) == {"factual.accuracy"}
}

test_other_suites_have_no_thresholds if {
	d := {"evals": [object.union(run({}), {"suite": "other"})], "baseline": null}
	codes(d) == set()
}

test_regression_beyond_tolerance_is_unmet if {
	d := doc(object.union(good, {"factual.accuracy": 0.87}), prod(good))
	codes(d) == {"eval.regression"}
	metrics_of(d) == {"factual.accuracy"}
}

test_regression_within_tolerance_passes if {
	codes(doc(object.union(good, {"factual.accuracy": 0.885}), prod(good))) == set()
}

test_lower_is_better_with_relative_tolerance if {
	codes(doc(object.union(good, {"lm.perplexity.en": 10.9}), prod(good))) == set()
	metrics_of(doc(object.union(good, {"lm.perplexity.en": 11.1}), prod(good))) == {"lm.perplexity.en"}
}

test_improvement_is_no_regression if {
	codes(doc(object.union(good, {"factual.accuracy": 0.99, "lm.perplexity.en": 2}), prod(good))) == set()
}

test_another_suite_version_is_not_compared if {
	base := {"alias": "prod", "version": 3, "evals": [{"suite": "lm", "suite_version": "v0", "metrics": good}]}
	codes(doc(object.union(good, {"factual.accuracy": 0.81}), base)) == set()
}

test_metric_the_baseline_had_but_this_lacks_regresses if {
	m := {"factual.accuracy": 0.9, "latency.ttft_ms_p95": 100}
	metrics_of(doc(m, prod(good))) == {"lm.perplexity.en"}
}

test_messages_name_the_value_and_the_bound if {
	some u in evals.gates(doc(object.union(good, {"factual.accuracy": 0.5}), null), cfg)
	u.message == "eval suite lm: factual.accuracy is 0.5, needs at least 0.8"
	some v in evals.gates(doc({"latency.ttft_ms_p95": 1, "lm.perplexity.en": 1}, null), cfg)
	v.message == "eval suite lm: factual.accuracy is missing, needs at least 0.8"
}

test_failed_message_names_the_reason if {
	d := {"evals": [object.union(run({}), {"status": "failed", "reason": "timeout"})], "baseline": null}
	some u in evals.gates(d, cfg)
	u.message == "eval suite lm is failed: timeout"
}

test_regression_message_names_the_baseline if {
	some u in evals.regressions(doc(object.union(good, {"factual.accuracy": 0.87}), prod(good)), cfg)
	u.message == "eval suite lm: factual.accuracy is 0.87, worse than 0.9 on prod (version 3) by more than the tolerance"
}
