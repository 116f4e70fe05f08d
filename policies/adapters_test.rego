# Tests of adapters.rego, run by tests/unit/test_policy_rego.py (every `test_` rule must be true).
package modelreg.adapters_test

import data.modelreg.adapters
import data.modelreg.approval
import data.modelreg.promotion
import rego.v1

bound := {"model": "acme/llm", "version": 1, "weights_digest": "a000000000000000000000000000000000000000000000000000000000000000", "manifest_digest": "m"}

on(version, digest) := {"base_model": "acme/llm", "base_version": version, "base_weights_digest": digest, "adapter_weights_digest": "d"}

result(ran, status) := {"suite": "lm", "status": status, "reason": null, "metrics": {}, "ran_on": ran}

doc(adapter_of, evals) := {"adapter_of": adapter_of, "evals": evals}

codes(d) := {u.code | some u in adapters.eval_base(d)}

test_a_result_that_ran_on_the_bound_base_counts if {
	codes(doc(bound, [result(on(1, bound.weights_digest), "completed")])) == set()
}

test_a_result_that_ran_on_another_base_is_unmet_and_unsatisfiable if {
	us := adapters.eval_base(doc(bound, [result(on(2, "bbbbbbbbbbbbbbbb"), "completed")]))
	count(us) == 1
	every u in us {
		u.code == "adapter.eval-base"
		u.suite == "lm"
		u.satisfiable == false
		contains(u.message, "eval suite lm ran on acme/llm@2 (weights sha256:bbbbbbbbbbbb...), not on the base the adapter is bound to, acme/llm@1 (weights sha256:a00000000000...)")
	}
}

test_a_result_that_names_no_base_counts_for_none if {
	us := adapters.eval_base(doc(bound, [result(null, "completed")]))
	{u.code | some u in us} == {"adapter.eval-base"}
	every u in us { contains(u.message, "ran on no base (the adapter alone)") }
}

test_a_result_without_the_field_counts_for_none if {
	codes(doc(bound, [{"suite": "lm", "status": "completed"}])) == {"adapter.eval-base"}
}

test_a_failed_suite_is_left_to_the_eval_gate if {
	codes(doc(bound, [result(null, "failed")])) == set()
}

test_a_version_that_is_no_adapter_is_not_judged if {
	codes(doc(null, [result(null, "completed")])) == set()
	codes({"evals": [result(null, "completed")]}) == set()
}

test_the_approval_policy_applies_the_gate if {
	d := {"adapter_of": bound, "evals": [result(on(2, "bbbbbbbbbbbbbbbb"), "completed")], "approvals": [], "submitter": "sam", "scans": [], "unscanned": [], "license": {"id": "mit", "findings": []}, "unit": null, "baseline": null}
	"adapter.eval-base" in {u.code | some u in approval.unmet_of(d, data.modelreg.config)}
}

test_the_promotion_policy_applies_the_gate if {
	d := {"principal": {"name": "root", "is_admin": true, "capacities": []}, "alias": "prod", "target": {"number": 2, "state": "approved"}, "canary": null, "current": null, "evals": [result(null, "completed")], "baseline": null, "unit": null, "adapter_of": bound}
	{u.code | some u in promotion.unmet_of(d, data.modelreg.config)} == {"adapter.eval-base"}
}
