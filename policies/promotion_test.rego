# Tests of promotion.rego, run by tests/unit/test_policy_rego.py (every `test_` rule must be true).
package modelreg.promotion_test

import data.modelreg.promotion
import rego.v1

cfg := data.modelreg.config

move(principal, alias, state) := {
	"principal": principal, "alias": alias,
	"target": {"number": 2, "state": state}, "canary": null, "current": {"number": 1, "state": "approved"},
}

ml := {"name": "mia", "is_admin": false, "capacities": ["ml"]}

security := {"name": "sam", "is_admin": false, "capacities": ["security"]}

admin := {"name": "root", "is_admin": true, "capacities": []}

codes(doc) := {u.code | some u in promotion.unmet_of(doc, cfg)}

test_ml_moves_prod_to_an_approved_version if {
	count(promotion.unmet_of(move(ml, "prod", "approved"), cfg)) == 0
}

test_admin_moves_prod if {
	count(promotion.unmet_of(move(admin, "prod", "approved"), cfg)) == 0
}

test_security_approver_may_not_move_prod if {
	codes(move(security, "prod", "approved")) == {"promotion.not-permitted"}
}

test_other_aliases_need_ml_too if {
	codes(move(security, "canary", "approved")) == {"promotion.not-permitted"}
	count(promotion.unmet_of(move(ml, "staging", "approved"), cfg)) == 0
}

test_only_approved_versions if {
	codes(move(admin, "prod", "revoked")) == {"promotion.target-not-approved"}
	codes(move(ml, "prod", "awaiting_approval")) == {"promotion.target-not-approved"}
}

test_canary_must_be_approved if {
	doc := object.union(move(ml, "prod", "approved"), {"canary": {"number": 3, "state": "rejected"}})
	codes(doc) == {"promotion.canary-not-approved"}
}

test_alias_capacities_come_from_data if {
	cfg2 := object.union(cfg, {"promotion_capacities": {"default": ["security"], "prod": ["ml"]}})
	count(promotion.unmet_of(move(security, "canary", "approved"), cfg2)) == 0
	count(promotion.unmet_of(move(security, "prod", "approved"), cfg2)) == 1
}

test_an_alias_moves_away_from_a_revoked_version if {
	doc := object.union(move(ml, "prod", "approved"), {"current": {"number": 1, "state": "revoked"}})
	count(promotion.unmet_of(doc, cfg)) == 0
}

test_a_tokenizer_change_blocks_promotion_until_the_suites_ran_on_the_new_unit if {
	unit := {"components": {"tokenizer": "t2"}, "base": {"version": 1, "reason": "alias:prod", "components": {"tokenizer": "t1"}}, "changed": ["tokenizer"], "template_review_files": [], "suites": ["lm"]}
	doc := object.union(move(ml, "prod", "approved"), {"unit": unit, "evals": []})
	codes(doc) == {"unit.evals-required"}
	ran := object.union(doc, {"evals": [{"suite": "lm", "suite_version": "v1", "status": "completed", "metrics": {}}]})
	codes(ran) == set()
}
