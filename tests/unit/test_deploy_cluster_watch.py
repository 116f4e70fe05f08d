"""deploy/cluster-watch, ``modelreg cluster watch``'s manifests: valid Kubernetes objects, read-only RBAC, wired
together.

Every built-in object is checked against the Kubernetes 1.33 OpenAPI schemas (PyPI ``kubernetes-validate``,
strict: an unknown field fails too); the Kustomization, a kind those schemas do not hold, by structure. Then the
contract: the watcher's service account may only get, list and watch pods and namespaces; the Deployment runs
``modelreg cluster watch`` with options the command has, its registry token where its projected volume puts it,
and watches the namespaces the admission webhook gates.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import typer.main
import yaml

from registry.cli import app

ROOT = Path(__file__).resolve().parents[2]
WATCH = ROOT / "deploy" / "cluster-watch"
ADMISSION = ROOT / "deploy" / "admission"
KUBERNETES_VERSION = "1.33"
READ_VERBS = {"get", "list", "watch"}
READ_RESOURCES = {"pods", "namespaces"}


def _documents(root: Path = WATCH) -> list[dict[str, Any]]:
    return [doc for path in sorted(root.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


def _one(kind: str) -> dict[str, Any]:
    (found,) = [doc for doc in _documents() if doc["kind"] == kind]
    return found


def _validate(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("doc", [d for d in _documents() if d["kind"] != "Kustomization"], ids=lambda d: d["kind"])
def test_each_object_is_valid_against_the_kubernetes_schemas(doc):
    _validate(doc)


def test_there_is_every_object_the_watcher_needs():
    assert sorted(d["kind"] for d in _documents()) == sorted(
        ["ClusterRole", "ClusterRoleBinding", "ServiceAccount", "Deployment", "Kustomization"])


@pytest.mark.parametrize("plant", [
    lambda d: d["spec"]["template"]["spec"].__setitem__("serviceAcountName", "x"),  # a typo
    lambda d: d["spec"].__setitem__("replicas", "1"),
    lambda d: d["spec"]["template"]["spec"]["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]
    .__setitem__("expirationSeconds", "an hour"),
])
def test_the_schemas_refuse_a_broken_deployment(plant):
    """The validator is live: the same document, broken, fails."""
    doc = copy.deepcopy(_one("Deployment"))
    plant(doc)
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(doc)


def test_the_kustomization_applies_every_file_into_one_namespace():
    kustomization = _one("Kustomization")
    assert sorted(kustomization["resources"]) == sorted(
        p.name for p in WATCH.glob("*.yaml") if p.name != "kustomization.yaml")
    namespaced = [d for d in _documents() if d["kind"] in ("ServiceAccount", "Deployment")]
    assert {d["metadata"]["namespace"] for d in namespaced} == {kustomization["namespace"]}


# --- RBAC ----------------------------------------------------------------------------------------------


def rbac_violations(docs: list[dict[str, Any]]) -> list[str]:
    """Everything in ``docs`` that grants more than reading pods and namespaces: any other verb, resource or
    group, a wildcard, a Role or binding of another role, an aggregation that could add rules."""
    found = []
    for doc in docs:
        if doc["kind"] in ("Role", "ClusterRole"):
            if "aggregationRule" in doc:
                found.append(f"{doc['kind']} {doc['metadata']['name']}: aggregationRule")
            for rule in doc.get("rules", []):
                if set(rule.get("apiGroups", [])) != {""}:
                    found.append(f"apiGroups {rule.get('apiGroups')}")
                if not set(rule.get("resources", [])) <= READ_RESOURCES:
                    found.append(f"resources {rule.get('resources')}")
                if not set(rule.get("verbs", [])) <= READ_VERBS:
                    found.append(f"verbs {rule.get('verbs')}")
                if "nonResourceURLs" in rule:
                    found.append(f"nonResourceURLs {rule['nonResourceURLs']}")
        if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            if doc["roleRef"] != {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "modelreg-cluster-watch"}:
                found.append(f"binding to {doc['roleRef']}")
    return found


def test_the_watcher_may_only_read_pods_and_namespaces():
    assert rbac_violations(_documents()) == []
    (rule,) = _one("ClusterRole")["rules"]
    assert (set(rule["resources"]), set(rule["verbs"])) == (READ_RESOURCES, READ_VERBS)


@pytest.mark.parametrize("plant", [
    lambda d: d["rules"][0]["verbs"].append("patch"),
    lambda d: d["rules"][0]["verbs"].__setitem__(0, "*"),
    lambda d: d["rules"][0]["resources"].append("secrets"),
    lambda d: d["rules"][0]["resources"].append("pods/exec"),
    lambda d: d["rules"][0]["apiGroups"].append("apps"),
    lambda d: d["rules"].append({"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}),
    lambda d: d.__setitem__("aggregationRule", {"clusterRoleSelectors": [{"matchLabels": {"a": "b"}}]}),
], ids=["patch", "wildcard-verb", "secrets", "pods-exec", "apps-group", "delete-rule", "aggregation"])
def test_a_role_that_grants_more_is_caught(plant):
    role = copy.deepcopy(_one("ClusterRole"))
    plant(role)
    assert rbac_violations([role]) != []


def test_the_binding_gives_the_role_to_the_deployments_service_account():
    binding, account = _one("ClusterRoleBinding"), _one("ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]
    assert binding["roleRef"]["name"] == _one("ClusterRole")["metadata"]["name"]
    assert _pod()["serviceAccountName"] == account["metadata"]["name"]
    # The in-cluster config reads the service account's own token.
    assert _pod()["automountServiceAccountToken"] is True
    assert account.get("automountServiceAccountToken", True) is True


# --- the Deployment ----------------------------------------------------------------------------------------


def _pod() -> dict[str, Any]:
    return _one("Deployment")["spec"]["template"]["spec"]


def _options() -> dict[str, str]:
    (container,) = _pod()["containers"]
    command = container["command"]
    assert command[:3] == ["modelreg", "cluster", "watch"]
    rest = command[3:]
    assert len(rest) % 2 == 0 and all(o.startswith("--") for o in rest[::2]), rest
    return dict(zip(rest[::2], rest[1::2], strict=True))


def test_the_deployment_runs_the_watcher_with_options_it_has():
    command = typer.main.get_command(app).commands["cluster"].commands["watch"]
    known = {o for p in command.params for o in p.opts}
    assert set(_options()) <= known
    assert _one("Deployment")["spec"]["replicas"] == 1
    assert _one("Deployment")["spec"]["strategy"] == {"type": "Recreate"}


def test_the_registry_token_is_the_projected_one_with_the_registrys_audience():
    (container,) = _pod()["containers"]
    token_dir = str(Path(_options()["--token-file"]).parent)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == token_dir]
    (volume,) = [v for v in _pod()["volumes"] if v["name"] == mount["name"]]
    (source,) = volume["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "modelreg"
    assert source["serviceAccountToken"]["path"] == Path(_options()["--token-file"]).name
    assert {e["name"] for e in container["env"]} >= {"MODELREG_URL"}


def test_it_watches_the_namespaces_the_admission_webhook_gates():
    gated = {str(hook.get("namespaceSelector", {}).get("matchLabels"))
             for doc in _documents(ADMISSION) if doc["kind"] == "ValidatingWebhookConfiguration"
             for hook in doc["webhooks"] if "namespaceSelector" in hook}
    key, _, value = _options()["--namespace-selector"].partition("=")
    assert gated == {str({key: value})}
