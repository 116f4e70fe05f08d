"""Model references in Kubernetes objects: every kind and path, as the API server sends the objects.

The objects are shaped as an ``AdmissionReview``'s ``request.object`` arrives at a validating webhook: after
the API server's defaulting and KServe's own mutating webhooks (metadata with uid and managedFields, defaulted
container fields, KServe's injected ``storage-initializer`` and modelcar containers in a predictor's Pod),
taken from KServe's samples (kserve/kserve/docs/samples: llmisvc/lora-adapters, localmodelcache) and its types.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import typer.main

from registry.domain.admission_refs import (
    FETCH_FLAGS,
    FETCH_VALUE_OPTIONS,
    KINDS,
    MAX_DEPTH,
    MAX_NODES,
    MAX_REFERENCES,
    MAX_TEXT,
    MAX_URI_LENGTH,
    ModelReference,
    references_of,
)
from registry.domain.errors import InvalidInputError, LimitExceededError

DIGEST = "sha256:" + "ab" * 32


def _metadata(name: str, namespace: str | None = "ml-prod") -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name, "uid": "6f0d2a8e-3c4b-4f7e-9d1a-2b5c8e7f0a13", "generation": 1,
        "creationTimestamp": "2026-08-21T10:00:00Z", "labels": {"app": name},
        "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update",
                           "apiVersion": "v1", "time": "2026-08-21T10:00:00Z", "fieldsType": "FieldsV1",
                           "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}],
    }
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def _defaulted(container: dict[str, Any]) -> dict[str, Any]:
    """A container as the API server stores it: its defaults filled in."""
    return {"imagePullPolicy": "IfNotPresent", "resources": {}, "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File", **container}


def _triples(obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(r.uri, r.path, r.kind) for r in references_of(obj)]


def _at(obj: Any, path: str) -> Any:
    """The value an RFC 6901 pointer names."""
    for token in path.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        obj = obj[int(token)] if isinstance(obj, list) else obj[token]
    return obj


# --- InferenceService --------------------------------------------------------------------------------


def inference_service() -> dict[str, Any]:
    """Every place a v1beta1 InferenceService holds a storage URI, after KServe's defaulting webhook."""
    return {
        "apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {**_metadata("tiny-llm"), "annotations": {"serving.kserve.io/deploymentMode": "Standard"}},
        "spec": {
            "predictor": {
                "minReplicas": 1, "serviceAccountName": "tiny-llm",
                "model": {
                    "modelFormat": {"name": "huggingface"}, "protocolVersion": "v2",
                    "storageUri": "modelreg://acme/tiny-llm@prod", "name": "",
                    "resources": {"limits": {"cpu": "1", "memory": "2Gi"}, "requests": {"cpu": "1", "memory": "2Gi"}},
                    "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}],
                },
                "storageUris": [{"uri": "s3://models/tokenizer", "mountPath": "/mnt/tokenizer"}],
                "workerSpec": {"tensorParallelSize": 2, "containers": [_defaulted({
                    "name": "worker-container", "image": "kserve/huggingfaceserver:v0.15",
                    "env": [{"name": "STORAGE_URI", "value": "hf://acme/worker"}]})]},
                "volumes": [{"name": "weights", "image": {"reference": f"registry.acme.example/acme/tiny-llm@{DIGEST}",
                                                          "pullPolicy": "IfNotPresent"}}],
            },
            "transformer": {
                "containers": [_defaulted({
                    "name": "kserve-container", "image": "acme/tokenize:1",
                    "env": [{"name": "PROTOCOL", "value": "v2"}, {"name": "STORAGE_URI", "value": "gs://acme/tok"}],
                })],
            },
            "explainer": {"art": {"type": "SquareAttack", "storageUri": "oci://registry.acme.example/acme/art:1",
                                  "resources": {}}},
            "canary": [{"trafficPercent": 10, "predictor": {
                "name": "v2",
                "sklearn": {"storageUri": "modelreg://acme/tiny-llm@canary", "protocolVersion": "v1",
                            "storage": {"key": "minio", "path": "models/sklearn", "parameters": {"bucket": "x"}}},
            }}],
        },
        "status": {},
    }


