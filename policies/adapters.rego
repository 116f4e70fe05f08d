# The adapter gate, shared by approval.rego and promotion.rego (issue 34).
#
# Input: a document with `adapter_of` (null, or {model, version, weights_digest, manifest_digest}: the base the
# version's signed statement binds it to) and `evals` ([{suite, status, ran_on, ...}], `ran_on` null or
# {base_model, base_version, base_weights_digest, adapter_weights_digest}); see README.md.
#
# An eval result never covers a base it did not run on: every suite of an adapter that completed must have run on
# the base the adapter is bound to (its weights digest), else `adapter.eval-base`. A result that names no base
# (recorded before results named one: it ran on the adapter alone) counts for none. A failed suite is
# `eval.failed` already (evals.rego). Approvals cannot satisfy this: a gate is a gate.
package modelreg.adapters

import rego.v1

bound(doc) := object.get(doc, "adapter_of", null)

ran_on(e) := object.get(e, "ran_on", null)

ran_on_bound_base(doc, e) if {
	ran_on(e) != null
	ran_on(e).base_weights_digest == bound(doc).weights_digest
}

# Messages are built with concat: regopy's sprintf quotes a string that reached it through a function argument.
short(digest) := concat("", ["sha256:", substring(digest, 0, 12), "..."])

ran_text(e) := concat("", [ran_on(e).base_model, "@", format_int(ran_on(e).base_version, 10), " (weights ", short(ran_on(e).base_weights_digest), ")"]) if ran_on(e) != null

ran_text(e) := "no base (the adapter alone)" if ran_on(e) == null

base_text(doc) := concat("", [bound(doc).model, "@", format_int(bound(doc).version, 10), " (weights ", short(bound(doc).weights_digest), ")"])

eval_base(doc) := {u |
	bound(doc) != null
	some e in object.get(doc, "evals", [])
	e.status == "completed"
	not ran_on_bound_base(doc, e)
	u := {"code": "adapter.eval-base", "message": concat("", ["eval suite ", e.suite, " ran on ", ran_text(e), ", not on the base the adapter is bound to, ", base_text(doc), ": a result counts only for the base it ran on"]), "suite": e.suite, "capacity": null, "satisfiable": false}
}
