"""The KServe LocalModelCache examples in deploy/kserve, checked against KServe's own CRD schemas.

``kserve/local_model_crds.yaml`` holds the spec schemas of KServe's LocalModelCache and LocalModelNodeGroup
CRDs (field names, types, required fields), copied from KServe's source. Each example must use only those
fields, with the types they have, and every required one; the cache must pin a version and be downloaded
by our ``localModelDownloadJob`` ClusterStorageContainer; the sweeper DaemonSet must run on the node
group's nodes with the node group's path as ROOT.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from registry.domain.refs import parse_ref

ROOT = Path(__file__).resolve().parents[2]
KSERVE = ROOT / "deploy" / "kserve"
CRDS = yaml.safe_load((Path(__file__).parent / "kserve" / "local_model_crds.yaml").read_text())
QUANTITY = re.compile(r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                      r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")


def _load(name: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all((KSERVE / name).read_text()) if d]
    return doc


def schema_errors(value: Any, schema: dict[str, Any], where: str = "spec") -> list[str]:
    """Where ``value`` breaks ``schema`` (the structural part of an OpenAPI v3 CRD schema the API server checks)."""
    if schema.get("x-kubernetes-int-or-string"):
        ok = type(value) is int or isinstance(value, str) and bool(QUANTITY.match(value))
        return [] if ok else [f"{where}: {value!r} is not an int or a quantity"]
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            return [f"{where}: not an object"]
        errors = [f"{where}: {name} is required" for name in schema.get("required", []) if name not in value]
        properties, extra = schema.get("properties"), schema.get("additionalProperties")
        for name, sub in value.items():
            if properties is not None and name in properties:
                errors += schema_errors(sub, properties[name], f"{where}.{name}")
            elif isinstance(extra, dict):
                errors += schema_errors(sub, extra, f"{where}.{name}")
            else:
                errors.append(f"{where}: KServe's CRD has no field {name!r}")
        return errors
    if kind == "array":
        if not isinstance(value, list):
            return [f"{where}: not a list"]
        errors = [f"{where}: fewer than {schema['minItems']} items"] if len(value) < schema.get("minItems", 0) else []
        for i, item in enumerate(value):
            errors += schema_errors(item, schema.get("items", {}), f"{where}[{i}]")
        return errors
    types = {"string": str, "boolean": bool, "integer": int}
    if kind in types and not (isinstance(value, types[kind]) and not (kind == "integer" and type(value) is bool)):
        return [f"{where}: {value!r} is not a {kind}"]
    return []


@pytest.mark.parametrize("name,kind", [("local-model-cache.yaml", "LocalModelCache"),
                                       ("local-model-node-group.yaml", "LocalModelNodeGroup")])
def test_the_example_has_exactly_the_fields_of_kserve_s_crd(name, kind):
    doc = _load(name)
    crd = CRDS[kind]
    assert doc["kind"] == kind and doc["apiVersion"] == f"{crd['group']}/{crd['version']}"
    assert set(doc) == {"apiVersion", "kind", "metadata", "spec"} and doc["metadata"]["name"]
    assert schema_errors(doc["spec"], crd["spec"]) == []


def test_the_schema_check_catches_a_misspelt_a_missing_and_a_mistyped_field():
    spec = _load("local-model-cache.yaml")["spec"]
    misspelt = {**{k: v for k, v in spec.items() if k != "sourceModelUri"}, "sourceModelURI": spec["sourceModelUri"]}
    assert schema_errors(misspelt, CRDS["LocalModelCache"]["spec"]) == [
        "spec: sourceModelUri is required", "spec: KServe's CRD has no field 'sourceModelURI'"]
    group = copy.deepcopy(_load("local-model-node-group.yaml")["spec"])
    group["persistentVolumeSpec"]["local"]["pathh"] = group["persistentVolumeSpec"]["local"].pop("path")
    group["storageLimit"] = "a lot"
    assert set(schema_errors(group, CRDS["LocalModelNodeGroup"]["spec"])) == {
        "spec.persistentVolumeSpec.local: path is required",
        "spec.persistentVolumeSpec.local: KServe's CRD has no field 'pathh'",
        "spec.storageLimit: 'a lot' is not an int or a quantity"}


def test_the_cache_pins_a_version_says_why_and_is_downloaded_by_our_storage_container():
    cache, group = _load("local-model-cache.yaml"), _load("local-model-node-group.yaml")
    uri = cache["spec"]["sourceModelUri"]
    ref = parse_ref(uri)
    assert (ref.tenant, ref.name, ref.version, ref.alias) == ("acme", "tiny-llm", 3, None)
    text = (KSERVE / "local-model-cache.yaml").read_text()
    assert "Pin a version" in text and "never an alias" in text
    assert cache["spec"]["nodeGroups"] == [group["metadata"]["name"]]
    # KServe takes the first enabled localModelDownloadJob container whose prefix matches: ours, by name.
    storage = [d for path in sorted(KSERVE.glob("*.yaml")) for d in yaml.safe_load_all(path.read_text())
               if d and d["kind"] == "ClusterStorageContainer" and d["spec"]["workloadType"] == "localModelDownloadJob"
               and any(uri.startswith(f["prefix"]) for f in d["spec"]["supportedUriFormats"])]
    assert [d["metadata"]["name"] for d in storage] == ["modelreg-local-model-cache"]
    assert _load("local-model-cache-storage-container.yaml")["metadata"]["name"] in text


def test_the_sweeper_runs_on_the_node_group_s_nodes_over_its_volume():
    group, sweeper = _load("local-model-node-group.yaml"), _load("local-model-cache-sweeper.yaml")
    pv = group["spec"]["persistentVolumeSpec"]
    pod = sweeper["spec"]["template"]["spec"]
    assert (pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            == pv["nodeAffinity"]["required"])
    (container,) = pod["containers"]
    assert container["command"] == ["modelreg", "cache", "sweep"]
    root = container["args"][0]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == root]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["hostPath"]["path"] == pv["local"]["path"] and not mount.get("readOnly")
    # Its state (cursor, revoked versions) is not inside the node group's models folder.
    state = {e["name"]: e.get("value") for e in container["env"]}["MODELREG_CACHE"]
    assert not Path(state).is_relative_to(Path(root) / "models")
