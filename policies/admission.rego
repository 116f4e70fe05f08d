# Admission: may a pod or KServe resource in a namespace start on the model references it carries?
#
# Input (built by registry/services/admission.py): {namespace, references: [{uri, kind, path, scheme,
# registry_host, model, tenant, problem, status, reason}]}, where `status` is what the registry found for a
# reference of its own shape: "served" (approved, sealed, unrevoked), "revoked", "not-approved", "deleted" or
# "unknown" (no such model, alias, version or digest).
#
# Policy data per namespace, `data.modelreg.config.admission.namespaces[ns]` (else `.default`):
#   tenant: the tenant whose models the namespace may serve (none: nothing of the registry is admitted)
#   mode:   "enforce" (deny), "warn" (admit, with the reason as a warning) or "off" (admit unchecked);
#           anything else enforces
#   hf:     "registry" when the namespace's storage initializer reads hf:// through the registry's /hf
#   s3:     "serve-s3" when its s3:// URIs are a node's `modelreg serve-s3`
# A reference to the registry must name a served version of the namespace's tenant; any other reference is
# "elsewhere", allowed only by the mode. The decision gives every reference an outcome ("allowed", "denied",
# "warned") and the rule that decided it; the service words the reason.
package modelreg.admission

import rego.v1

decision := decision_of(input, data.modelreg.config)

decision_of(doc, cfg) := {
	"tenant": tenant_of(doc, cfg),
	"mode": mode_of(doc, cfg),
	"references": [verdict(r, doc, cfg) | some r in doc.references],
}

namespace_config(doc, cfg) := object.get(
	object.get(object.get(cfg, "admission", {}), "namespaces", {}), doc.namespace,
	object.get(object.get(cfg, "admission", {}), "default", {}),
)

tenant_of(doc, cfg) := object.get(namespace_config(doc, cfg), "tenant", null)

written_mode(doc, cfg) := object.get(namespace_config(doc, cfg), "mode", "enforce")

mode_of(doc, cfg) := written_mode(doc, cfg) if written_mode(doc, cfg) in {"enforce", "warn", "off"}

mode_of(doc, cfg) := "enforce" if not written_mode(doc, cfg) in {"enforce", "warn", "off"}

to_registry(r, doc, cfg) if r.scheme == "modelreg"

to_registry(r, doc, cfg) if {
	r.scheme in {"oci", "image"}
	r.registry_host == true
}

to_registry(r, doc, cfg) if {
	r.scheme == "hf"
	object.get(namespace_config(doc, cfg), "hf", "hub") == "registry"
}

to_registry(r, doc, cfg) if {
	r.scheme == "s3"
	object.get(namespace_config(doc, cfg), "s3", "elsewhere") == "serve-s3"
}

# The checks a reference to the registry must pass, in order; the first that fails names the rule.
failed(r, doc, cfg) := [check[0] |
	some check in [
		["admission.malformed", r.problem != null],
		["admission.no-tenant", tenant_of(doc, cfg) == null],
		["admission.tenant", r.tenant != tenant_of(doc, cfg)],
		["admission.unknown", r.status == "unknown"],
		["admission.revoked", r.status == "revoked"],
		["admission.not-approved", r.status != "served"],
	]
	check[1] == true
]

refused(doc, cfg) := "denied" if mode_of(doc, cfg) == "enforce"

refused(doc, cfg) := "warned" if mode_of(doc, cfg) == "warn"

verdict(r, doc, cfg) := {"outcome": "allowed", "rule": "admission.off"} if mode_of(doc, cfg) == "off"

verdict(r, doc, cfg) := {"outcome": refused(doc, cfg), "rule": failed(r, doc, cfg)[0]} if {
	mode_of(doc, cfg) != "off"
	to_registry(r, doc, cfg)
	count(failed(r, doc, cfg)) > 0
}

verdict(r, doc, cfg) := {"outcome": "allowed", "rule": "admission.approved"} if {
	mode_of(doc, cfg) != "off"
	to_registry(r, doc, cfg)
	count(failed(r, doc, cfg)) == 0
}

verdict(r, doc, cfg) := {"outcome": refused(doc, cfg), "rule": "admission.elsewhere"} if {
	mode_of(doc, cfg) != "off"
	not to_registry(r, doc, cfg)
}