def test_an_inference_service_names_every_storage_uri_of_every_component():
    assert _triples(inference_service()) == [
        ("modelreg://acme/tiny-llm@prod", "/spec/predictor/model/storageUri", "storage-uri"),
        ("s3://models/tokenizer", "/spec/predictor/storageUris/0/uri", "storage-uri"),
        (f"registry.acme.example/acme/tiny-llm@{DIGEST}", "/spec/predictor/volumes/0/image/reference",
         "image-volume"),
        ("hf://acme/worker", "/spec/predictor/workerSpec/containers/0/env/0/value", "storage-uri"),
        ("gs://acme/tok", "/spec/transformer/containers/0/env/1/value", "storage-uri"),
        ("oci://registry.acme.example/acme/art:1", "/spec/explainer/art/storageUri", "storage-uri"),
        ("modelreg://acme/tiny-llm@canary", "/spec/canary/0/predictor/sklearn/storageUri", "storage-uri"),
        ("models/sklearn", "/spec/canary/0/predictor/sklearn/storage/path", "storage-uri"),
    ]


@pytest.mark.parametrize("framework", ["model", "huggingface", "sklearn", "xgboost", "tensorflow", "pytorch",
                                       "triton", "onnx", "pmml", "lightgbm", "paddle"])
def test_every_predictor_runtime_spec_is_read(framework):
    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": _metadata("m"),
            "spec": {"predictor": {framework: {"storageUri": "hf://acme/m", "env": [
                {"name": "STORAGE_URI", "value": "hf://acme/env"}]}}}}
    assert _triples(isvc) == [("hf://acme/m", f"/spec/predictor/{framework}/storageUri", "storage-uri"),
                              ("hf://acme/env", f"/spec/predictor/{framework}/env/0/value", "storage-uri")]


def test_a_custom_predictor_names_its_storage_uri_in_the_kserve_container_env():
    """deploy/kserve/inference-service-unit.yaml's shape: no runtime spec, STORAGE_URI on kserve-container."""
    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": _metadata("u"),
            "spec": {"predictor": {"containers": [_defaulted({
                "name": "kserve-container", "image": "vllm/vllm-openai:latest", "command": ["vllm", "serve"],
                "args": ["/mnt/models"], "env": [{"name": "STORAGE_URI", "value": "modelreg://acme/u@prod"}]})]}}}
    assert _triples(isvc) == [("modelreg://acme/u@prod", "/spec/predictor/containers/0/env/0/value", "storage-uri")]


# --- LLMInferenceService -------------------------------------------------------------------------------


