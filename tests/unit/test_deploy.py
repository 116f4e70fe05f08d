"""No Kubernetes here: check deploy/ against the real CLI instead (as test_compose does for docker-compose.yml).

Every container that runs the fetch image runs a `modelreg` command that exists, with options it has, and
the environment variables it reads; every modelreg:// URI parses as a reference; the KServe objects have
the fields KServe selects a storage container by.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from registry.cli import app
from registry.domain.refs import parse_ref

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
FETCH_IMAGE = "modelreg-fetch"
MANIFESTS = sorted(DEPLOY.rglob("*.yaml"))


def _entrypoint() -> list[str]:
    text = (DEPLOY / "fetch" / "Dockerfile").read_text()
    (line,) = [line for line in text.splitlines() if line.startswith("ENTRYPOINT ")]
    return json.loads(line.removeprefix("ENTRYPOINT "))


def _documents() -> list[tuple[Path, dict]]:
    return [(path, doc) for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def _containers(doc: dict) -> list[dict]:
    spec = doc.get("spec", {})
    if doc["kind"] == "ClusterStorageContainer":
        return [spec["container"]]
    pod = spec.get("template", {}).get("spec", spec)
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def _fetch_containers() -> list[tuple[str, dict]]:
    found = []
    for path, doc in _documents():
        for c in _containers(doc):
            if c.get("image", "").split(":")[0] == FETCH_IMAGE:
                found.append((f"{path.relative_to(ROOT)}:{c['name']}", c))
    return found


def _resolve(argv: list[str]) -> tuple[Any, list[str]]:
    """The click command ``argv`` (after ``modelreg``) runs, and the arguments left for it."""
    assert argv[0] == "modelreg", argv
    command = typer.main.get_command(app)
    rest = argv[1:]
    while hasattr(command, "commands"):  # a group (typer vendors its own click: no isinstance)
        assert rest and rest[0] in command.commands, f"modelreg has no command {' '.join(argv[:len(argv)])}"
        command, rest = command.commands[rest[0]], rest[1:]
    return command, rest


def _is_option(param: Any) -> bool:
    return getattr(param, "param_type_name", None) == "option"


def test_there_is_something_to_check():
    kinds = {doc["kind"] for _, doc in _documents()}
    assert {"Pod", "DaemonSet", "ClusterStorageContainer", "InferenceService"} <= kinds
    assert len(_fetch_containers()) == 5


@pytest.mark.parametrize("where,container", _fetch_containers(), ids=lambda v: v if isinstance(v, str) else "")
def test_each_fetch_container_runs_a_real_command_with_real_options(where, container):
    argv = container.get("command") or _entrypoint()
    args = container.get("args", [])
    if container.get("name") == "storage-initializer":
        # KServe appends [storageUri, /mnt/models] itself.
        assert not args, where
        args = ["modelreg://acme/tiny-llm@prod", "/mnt/models"]
    command, rest = _resolve([*argv, *args])
    options = {opt for p in command.params if _is_option(p) for opt in p.opts}
    positionals = [a for a in rest if not a.startswith("-")]
    for arg in rest:
        if arg.startswith("--"):
            assert arg.split("=")[0] in options, f"{where}: {command.name} has no option {arg}"
    for arg in positionals:
        if arg.startswith("modelreg://"):
            parse_ref(arg)
    env = {e["name"] for e in container.get("env", [])}
    read = {p.envvar for p in command.params if getattr(p, "envvar", None)}
    assert "MODELREG_URL" in env and {"MODELREG_TRUST_ROOT", "MODELREG_TRUST_ROOT_SHA256"} & env, where
    if container.get("name") == "storage-initializer":
        # KServe's storage containers (the init container, the LocalModelCache download Job) get no volume
        # of ours (the init container: but the token): no cache, no trust root file.
        assert not {"MODELREG_CACHE", "MODELREG_TRUST_ROOT"} & env, where
    else:
        assert "MODELREG_CACHE" in env, where
    assert {"MODELREG_TOKEN", "MODELREG_TOKEN_FILE"} & env, f"{where}: no token"
    assert env - {"MODELREG_URL", "MODELREG_TOKEN"} <= read, f"{where}: {command.name} reads none of {env - read}"
    # The required options a container does not pass must come from its environment.
    for p in command.params:
        if _is_option(p) and p.required and not set(p.opts) & set(rest):
            assert p.envvar in env, f"{where}: {p.opts[0]} is required and not set"


def _projected_token_volumes(pod: dict) -> dict[str, dict]:
    """The pod's projected service-account token volumes, by name: their serviceAccountToken source."""
    found = {}
    for volume in pod.get("volumes", []):
        for source in volume.get("projected", {}).get("sources", []):
            if "serviceAccountToken" in source:
                found[volume["name"]] = source["serviceAccountToken"]
    return found


