"""The KServe storage initializer as KServe runs it: built from the README's KServe YAML, run contained.

No Kubernetes here. The init container is built as KServe's pod webhook builds it
(github.com/kserve/kserve at aaac4e2, ``pkg/webhook/admission/pod/storage_initializer_injector.go``,
``CommonStorageInitialization`` for one storageUri): ``utils.CreateInitContainerWithConfig`` (name
``storage-initializer``, the args ``[storageUri, /mnt/models]``, the resources of the ``storageInitializer``
entry of ``config/configmap/inferenceservice.yaml``), ``utils.AddModelMount`` (the emptyDir
``kserve-provision-location`` at ``/mnt/models``, writable for an init container), the service account's
credentials (none: ours carries no storage secret), ``utils.MergeContainerWithPatch`` of the
ClusterStorageContainer's container (a strategic merge: env by name, volumeMounts by mountPath), then
``utils.AddDefaultHuggingFaceEnvVars``. KServe sets no securityContext on it (only an Istio CNI annotation
would set runAsUser): it runs as the image's ``USER``, its command is the image's ``ENTRYPOINT``, both read
from ``deploy/fetch/Dockerfile``.

That container then runs (``tests/support/contained.py``) as that uid with exactly that environment (plus
what the runtime and the image give: PATH, HOME), with only ``/mnt/models`` (an empty 0777 directory,
as the kubelet makes an emptyDir) and ``/tmp`` writable and the InferenceService's projected token volume
read-only at the mount the ClusterStorageContainer names, against a live ``modelreg serve`` that trusts a
Kubernetes issuer (``tests/support/kube_issuer.py``) and binds the predictor's service account: the
projected-token identity, not the static token. Only two values the cluster would hold are the test's: the
registry URL and the trust root's sha256.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.contained import run_contained
from tests.support.kube_issuer import KubeIssuer
from tests.support.release_seed import TENANT, admin_token, seed_files, seed_release
from tests.support.server import MODELREG, start_server

REPO = Path(__file__).resolve().parents[2]
KSERVE = REPO / "deploy" / "kserve"
BIN = Path(sys.executable).parent

# KServe's constants and defaults (pkg/constants/constants.go, config/configmap/inferenceservice.yaml).
INIT_CONTAINER_NAME = "storage-initializer"
USER_CONTAINER_NAME = "kserve-container"
STORAGE_URI_ENV = "STORAGE_URI"
MODEL_MOUNT = "/mnt/models"
MODEL_VOLUME = "kserve-provision-location"
DEFAULT_STORAGE_INITIALIZER = {"image": "kserve/storage-initializer:latest", "memoryRequest": "100Mi",
                               "memoryLimit": "1Gi", "cpuRequest": "100m", "cpuLimit": "1"}
DEFAULT_HF_ENV = [("HF_HUB_ENABLE_HF_TRANSFER", "1"), ("HF_XET_HIGH_PERFORMANCE", "1"),
                  ("HF_XET_NUM_CONCURRENT_RANGE_GETS", "8")]
# Lists a strategic merge of a Container merges by key (k8s.io/api/core/v1 patchMergeKey); others are replaced.
MERGE_KEYS = {"env": "name", "volumeMounts": "mountPath", "ports": "containerPort", "envFrom": None}


def readme_kserve_blocks() -> list[str]:
    """The YAML blocks of the README's ``### KServe`` section, in order."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n### KServe\n", 1)[1]
    section = re.split(r"\n#{2,3} ", section, maxsplit=1)[0]
    return re.findall(r"```yaml\n(.*?)```", section, flags=re.S)


def dockerfile() -> dict:
    """What the fetch image runs: its ENTRYPOINT, USER and ENV."""
    lines = (REPO / "deploy" / "fetch" / "Dockerfile").read_text().splitlines()
    (entrypoint,) = [json.loads(line.removeprefix("ENTRYPOINT ")) for line in lines if line.startswith("ENTRYPOINT ")]
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    env = dict(kv.split("=", 1) for line in lines if line.startswith("ENV ") for kv in shlex.split(line[4:]))
    return {"entrypoint": entrypoint, "user": int(users[-1]), "env": env}