def llm_inference_service(api_version: str = "serving.kserve.io/v1alpha2") -> dict[str, Any]:
    """kserve/kserve/docs/samples/llmisvc/lora-adapters/test-examples/02-lora-multi-hf-cpu.yaml, pointed at the
    registry, with a prefill pool, a worker and a scheduler template."""
    main = _defaulted({"name": "main", "image": "vllm/vllm-openai-cpu:v0.19.0",
                       "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]})
    return {
        "apiVersion": api_version, "kind": "LLMInferenceService", "metadata": _metadata("lora-multi"),
        "spec": {
            "model": {"uri": "hf://acme/opt-125m", "name": "facebook/opt-125m", "lora": {
                "adapters": [{"name": "adapter-1", "uri": "modelreg://acme/opt-lora@prod"},
                             {"name": "adapter-2", "uri": "s3://acme-adapters/opt-lora-2"}],
                "maxRank": 64, "maxAdapters": 2}},
            "replicas": 1,
            "router": {"scheduler": {"template": {"containers": [_defaulted({
                "name": "main", "image": "epp:1", "env": [{"name": "STORAGE_URI", "value": "hf://acme/sched"}]})]},
                "tokenizer": {"template": {"volumes": [{"name": "tok", "image": {"reference": "acme/tok:1"}}]}}},
                "route": {}, "gateway": {}},
            "template": {"initContainers": [_defaulted({
                "name": "fetch", "image": "modelreg-fetch:0.1.0",
                "args": ["--trust-root", "/etc/modelreg/root.json", "acme/opt-125m@3", "/mnt/models"]})],
                "containers": [main]},
            "worker": {"containers": [main]},
            "prefill": {"replicas": 2,
                        "template": {"volumes": [{"name": "w", "image": {"reference": "acme/prefill:1"}}],
                                     "containers": [main]},
                        "worker": {"initContainers": [_defaulted({
                            "name": "fetch", "image": "modelreg:0.1.0",
                            "command": ["modelreg", "fetch", "modelreg://acme/opt-125m@prod", "/mnt/models"]})]}},
            "baseRefs": [{"name": "llmisvc-config"}],
        },
    }


@pytest.mark.parametrize("api_version", ["serving.kserve.io/v1alpha1", "serving.kserve.io/v1alpha2"])
def test_an_llm_inference_service_names_its_model_its_adapters_and_its_pods(api_version):
    assert _triples(llm_inference_service(api_version)) == [
        ("hf://acme/opt-125m", "/spec/model/uri", "storage-uri"),
        ("modelreg://acme/opt-lora@prod", "/spec/model/lora/adapters/0/uri", "adapter-uri"),
        ("s3://acme-adapters/opt-lora-2", "/spec/model/lora/adapters/1/uri", "adapter-uri"),
        ("acme/opt-125m@3", "/spec/template/initContainers/0/args/2", "init-fetch"),
        ("acme/prefill:1", "/spec/prefill/template/volumes/0/image/reference", "image-volume"),
        ("modelreg://acme/opt-125m@prod", "/spec/prefill/worker/initContainers/0/command/2", "init-fetch"),
        ("hf://acme/sched", "/spec/router/scheduler/template/containers/0/env/0/value", "storage-uri"),
        ("acme/tok:1", "/spec/router/scheduler/tokenizer/template/volumes/0/image/reference", "image-volume"),
    ]


def test_an_adapter_of_an_adapter_is_read_too():
    """The CRD leaves an adapter's spec schemaless, and an adapter is a model spec: it may carry adapters."""
    obj = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "LLMInferenceService", "metadata": _metadata("l"),
           "spec": {"model": {"uri": "modelreg://acme/base@1", "lora": {"adapters": [
               {"uri": "modelreg://acme/a@1", "lora": {"adapters": [{"uri": "hf://x/y"}]}}]}}}}
    assert _triples(obj)[-1] == ("hf://x/y", "/spec/model/lora/adapters/0/lora/adapters/0/uri", "adapter-uri")


# --- LocalModelCache, LocalModelNamespaceCache, TrainedModel -------------------------------------------


@pytest.mark.parametrize("kind,namespace", [("LocalModelCache", None), ("LocalModelNamespaceCache", "ml-prod")])
def test_a_local_model_cache_names_its_source(kind, namespace):
    """The objects of kserve/kserve/docs/samples/localmodelcache/README.md; LocalModelCache is cluster-scoped."""
    obj = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": kind, "metadata": _metadata("llama3-8b", namespace),
           "spec": {"sourceModelUri": "hf://meta-llama/Meta-Llama-3-8B", "modelSize": "10Gi",
                    "nodeGroups": ["workers"], "storage": {"key": "hf-credentials"}}}
    assert _triples(obj) == [("hf://meta-llama/Meta-Llama-3-8B", "/spec/sourceModelUri", "local-model-cache")]


def test_a_trained_model_names_its_storage_uri():
    obj = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "TrainedModel", "metadata": _metadata("tm"),
           "spec": {"inferenceService": "sklearn-mms", "model": {
               "storageUri": "modelreg://acme/iris@2", "framework": "sklearn", "memory": "256Mi"}}}
    assert _triples(obj) == [("modelreg://acme/iris@2", "/spec/model/storageUri", "storage-uri")]


# --- Pods ----------------------------------------------------------------------------------------------


