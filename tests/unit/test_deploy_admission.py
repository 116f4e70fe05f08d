"""deploy/admission, the admission webhook's manifests: valid Kubernetes objects that wire together.

Every built-in object is checked against the Kubernetes 1.33 OpenAPI schemas (PyPI ``kubernetes-validate``,
strict: an unknown field fails too). cert-manager's Issuer and Certificate, and the Kustomization, are kinds
those schemas do not hold: their structure is checked here instead. Then the contract: the webhook
configurations fail closed and reach the Deployment's ``--listen`` port through the Service, their rules ask
for exactly the kinds and versions ``registry/domain/admission_refs.py`` reads, and the Deployment runs
``modelreg admission`` with its files where its volumes put them.
"""

from __future__ import annotations

import copy
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import typer.main
import yaml

from registry.cli import app
from registry.domain.admission_refs import READ_VERSIONS

ROOT = Path(__file__).resolve().parents[2]
ADMISSION = ROOT / "deploy" / "admission"
KUBERNETES_VERSION = "1.33"  # knows image volumes (volumes[].image)
NOT_IN_THE_SCHEMAS = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate"),
                      ("kustomize.config.k8s.io/v1beta1", "Kustomization")}
SELECTOR = {"modelreg.dev/admission": "enabled"}
# The webhook process contract (issue 35), each option with a value: what the Deployment passes.
CONTRACT_OPTIONS = {"--listen", "--tls-cert", "--tls-key", "--registry", "--token-file", "--trust-root",
                    "--state-dir"}