def _token_file_is_projected(container: dict, volumes: dict[str, dict], where: str) -> None:
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    path = Path(env["MODELREG_TOKEN_FILE"])
    (mount,) = [m for m in container.get("volumeMounts", []) if path.parent == Path(m["mountPath"])]
    token = volumes[mount["name"]]
    assert token == {"audience": "modelreg", "expirationSeconds": 3600, "path": path.name}, where
    assert mount.get("readOnly") is True, where


def test_nodes_use_projected_service_account_tokens_and_the_static_token_stays_the_fallback():
    """Every fetch container reads MODELREG_TOKEN_FILE from a projected token (audience modelreg, an hour)
    of its pod, but KServe's LocalModelCache download Job, which keeps the Secret; each file says how to
    fall back to the Secret."""
    uses_file = set()
    for path, doc in _documents():
        if doc["kind"] in ("Pod", "DaemonSet"):
            pod = doc["spec"].get("template", {}).get("spec", doc["spec"])
            assert pod.get("serviceAccountName"), path
            for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
                if c.get("image", "").split(":")[0] == FETCH_IMAGE:
                    _token_file_is_projected(c, _projected_token_volumes(pod), f"{path}:{c['name']}")
                    uses_file.add(path.name)
        elif doc["kind"] == "ClusterStorageContainer" and doc["spec"]["workloadType"] == "initContainer":
            isvcs = [d for _, d in _documents() if d["kind"] == "InferenceService"]
            assert isvcs
            for isvc in isvcs:  # KServe injects the container into each one's Pod
                predictor = isvc["spec"]["predictor"]
                assert predictor.get("serviceAccountName")
                _token_file_is_projected(doc["spec"]["container"], _projected_token_volumes(predictor),
                                         f"{path} in {isvc['metadata']['name']}")
            uses_file.add(path.name)
        if doc["kind"] in ("Pod", "DaemonSet", "ClusterStorageContainer"):
            assert "secretKeyRef: {name: modelreg-node-token" in path.read_text(), f"{path}: no fallback"
    assert uses_file == {"cache-warm-daemonset.yaml", "pod-init-container.yaml", "cluster-storage-container.yaml",
                         "local-model-cache-sweeper.yaml"}


def test_kserve_selects_the_modelreg_storage_container_by_uri_prefix():
    storage = [doc for _, doc in _documents() if doc["kind"] == "ClusterStorageContainer"]
    assert {d["spec"]["workloadType"] for d in storage} == {"initContainer", "localModelDownloadJob"}
    for d in storage:
        assert d["apiVersion"] == "serving.kserve.io/v1alpha1"
        assert d["spec"]["container"]["name"] == "storage-initializer"
        assert d["spec"]["supportedUriFormats"] == [{"prefix": "modelreg://"}]
    isvcs = [doc for _, doc in _documents() if doc["kind"] == "InferenceService"]
    assert len(isvcs) == 2
    for isvc in isvcs:
        uri = _storage_uri(isvc)
        assert uri.startswith("modelreg://")
        ref = parse_ref(uri)
        assert (ref.tenant, ref.name) == ("acme", "tiny-llm")


def _storage_uri(isvc: dict) -> str:
    """The predictor's storage URI as KServe reads it: the model spec's ``storageUri``, or the ``STORAGE_URI``
    env var of a custom predictor's ``kserve-container``."""
    predictor = isvc["spec"]["predictor"]
    if "model" in predictor:
        return predictor["model"]["storageUri"]
    (container,) = [c for c in predictor["containers"] if c["name"] == "kserve-container"]
    (uri,) = [e["value"] for e in container["env"] if e["name"] == "STORAGE_URI"]
    return uri


def test_the_dockerfile_copies_what_the_package_needs():
    text = (DEPLOY / "fetch" / "Dockerfile").read_text()
    for source in re.findall(r"^COPY (\S+)", text, re.MULTILINE):
        assert (ROOT / source).exists(), source
    assert _entrypoint()[:2] == ["modelreg", "fetch"]


# --- deploy/kubernetes: the registry itself ---------------------------------------------------------

KUBERNETES = DEPLOY / "kubernetes"
REGISTRY_IMAGE = "modelreg"