def kserve_pod() -> dict[str, Any]:
    """A predictor Pod as KServe's pod mutator leaves it: the storage initializer (two URIs), a modelcar and its
    init container, an image volume, and the serving container."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {**_metadata("tiny-llm-predictor-7d9f-abcde"), "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "tiny-llm-predictor-7d9f", "uid": "1",
             "controller": True, "blockOwnerDeletion": True}]},
        "spec": {
            "serviceAccountName": "tiny-llm", "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
            "volumes": [
                {"name": "kserve-provision-location", "emptyDir": {}},
                {"name": "model", "image": {"reference": f"registry.acme.example/acme/tiny-llm@{DIGEST}",
                                            "pullPolicy": "IfNotPresent"}},
                {"name": "kube-api-access-x", "projected": {"sources": [{"serviceAccountToken": {
                    "expirationSeconds": 3607, "path": "token"}}]}},
            ],
            "initContainers": [
                _defaulted({"name": "storage-initializer", "image": "kserve/storage-initializer:v0.15.0",
                            "args": ["modelreg://acme/tiny-llm@prod", "/mnt/models",
                                     "hf://acme/tokenizer", "/mnt/tokenizer"],
                            "volumeMounts": [{"name": "kserve-provision-location", "mountPath": "/mnt/models"}]}),
                _defaulted({"name": "modelcar-init", "image": "registry.acme.example/acme/tiny-llm:prod",
                            "args": ["sh", "-c", "echo 'Pre-fetching modelcar' && [ -d /models ]"]}),
            ],
            "containers": [
                _defaulted({"name": "kserve-container", "image": "kserve/huggingfaceserver:v0.15.0",
                            "args": ["--model_dir=/mnt/models"],
                            "ports": [{"containerPort": 8080, "protocol": "TCP"}]}),
                _defaulted({"name": "modelcar-1", "image": "registry.acme.example/acme/other:2",
                            "args": ["sh", "-c", "ln -s /proc/$$$$/root/models /mnt/ && sleep infinity"]}),
            ],
        },
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


def test_a_kserve_predictor_pod_names_its_storage_initializer_uris_modelcars_and_image_volume():
    assert _triples(kserve_pod()) == [
        (f"registry.acme.example/acme/tiny-llm@{DIGEST}", "/spec/volumes/1/image/reference", "image-volume"),
        ("modelreg://acme/tiny-llm@prod", "/spec/initContainers/0/args/0", "storage-uri"),
        ("hf://acme/tokenizer", "/spec/initContainers/0/args/2", "storage-uri"),
        ("registry.acme.example/acme/tiny-llm:prod", "/spec/initContainers/1/image", "image-volume"),
        ("registry.acme.example/acme/other:2", "/spec/containers/1/image", "image-volume"),
    ]


def _pod_with(container: dict[str, Any], key: str = "initContainers") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _metadata("p"),
            "spec": {key: [_defaulted({"name": "fetch-weights", **container})]}}


@pytest.mark.parametrize("container,path", [
    # deploy/k8s/pod-init-container.yaml: the fetch image's entrypoint is modelreg fetch.
    ({"image": "modelreg-fetch:latest", "args": ["modelreg://acme/m@prod", "/mnt/models", "--parallel", "8"]},
     "/args/0"),
    ({"image": "registry.acme.example:5000/tools/modelreg-fetch@" + DIGEST,
      "args": ["--trust-root", "/etc/root.json", "--with-base", "--witness", "https://w", "modelreg://acme/m@prod",
               "/mnt/models"]}, "/args/5"),
    ({"image": "modelreg:1", "command": ["modelreg", "fetch"], "args": ["modelreg://acme/m@prod", "/mnt/models"]},
     "/args/0"),
    ({"image": "modelreg:1", "command": ["/usr/local/bin/modelreg", "fetch", "--json", "--cache=/var/cache",
                                         "modelreg://acme/m@prod", "/mnt/models"]}, "/command/4"),
    ({"image": "modelreg:1", "command": ["python3.12", "-m", "registry.cli", "fetch"],
      "args": ["--trust-root-sha256", "ab" * 32, "modelreg://acme/m@prod", "/mnt"]}, "/args/2"),
    ({"image": "modelreg:1", "command": ["/usr/bin/env", "MODELREG_CACHE=/c", "modelreg", "fetch", "--",
                                         "modelreg://acme/m@prod", "/mnt"]}, "/command/5"),
    # No command, an image without an entrypoint: its args are the whole argv.
    ({"image": "python:3.12", "args": ["modelreg", "fetch", "modelreg://acme/m@prod", "/mnt"]}, "/args/2"),
])
def test_a_container_running_modelreg_fetch_names_its_ref(container, path):
    (ref,) = references_of(_pod_with(container))
    assert ref == ModelReference("modelreg://acme/m@prod", "/spec/initContainers/0" + path, "init-fetch")


@pytest.mark.parametrize("key", ["containers", "ephemeralContainers"])
def test_a_fetch_in_any_container_is_read(key):
    (ref,) = references_of(_pod_with({"image": "modelreg-fetch:1", "args": ["acme/m@1", "/mnt"]}, key))
    assert ref.path == f"/spec/{key}/0/args/0"


@pytest.mark.parametrize("container", [
    {"image": "modelreg:1", "command": ["sh", "-c", "modelreg fetch hf://acme/m /mnt"]},  # scripts are not read
    {"image": "modelreg:1", "command": ["modelreg", "cache", "warm"], "args": ["modelreg://acme/m@prod"]},
    {"image": "modelreg:1", "command": ["modelreg", "fetch", "--json"]},  # no REF: the command refuses to run
    {"image": "modelreg-fetch:1", "command": ["sleep", "1"], "args": ["modelreg://acme/m@prod"]},
    {"image": "busybox", "args": ["fetch", "modelreg://acme/m@prod"]},
    {"image": "vllm/vllm-openai:latest", "args": ["--model", "/mnt/models"]},
])
def test_containers_that_do_not_run_modelreg_fetch_name_nothing(container):
    assert references_of(_pod_with(container)) == []


def test_a_fetch_with_an_option_it_does_not_have_is_refused_naming_it():
    pod = _pod_with({"image": "modelreg-fetch:1", "args": ["--insecure", "hf://evil/m", "/mnt"]})
    with pytest.raises(InvalidInputError, match="/spec/initContainers/0/args/0: modelreg fetch takes no option "
                                                "'--insecure'") as err:
        references_of(pod)
    assert err.value.details["path"] == "/spec/initContainers/0/args/0"
    pod = _pod_with({"image": "modelreg-fetch:1", "args": ["--with-base=yes", "acme/m@1", "/mnt"]})
    with pytest.raises(InvalidInputError, match="takes no option '--with-base=yes'"):
        references_of(pod)


def test_the_fetch_options_read_are_the_commands_own():
    """A new option of ``modelreg fetch`` that takes a value, unknown here, would make the REF read wrong."""
    from registry.cli import app

    fetch = typer.main.get_command(app).commands["fetch"]
    options = [p for p in fetch.params if p.param_type_name == "option"]
    assert {o for p in options if p.is_flag for o in p.opts} == FETCH_FLAGS
    assert {o for p in options if not p.is_flag for o in p.opts} == FETCH_VALUE_OPTIONS
    assert not [o for p in options for o in p.secondary_opts], "a --no-X form: read it too"
    assert [p.name for p in fetch.params if p.param_type_name == "argument"] == ["ref", "dest"]


# --- every reference, wherever it is, points at itself ---------------------------------------------------


ALL_OBJECTS = [inference_service, llm_inference_service, kserve_pod]


@pytest.mark.parametrize("build", ALL_OBJECTS, ids=lambda b: b.__name__)
def test_every_path_points_at_the_uri_it_names(build):
    obj = build()
    refs = references_of(obj)
    assert refs and {r.kind for r in refs} <= set(KINDS)
    for ref in refs:
        assert _at(obj, ref.path) == ref.uri, ref


def test_the_object_is_only_read():
    obj = inference_service()
    before = copy.deepcopy(obj)
    references_of(obj)
    assert obj == before


# --- what is not read ------------------------------------------------------------------------------------


@pytest.mark.parametrize("obj", [
    {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {"spec": {"volumes": [
        {"name": "m", "image": {"reference": "hf://x"}}]}}}},  # its Pods are read when they are created
    {"apiVersion": "v1", "kind": "ConfigMap", "data": {"storageUri": "hf://x/y"}},
    {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime", "spec": {}},
    {"apiVersion": "other.example/v1beta1", "kind": "InferenceService", "spec": {"predictor": {
        "model": {"storageUri": "hf://x/y"}}}},
    {"kind": "Pod"},
    {},
])
def test_other_kinds_carry_no_references(obj):
    assert references_of(obj) == []


def test_empty_and_null_fields_are_unset():
    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "spec": {"predictor": {"model": {"storageUri": ""}, "sklearn": None, "storageUris": None,
                                   "containers": [{"name": "c", "env": [{"name": "STORAGE_URI", "value": ""}]}]}}}
    assert references_of(isvc) == []


# --- hostile input -----------------------------------------------------------------------------------


def test_a_known_kind_at_a_version_not_read_is_refused():
    obj = inference_service()
    obj["apiVersion"] = "serving.kserve.io/v1"
    with pytest.raises(InvalidInputError, match="InferenceService serving.kserve.io/v1 is not read") as err:
        references_of(obj)
    assert err.value.details["path"] == "/apiVersion"
    with pytest.raises(InvalidInputError, match="is not read"):
        references_of({"apiVersion": "v2", "kind": "Pod", "spec": {}})


@pytest.mark.parametrize("mutate,path,expected", [
    (lambda o: o["spec"]["predictor"].__setitem__("model", ["x"]), "/spec/predictor/model", "an object"),
    (lambda o: o["spec"]["predictor"]["model"].__setitem__("storageUri", 7), "/spec/predictor/model/storageUri",
     "a string"),
    (lambda o: o["spec"]["predictor"].__setitem__("storageUris", {"uri": "x"}), "/spec/predictor/storageUris",
     "an array"),
    (lambda o: o["spec"]["predictor"]["storageUris"].__setitem__(0, "s3://x"), "/spec/predictor/storageUris/0",
     "an object"),
    (lambda o: o["spec"]["transformer"]["containers"][0]["env"][1].__setitem__("value", ["hf://x"]),
     "/spec/transformer/containers/0/env/1/value", "a string"),
    (lambda o: o["spec"]["predictor"]["volumes"][0].__setitem__("image", "acme/x:1"),
     "/spec/predictor/volumes/0/image", "an object"),
    (lambda o: o["spec"]["canary"][0]["predictor"]["sklearn"]["storage"].__setitem__("path", True),
     "/spec/canary/0/predictor/sklearn/storage/path", "a string"),
    (lambda o: o.__setitem__("spec", "x"), "/spec", "an object"),
    (lambda o: o.__setitem__("kind", 3), "/kind", "a string"),
])
def test_a_wrong_type_is_refused_naming_its_path(mutate, path, expected):
    obj = inference_service()
    mutate(obj)
    with pytest.raises(InvalidInputError, match=f"{path} must be {expected}") as err:
        references_of(obj)
    assert err.value.details["path"] == path


def test_wrong_types_in_pods_are_refused_naming_their_path():
    pod = _pod_with({"image": "modelreg-fetch:1", "args": ["acme/m@1", 2]})
    with pytest.raises(InvalidInputError, match="/spec/initContainers/0/args/1 must be a string"):
        references_of(pod)
    pod = kserve_pod()
    pod["spec"]["initContainers"] = {"name": "x"}
    with pytest.raises(InvalidInputError, match="/spec/initContainers must be an array, not an object"):
        references_of(pod)
    with pytest.raises(InvalidInputError, match="must be a JSON object"):
        references_of(["not", "an", "object"])  # type: ignore[arg-type]


def test_an_object_nested_too_deep_is_refused():
    deep: dict[str, Any] = {}
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": deep}, "spec": {}}
    for _ in range(MAX_DEPTH):
        deep["x"] = {}
        deep = deep["x"]
    with pytest.raises(LimitExceededError, match=f"nests deeper than {MAX_DEPTH}"):
        references_of(obj)
    # Under the limit, and a list nesting counts the same.
    assert references_of({"apiVersion": "v1", "kind": "Pod", "spec": {"x": [[[[]]]]}}) == []


def test_an_object_with_too_many_values_or_too_much_text_is_refused():
    many = {"apiVersion": "v1", "kind": "Pod", "spec": {"tolerations": [{}] * MAX_NODES}}
    with pytest.raises(LimitExceededError, match=f"more than {MAX_NODES} values"):
        references_of(many)
    big = {"apiVersion": "v1", "kind": "Pod", "metadata": {"annotations": {"a": "x" * MAX_TEXT}}, "spec": {}}
    with pytest.raises(LimitExceededError, match="characters of text"):
        references_of(big)
    half = MAX_TEXT // 2
    keys = {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"k" * half: "", "j" * half: "v"}}}
    with pytest.raises(LimitExceededError, match="characters of text"):
        references_of(keys)


def test_too_many_references_or_too_long_a_one_is_refused():
    volumes = [{"name": f"v{i}", "image": {"reference": f"acme/m:{i}"}} for i in range(MAX_REFERENCES + 1)]
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": {"volumes": volumes}}
    with pytest.raises(LimitExceededError, match=f"{MAX_REFERENCES + 1} model references, over the limit"):
        references_of(pod)
    pod["spec"]["volumes"] = volumes[:MAX_REFERENCES]
    assert len(references_of(pod)) == MAX_REFERENCES
    pod["spec"]["volumes"] = [{"name": "v", "image": {"reference": "a" * (MAX_URI_LENGTH + 1)}}]
    with pytest.raises(LimitExceededError, match="/spec/volumes/0/image/reference is 4097 characters"):
        references_of(pod)