def _documents() -> list[tuple[str, dict[str, Any]]]:
    return [(path.name, doc) for path in sorted(ADMISSION.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def _one(kind: str) -> dict[str, Any]:
    (found,) = [doc for _, doc in _documents() if doc["kind"] == kind]
    return found


def _validate(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


# --- the schemas ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("doc", [d for _, d in _documents() if (d["apiVersion"], d["kind"]) not in NOT_IN_THE_SCHEMAS],
                         ids=lambda d: d["kind"])
def test_each_object_is_valid_against_the_kubernetes_schemas(doc):
    _validate(doc)


def test_there_is_every_object_the_webhook_needs():
    kinds = sorted(doc["kind"] for _, doc in _documents())
    assert kinds == sorted(["ServiceAccount", "Deployment", "Service", "PodDisruptionBudget", "Issuer",
                            "Certificate", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
                            "Kustomization"])


@pytest.mark.parametrize("plant", [
    lambda d: d["webhooks"][0].__setitem__("failurePolicy", 3),
    lambda d: d["webhooks"][0].__setitem__("timeoutSecond", 5),  # a typo: strict schemas refuse unknown fields
    lambda d: d["webhooks"][0]["clientConfig"]["service"].__setitem__("port", "https"),
    lambda d: d["webhooks"][0].__delitem__("sideEffects"),
])
def test_the_schemas_refuse_a_broken_webhook_configuration(plant):
    """The validator is live: the same document, broken, fails."""
    doc = copy.deepcopy(_one("ValidatingWebhookConfiguration"))
    plant(doc)
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(doc)


def test_the_kustomization_applies_every_file_into_the_webhook_namespace():
    kustomization = _one("Kustomization")
    files = sorted(p.name for p in ADMISSION.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == files
    assert set(kustomization) <= {"apiVersion", "kind", "namespace", "resources"}
    namespaced = [d for _, d in _documents() if d["kind"] not in (
        "Kustomization", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")]
    assert {d["metadata"]["namespace"] for d in namespaced} == {kustomization["namespace"]}


def test_cert_manager_issues_the_serving_certificate_and_injects_its_ca():
    """cert-manager's kinds, checked by structure (their CRDs are not among the Kubernetes schemas)."""
    issuer, certificate, service = _one("Issuer"), _one("Certificate"), _one("Service")
    for doc in (issuer, certificate):
        assert doc["apiVersion"] == "cert-manager.io/v1"
        assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}
    assert issuer["spec"] == {"selfSigned": {}}
    spec = certificate["spec"]
    assert set(spec) <= {"secretName", "dnsNames", "issuerRef", "privateKey", "duration", "renewBefore",
                         "commonName", "usages", "subject"}
    assert spec["issuerRef"] == {"name": issuer["metadata"]["name"], "kind": "Issuer", "group": "cert-manager.io"}
    assert issuer["metadata"]["namespace"] == certificate["metadata"]["namespace"]
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    # The API server calls <service>.<namespace>.svc: the certificate must name it.
    assert f"{name}.{namespace}.svc" in spec["dnsNames"]
    assert spec["privateKey"]["algorithm"] in ("ECDSA", "RSA", "Ed25519")
    (tls,) = [v for v in _pod()["volumes"] if v["name"] == "tls"]
    assert tls["secret"]["secretName"] == spec["secretName"]
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        annotations = _one(kind)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == (
            f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"), kind


# --- the webhook configurations --------------------------------------------------------------------------


def _webhooks() -> list[tuple[str, dict[str, Any]]]:
    return [(kind, hook) for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
            for hook in _one(kind)["webhooks"]]


def _rules(hook: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """(group, resource) -> the versions a webhook asks for, each for CREATE and UPDATE."""
    found: dict[tuple[str, str], set[str]] = {}
    for rule in hook["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                found.setdefault((group, resource), set()).update(rule["apiVersions"])
    return found


@pytest.mark.parametrize("kind,hook", _webhooks(), ids=lambda v: v if isinstance(v, str) else v["name"])
def test_every_webhook_fails_closed_and_reaches_the_webhook_process(kind, hook):
    assert hook["failurePolicy"] == "Fail"
    assert hook["sideEffects"] == "None"
    assert 1 <= hook["timeoutSeconds"] <= 10
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["matchPolicy"] == "Equivalent"
    service = _one("Service")
    target = hook["clientConfig"]["service"]
    assert "url" not in hook["clientConfig"] and "caBundle" not in hook["clientConfig"]
    assert (target["name"], target["namespace"]) == (service["metadata"]["name"], service["metadata"]["namespace"])
    assert target["path"] == {"ValidatingWebhookConfiguration": "/validate",
                              "MutatingWebhookConfiguration": "/mutate"}[kind]
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == target.get("port", 443)]
    assert _container_port(port["targetPort"]) == _listen_port()
    for rule in hook["rules"]:
        assert set(rule["operations"]) <= {"CREATE", "UPDATE"} and "CREATE" in rule["operations"]
    namespaced = {rule.get("scope", "*") for rule in hook["rules"]}
    if namespaced == {"Namespaced"}:
        assert hook["namespaceSelector"] == {"matchLabels": SELECTOR}
    else:  # a namespaceSelector does not apply to cluster-scoped objects: none pretends to
        assert namespaced == {"Cluster"} and "namespaceSelector" not in hook
    assert "objectSelector" not in hook, "an object could opt itself out"


def test_validation_asks_for_every_kind_and_version_the_extraction_reads():
    """The rules and registry/domain/admission_refs.py agree: no kind the webhook cannot read is sent, and
    none it reads is left out (matchPolicy Equivalent converts other versions to these)."""
    asked: dict[tuple[str, str], set[str]] = {}
    for hook in _one("ValidatingWebhookConfiguration")["webhooks"]:
        for rule in hook["rules"]:
            assert set(rule["operations"]) == {"CREATE", "UPDATE"}, hook["name"]
        for key, versions in _rules(hook).items():
            asked.setdefault(key, set()).update(versions)
    read = {(group, kind.lower() + "s"): set(versions) for (group, kind), versions in READ_VERSIONS.items()}
    read[("", "pods/ephemeralcontainers")] = read[("", "pods")]
    assert asked == read
    assert {("", "pods"), ("serving.kserve.io", "inferenceservices"), ("serving.kserve.io", "llminferenceservices"),
            ("serving.kserve.io", "localmodelcaches")} <= set(asked)


def test_pinning_asks_for_what_validation_does():
    validating = {k for hook in _one("ValidatingWebhookConfiguration")["webhooks"] for k in _rules(hook)}
    mutating = {k for hook in _one("MutatingWebhookConfiguration")["webhooks"] for k in _rules(hook)}
    assert mutating == validating - {("", "pods/ephemeralcontainers")}


# --- the Deployment -------------------------------------------------------------------------------------


def _pod() -> dict[str, Any]:
    return _one("Deployment")["spec"]["template"]["spec"]


def _container() -> dict[str, Any]:
    (container,) = _pod()["containers"]
    return container


def _options() -> dict[str, str]:
    """The Deployment's command after ``modelreg admission``, as option -> value."""
    command = _container()["command"]
    assert command[:2] == ["modelreg", "admission"]
    rest = command[2:]
    assert len(rest) % 2 == 0 and all(o.startswith("--") for o in rest[::2]), rest
    return dict(zip(rest[::2], rest[1::2], strict=True))


def _listen_port() -> int:
    return int(_options()["--listen"].rsplit(":", 1)[1])


def _container_port(name_or_number: str | int) -> int:
    (port,) = [p for p in _container()["ports"] if name_or_number in (p["name"], p["containerPort"])]
    return port["containerPort"]


def _volume_of(path: str) -> dict[str, Any]:
    """The volume a file of the container lies on (the deepest mount above it)."""
    mounts = [m for m in _container()["volumeMounts"]
              if PurePosixPath(path).is_relative_to(m["mountPath"])]
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    (volume,) = [v for v in _pod()["volumes"] if v["name"] == mount["name"]]
    return {**volume, "readOnly": mount.get("readOnly", False)}


def test_the_webhook_runs_the_contract_command_with_its_files_where_its_volumes_put_them():
    options = _options()
    assert set(options) == CONTRACT_OPTIONS
    host, port = options["--listen"].rsplit(":", 1)
    assert host == "0.0.0.0" and _container_port("https") == int(port)
    assert options["--registry"].startswith("https://")
    tls = _volume_of(options["--tls-cert"])
    assert tls == _volume_of(options["--tls-key"]) and tls["readOnly"] and "secret" in tls
    assert [PurePosixPath(options[o]).name for o in ("--tls-cert", "--tls-key")] == ["tls.crt", "tls.key"]
    assert "configMap" in (root := _volume_of(options["--trust-root"])) and root["readOnly"]
    token = _volume_of(options["--token-file"])
    assert token["readOnly"] and PurePosixPath(options["--token-file"]).name == "token"
    (source,) = token["projected"]["sources"]  # the pod's projected service-account token, for the registry only
    assert source["serviceAccountToken"] == {"audience": "modelreg", "expirationSeconds": 3600, "path": "token"}
    assert "emptyDir" in (state := _volume_of(options["--state-dir"] + "/x")) and not state["readOnly"]


def test_the_command_parses_with_the_real_admission_command():
    """Every option the Deployment passes is one `modelreg admission` has, and it passes every required one.

    Until the `adm` branch (which adds the command) is merged, the contract list above is all there is."""
    command = typer.main.get_command(app).commands.get("admission")
    if command is None:
        assert CONTRACT_OPTIONS == set(_options())
        return
    options = {o for p in command.params if p.param_type_name == "option" for o in p.opts}
    assert set(_options()) <= options
    for p in command.params:
        if p.param_type_name == "option" and p.required:
            assert set(p.opts) & set(_options()), f"{p.opts[0]} is required"
    context = command.make_context("admission", list(_container()["command"][2:]))
    assert context.params["listen"] == _options()["--listen"]


def test_two_replicas_spread_and_kept_through_disruptions():
    deployment, budget = _one("Deployment"), _one("PodDisruptionBudget")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["selector"]["matchLabels"] == labels
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert budget["spec"]["selector"]["matchLabels"] == labels
    assert budget["spec"].get("minAvailable", 0) >= 1 or budget["spec"]["maxUnavailable"] < 2
    (term,) = _pod()["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == labels
    service = _one("Service")
    assert service["spec"]["selector"] == labels
    assert _pod()["serviceAccountName"] == _one("ServiceAccount")["metadata"]["name"]


def test_the_webhook_is_probed_over_https_and_runs_locked_down():
    container = _container()
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert (get["path"], get["scheme"]) == (path, "HTTPS")
        assert _container_port(get["port"]) == _listen_port()
    pod_security = _pod()["securityContext"]
    assert pod_security["runAsNonRoot"] is True and pod_security["runAsUser"] > 0
    assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"] and "add" not in security["capabilities"]
    assert _pod()["automountServiceAccountToken"] is False
    resources = container["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"] and resources["limits"]["memory"]
