# Tests of unit.rego, run by tests/unit/test_policy_rego.py (every `test_` rule must be true).
package modelreg.unit_test

import data.modelreg.unit
import rego.v1

cfg := {"unit": {"eval_components": ["weights", "tokenizer", "chat_templates"]}}

doc(changed, base, evals) := {"unit": {"components": {}, "base": base, "changed": changed, "template_review_files": [], "suites": ["lm"]}, "evals": evals}

prod := {"version": 3, "reason": "alias:prod", "components": {}}

done := [{"suite": "lm", "status": "completed"}]

codes(d) := {u.code | some u in unit.evals_required(d, cfg)}

test_a_tokenizer_change_needs_the_suites_on_the_new_unit if {
	us := unit.evals_required(doc(["tokenizer"], prod, []), cfg)
	{u.code | some u in us} == {"unit.evals-required"}
	every u in us {
		u.satisfiable == false
		u.suite == "lm"
		contains(u.message, "tokenizer changed since version 3 (alias:prod)")
	}
}

test_a_pending_suite_is_not_completed if {
	codes(doc(["tokenizer"], prod, [{"suite": "lm", "status": "pending"}])) == {"unit.evals-required"}
}

test_a_result_that_ran_on_another_unit_does_not_count if {
	d := {"unit": {"components": {"weights": "a"}, "base": prod, "changed": ["weights"], "template_review_files": [], "suites": ["lm"]}, "evals": [{"suite": "lm", "status": "completed", "components": {"weights": "b"}}]}
	codes(d) == {"unit.evals-required"}
}

test_a_result_that_ran_on_this_unit_counts if {
	d := {"unit": {"components": {"weights": "a"}, "base": prod, "changed": ["weights"], "template_review_files": [], "suites": ["lm"]}, "evals": [{"suite": "lm", "status": "completed", "components": {"weights": "a"}}]}
	codes(d) == set()
}

test_completed_suites_satisfy_it if {
	codes(doc(["tokenizer", "weights"], prod, done)) == set()
}

test_an_ungated_change_needs_nothing if {
	codes(doc(["other", "config"], prod, [])) == set()
}

test_with_no_unit_replaced_every_gated_component_is_new if {
	us := unit.evals_required(doc(["weights"], null, []), cfg)
	every u in us { contains(u.message, "(no unit replaced)") }
	count(us) == 1
}

test_no_suites_apply_nothing_to_run if {
	d := {"unit": {"components": {}, "base": prod, "changed": ["weights"], "template_review_files": [], "suites": []}, "evals": []}
	codes(d) == set()
}

test_no_unit_no_gate if {
	codes({"unit": null, "evals": []}) == set()
}

# A prompt template change asks for the suites that render it, even where prompt_templates is not gated.
prompt_doc(read, changed, evals) := {"unit": {"components": {}, "base": prod, "changed": changed, "template_review_files": [], "suites": ["chat", "lm"], "suite_prompts": {"chat": read, "lm": []}, "prompts_changed": ["support"]}, "evals": evals}

test_a_changed_prompt_template_needs_the_suites_that_render_it if {
	us := unit.evals_required(prompt_doc(["faq", "support"], ["prompt_templates"], []), cfg)
	count(us) == 1
	every u in us {
		u.suite == "chat"
		u.prompts == ["support"]
		u.satisfiable == false
		contains(u.message, "prompt template support changed since version 3 (alias:prod): eval suite chat renders it")
	}
}

test_a_suite_that_renders_the_changed_prompt_template_completed_on_this_unit_satisfies_it if {
	codes(prompt_doc(["support"], ["prompt_templates"], [{"suite": "chat", "status": "completed"}])) == set()
}

test_a_suite_that_renders_other_prompt_templates_is_not_asked_for if {
	codes(prompt_doc(["faq"], ["prompt_templates"], [])) == set()
}

test_a_gated_change_asks_for_every_suite_once if {
	us := unit.evals_required(prompt_doc(["support"], ["prompt_templates", "tokenizer"], []), cfg)
	{u.suite | some u in us} == {"chat", "lm"}
	count(us) == 2
}