def strategic_merge(base: dict, patch: dict) -> dict:
    """A strategic merge patch of one Container onto another, for the fields a ClusterStorageContainer sets."""
    merged = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = strategic_merge(merged[key], value)
        elif isinstance(value, list) and MERGE_KEYS.get(key):
            by = MERGE_KEYS[key]
            items = list(merged.get(key, []))
            for item in value:
                at = next((i for i, old in enumerate(items) if old[by] == item[by]), None)
                if at is None:
                    items.append(copy.deepcopy(item))
                else:
                    items[at] = strategic_merge(items[at], item)
            merged[key] = items
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def predictor_storage_uri(isvc: dict) -> str:
    """The storage URI KServe gives the predictor's storage initializer: the model spec's ``storageUri``, or
    for a custom predictor the ``STORAGE_URI`` env var of its ``kserve-container``
    (``pkg/apis/serving/v1beta1/predictor_custom.go``, ``GetStorageUri``)."""
    predictor = isvc["spec"]["predictor"]
    if "model" in predictor:
        return predictor["model"]["storageUri"]
    (container,) = [c for c in predictor["containers"] if c["name"] == USER_CONTAINER_NAME]
    (uri,) = [e["value"] for e in container.get("env", []) if e["name"] == STORAGE_URI_ENV]
    return uri


def injected_init_container(storage_container: dict, isvc: dict) -> dict:
    """The init container KServe's webhook puts in the predictor Pod (see the module docstring)."""
    storage_uri = predictor_storage_uri(isvc)
    cfg = DEFAULT_STORAGE_INITIALIZER
    container = {
        "name": INIT_CONTAINER_NAME, "image": cfg["image"], "args": [storage_uri, MODEL_MOUNT],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {"limits": {"cpu": cfg["cpuLimit"], "memory": cfg["memoryLimit"]},
                      "requests": {"cpu": cfg["cpuRequest"], "memory": cfg["memoryRequest"]}},
        "volumeMounts": [{"name": MODEL_VOLUME, "mountPath": MODEL_MOUNT}],
    }
    container = strategic_merge(container, storage_container["spec"]["container"])
    container.setdefault("env", [])
    for name, value in DEFAULT_HF_ENV:
        if all(e["name"] != name for e in container["env"]):
            container["env"].append({"name": name, "value": value})
    return container


def pod_volumes(isvc: dict) -> dict[str, dict]:
    """The predictor Pod's volumes by name: the InferenceService's, and AddModelMount's emptyDir."""
    return {**{v["name"]: v for v in isvc["spec"]["predictor"].get("volumes", [])},
            MODEL_VOLUME: {"name": MODEL_VOLUME, "emptyDir": {}}}


@pytest.fixture(scope="module")
def manifests() -> tuple[dict, dict]:
    blocks = readme_kserve_blocks()
    files = [KSERVE / "cluster-storage-container.yaml", KSERVE / "inference-service.yaml"]
    assert [b.strip() for b in blocks] == [f.read_text().strip() for f in files], \
        "the README's KServe section must show deploy/kserve's files as they are"
    storage_container, isvc = (yaml.safe_load(b) for b in blocks)
    assert storage_container["kind"] == "ClusterStorageContainer" and isvc["kind"] == "InferenceService"
    assert storage_container["spec"]["workloadType"] == "initContainer"
    uri = isvc["spec"]["predictor"]["model"]["storageUri"]
    assert any(uri.startswith(f["prefix"]) for f in storage_container["spec"]["supportedUriFormats"])
    return storage_container, isvc


@pytest.fixture(scope="module")
def cluster(manifests, tmp_path_factory):
    with live_cluster(manifests[1], tmp_path_factory.mktemp("kserve")) as world:
        yield world


@contextmanager
def live_cluster(isvc: dict, work: Path, files_of: Callable[[int], dict[str, bytes]] = seed_files):
    """A live registry holding the InferenceService's model (version N's files: ``files_of(N)``, ``prod`` -> 1),
    trusting an issuer that binds its service account."""
    uri = predictor_storage_uri(isvc)
    tenant, model = uri.removeprefix("modelreg://").split("@")[0].split("/")
    assert tenant == TENANT
    data_dir = work / "data"
    seed_release(data_dir, 0, model=model, files_of=files_of)
    admin = admin_token(data_dir)
    with KubeIssuer() as issuer:
        server = start_server(data_dir, extra_env={"MODELREG_WORKLOAD_ISSUERS": json.dumps(
            [{"issuer": issuer.url, "audience": "modelreg"}])}, workers=0)
        try:
            namespace = isvc["metadata"].get("namespace", "default")
            service_account = isvc["spec"]["predictor"]["serviceAccountName"]
            server.cli("node", "bind", "--issuer", issuer.url, "--namespace", namespace, "--service-account",
                       service_account, "--tenant", tenant, token=admin, check=True)
            yield {"server": server, "admin": admin, "issuer": issuer, "namespace": namespace,
                   "service_account": service_account,
                   "work": work, "model": model}
        finally:
            server.stop()