def _kube_documents() -> list[dict]:
    return [doc for path in sorted(KUBERNETES.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def _kube(kind: str) -> list[dict]:
    return [doc for doc in _kube_documents() if doc["kind"] == kind]


def _deployment(component: str) -> dict:
    (found,) = [d for d in _kube("Deployment")
                if d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == component]
    return found


def _only_container(doc: dict) -> dict:
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    assert container["image"].split(":")[0] == REGISTRY_IMAGE
    return container


def _matches(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def test_kubernetes_has_every_object_the_registry_needs():
    kinds = sorted(doc["kind"] for doc in _kube_documents())
    assert kinds == sorted(["ConfigMap", "Secret", "Job", "Deployment", "Deployment", "Service",
                            "PodDisruptionBudget", "PodDisruptionBudget"])
    assert _deployment("api")["spec"]["replicas"] >= 2


def test_every_registry_container_runs_a_real_command_reading_real_settings(monkeypatch):
    from registry.settings import InsecureSecretError, Settings, check_secrets

    settings_env = {f"MODELREG_{name.upper()}" for name in Settings.model_fields}
    (config,) = _kube("ConfigMap")
    (secret,) = _kube("Secret")
    provided = {**config["data"], **secret["stringData"]}
    assert set(provided) <= settings_env, f"not settings: {set(provided) - settings_env}"
    # External PostgreSQL and S3, one signing key and presign secret for every replica.
    assert {"MODELREG_DATABASE_URL", "MODELREG_BLOB_STORE_URL", "MODELREG_S3_ENDPOINT_URL",
            "MODELREG_S3_ACCESS_KEY_ID", "MODELREG_S3_SECRET_ACCESS_KEY", "MODELREG_SIGNING_KEY_PEM",
            "MODELREG_PRESIGN_SECRET", "MODELREG_CONSOLE_KEY"} <= set(provided)
    assert provided["MODELREG_DATABASE_URL"].startswith("postgresql://")
    assert provided["MODELREG_BLOB_STORE_URL"].startswith("s3://")
    secret_names = {"MODELREG_DATABASE_URL", "MODELREG_S3_SECRET_ACCESS_KEY", "MODELREG_SIGNING_KEY_PEM",
                    "MODELREG_PRESIGN_SECRET", "MODELREG_CONSOLE_KEY"}
    assert secret_names <= set(secret["stringData"]) and not secret_names & set(config["data"])
    for name, value in provided.items():  # every value parses, read from the environment as a pod reads it
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert [i.audience for i in settings.workload_issuers] == ["modelreg"]
    # A deployment that kept the placeholders does not start with them (issue 30).
    with pytest.raises(InsecureSecretError, match="is an example published"):
        check_secrets(settings)

    workloads = [*_kube("Deployment"), *_kube("Job")]
    commands = {}
    for doc in workloads:
        container = _only_container(doc)
        refs = {next(iter(ref.values()))["name"] for ref in container["envFrom"]}
        assert refs == {config["metadata"]["name"], secret["metadata"]["name"]}, doc["metadata"]["name"]
        command, rest = _resolve(container["command"])
        options = {opt for p in command.params if _is_option(p) for opt in p.opts}
        for arg in rest:
            if arg.startswith("--"):
                assert arg in options, f"{doc['metadata']['name']}: {command.name} has no option {arg}"
        commands[doc["kind"], command.name] = rest
    assert set(commands) == {("Deployment", "serve"), ("Deployment", "worker"), ("Job", "migrate")}
    serve = commands["Deployment", "serve"]
    assert serve[serve.index("--workers") + 1] == "0", "API replicas run no jobs: the workers do"
    (job,) = _kube("Job")
    assert job["spec"]["template"]["spec"]["restartPolicy"] in ("Never", "OnFailure")


def test_the_api_is_probed_on_routes_that_exist_and_served_on_its_port(tmp_path):
    from api.app import create_app
    from registry.bootstrap import bootstrap
    from registry.settings import Settings

    container = bootstrap(Settings(data_dir=tmp_path))  # nothing connects: the app is only described
    try:
        routes = {path for path, ops in create_app(container).openapi()["paths"].items() if "get" in ops}
    finally:
        container.dispose()
    api = _deployment("api")
    c = _only_container(api)
    (port,) = c["ports"]
    command, rest = _resolve(c["command"])
    assert int(rest[rest.index("--port") + 1]) == port["containerPort"]
    assert rest[rest.index("--host") + 1] == "0.0.0.0"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["port"] in (port["name"], port["containerPort"])
        assert c[probe]["httpGet"]["path"] in routes
    annotations = api["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] in routes
    assert int(annotations["prometheus.io/port"]) == port["containerPort"]

    pod_labels = api["spec"]["template"]["metadata"]["labels"]
    assert _matches(api["spec"]["selector"]["matchLabels"], pod_labels)
    (service,) = _kube("Service")
    assert _matches(service["spec"]["selector"], pod_labels)
    assert not _matches(service["spec"]["selector"], _deployment("worker")["spec"]["template"]["metadata"]["labels"])
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= {port["name"], port["containerPort"]}


def test_disruption_budgets_leave_each_deployment_running():
    budgets = _kube("PodDisruptionBudget")
    for component in ("api", "worker"):
        deployment = _deployment(component)
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        (budget,) = [b for b in budgets if _matches(b["spec"]["selector"]["matchLabels"], labels)]
        replicas = deployment["spec"]["replicas"]
        allowed = budget["spec"].get("maxUnavailable", replicas - budget["spec"].get("minAvailable", replicas))
        assert 1 <= allowed < replicas, (component, budget["spec"])
