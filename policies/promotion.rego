# The promotion policy: who may point which alias at which version.
#
# Input: {principal: {name, is_admin, capacities}, alias, target: {number, state},
#         canary: null | {number, state}, current: null | {number, state}, evals, baseline} (see README.md).
# Output: `decision`, an object whose `unmet` is a set of {code, message}; the move is allowed when
# it is empty.
# Admins move any alias; otherwise the principal needs one of the capacities data.json lists for the
# alias (`promotion_capacities[alias]`, else `promotion_capacities.default`). Whoever moves it, the
# target (and a canary) must be an approved version: not pending, rejected or revoked; an adapter's evals must have
# run on the base it is bound to (adapters.rego).
package modelreg.promotion

import data.modelreg.adapters
import data.modelreg.evals
import data.modelreg.unit
import rego.v1

decision := {"unmet": unmet_of(input, data.modelreg.config)}

alias_capacities(alias, cfg) := cfg.promotion_capacities[alias]

alias_capacities(alias, cfg) := cfg.promotion_capacities["default"] if not cfg.promotion_capacities[alias]

may_move(doc, cfg) if doc.principal.is_admin == true

may_move(doc, cfg) if {
	some c in doc.principal.capacities
	c in alias_capacities(doc.alias, cfg)
}

unmet_of(doc, cfg) := ((((not_permitted(doc, cfg) | not_approved(doc.target, "target")) | not_approved(doc.canary, "canary")) | regressions(doc, cfg)) | unit.evals_required(doc, cfg)) | adapters.eval_base(doc)

# The target's evals may not regress against the version the alias points at now (the same rule as
# approval's, whose baseline is `evals.baseline_alias`; here it is the alias moved).
regressions(doc, cfg) := evals.regressions(doc, cfg)

not_permitted(doc, cfg) := {u |
	not may_move(doc, cfg)
	u := {"code": "promotion.not-permitted", "message": sprintf("%s may not move alias %s: needs admin or one of %v", [doc.principal.name, doc.alias, alias_capacities(doc.alias, cfg)])}
}

# Given the version itself, not the document and a key: rego-cpp 1.5.2 ranges `doc[role]` over every
# key of the document inside a comprehension, which judged `current` too (and refused to move an alias
# away from a revoked version). The version the alias points at now is never judged. The code is built
# with concat: its sprintf quotes a string that came in as a function argument ("promotion."target"...").
not_approved(v, role) := {u |
	v != null
	v.state != "approved"
	u := {"code": concat("", ["promotion.", role, "-not-approved"]), "message": sprintf("version %v is %s, not approved", [v.number, v.state])}
}