def run_pod(manifests, cluster, name: str) -> tuple[subprocess.CompletedProcess, Path, dict]:
    """Run the injected storage initializer of a new predictor Pod; its result, its emptyDir, its container."""
    storage_container, isvc = manifests
    server, image = cluster["server"], dockerfile()
    container = injected_init_container(storage_container, isvc)
    pod = cluster["work"] / name
    pod.mkdir()
    volumes = pod_volumes(isvc)
    mounts = []
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        host = pod / mount["name"]
        host.mkdir()
        if "emptyDir" in volume:
            host.chmod(0o777)  # as the kubelet makes it
        else:
            for source in volume["projected"]["sources"]:
                token = source["serviceAccountToken"]
                minted = cluster["issuer"].mint(cluster["namespace"], cluster["service_account"],
                                                audience=[token["audience"]], expires_in=token["expirationSeconds"])
                (host / token["path"]).write_text(minted)
                (host / token["path"]).chmod(0o644)
        mounts.append((host, mount["mountPath"], not mount.get("readOnly", False)))

    # The cluster's values that are the test's: the registry's URL and the sha256 of its trust root 1.
    pin = hashlib.sha256(httpx.get(f"{server.url}/v1/trust-root/1", timeout=30).content).hexdigest()
    cluster_values = {"MODELREG_URL": server.url, "MODELREG_TRUST_ROOT_SHA256": pin}
    env = {"PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin", "HOME": "/home/modelreg", "HOSTNAME": name,
           **image["env"]}
    for e in container["env"]:
        assert "valueFrom" not in e, f"{e['name']}: the projected token is the identity here, not a Secret"
        env[e["name"]] = cluster_values.get(e["name"], e["value"])
    argv = [*(container.get("command") or image["entrypoint"]), *container.get("args", [])]
    result = run_contained(argv, env, uid=image["user"], root=pod / "root", mounts=mounts)
    return result, pod / MODEL_VOLUME, container


def test_the_readme_kserve_manifests_become_the_init_container_kserve_injects(manifests):
    container = injected_init_container(*manifests)
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["args"] == ["modelreg://acme/tiny-llm@prod", MODEL_MOUNT] and "command" not in container
    assert {m["mountPath"] for m in container["volumeMounts"]} == {MODEL_MOUNT, "/var/run/secrets/modelreg"}
    assert {"MODELREG_URL", "MODELREG_TOKEN_FILE", "MODELREG_TRUST_ROOT_SHA256",
            "HF_HUB_ENABLE_HF_TRANSFER"} <= set(env)
    # Nothing of ours that a ClusterStorageContainer cannot bring: no cache directory, no trust root file.
    assert not {"MODELREG_CACHE", "MODELREG_TRUST_ROOT"} & set(env)
    assert container["resources"] == {"limits": {"cpu": "1", "memory": "1Gi"},
                                      "requests": {"cpu": "500m", "memory": "256Mi"}}
    assert "securityContext" not in container and dockerfile()["user"] != 0


def test_the_storage_initializer_fills_mnt_models_with_the_verified_release(manifests, cluster):
    result, models, _ = run_pod(manifests, cluster, "pod-a")
    assert result.returncode == 0, result.stdout + result.stderr
    expected = seed_files(1)  # prod -> 1
    # modelreg-unit.json: every release now carries its unit (ADR 0016); this one has no serving profile.
    assert sorted(p.name for p in models.iterdir()) == sorted([".git", "model.sig", "modelreg-unit.json",
                                                               *expected])
    for path, data in expected.items():
        assert hashlib.sha256((models / path).read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
    assert json.loads((models / "model.sig").read_text())["dsseEnvelope"]
    server = cluster["server"]
    pin = hashlib.sha256(httpx.get(f"{server.url}/v1/trust-root/1", timeout=30).content).hexdigest()
    verified = subprocess.run([MODELREG, "verify", str(models), "--trust-root-sha256", pin, "--url", server.url],
                              env={k: v for k, v in os.environ.items() if not k.startswith("MODELREG_")},
                              capture_output=True, text=True, timeout=120)
    assert verified.returncode == 0, verified.stderr
    # The node was the predictor's service account, by its projected token.
    received = server.cli("provenance", "nodes", f"{TENANT}/{cluster['model']}@1", token=cluster["admin"],
                          check=True).stdout
    assert f"sa:{cluster['namespace']}/{cluster['service_account']}@" in received


def test_a_tampered_blob_fails_the_init_container_and_leaves_mnt_models_without_model_files(manifests, cluster):
    blob = hashlib.sha256(seed_files(1)["model.safetensors"]).hexdigest()
    (stored,) = [p for p in (cluster["server"].data_dir / "blobs").rglob(blob) if p.is_file()]
    original = stored.read_bytes()
    stored.chmod(0o644)
    stored.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    try:
        result, models, _ = run_pod(manifests, cluster, "pod-b")
    finally:
        stored.write_bytes(original)
    assert result.returncode == 13, result.stdout + result.stderr
    assert "error: digest:" in result.stderr
    assert list(models.iterdir()) == []
