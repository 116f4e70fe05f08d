"""The KServe example that serves a release unit (``deploy/kserve/inference-service-unit.yaml``): vLLM's settings
come from the release, not from the manifest.

No Kubernetes and no vLLM here. The InferenceService is checked as far as a cluster's API server would take it
(its Pod fields deserialized by the ``kubernetes`` client's own models and written back unchanged), its
storage initializer is injected and run contained exactly as ``tests/e2e/test_kserve_conformance.py`` does
(same ClusterStorageContainer, same projected token, same live registry), against a release whose ``prod``
version is a unit: the tiny Llama with two named chat templates, a prompt template and a serving profile
that names the ``tool_use`` template. Then what the predictor container would start is checked against what
the storage initializer left in ``/mnt/models``: every path its command names exists there, and
``vllm-config.yaml`` holds the profile's settings under vLLM's option names, its paths inside ``/mnt/models``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from kubernetes.client import ApiClient

from registry.domain.serving_profile import parse_serving_profile
from tests.e2e.test_kserve_conformance import (
    KSERVE,
    MODEL_MOUNT,
    STORAGE_URI_ENV,
    USER_CONTAINER_NAME,
    injected_init_container,
    live_cluster,
    predictor_storage_uri,
    run_pod,
)
from tests.support.release_seed import TENANT
from tests.support.tiny_model import tiny_model_files

UNIT_ISVC = KSERVE / "inference-service-unit.yaml"
DEFAULT_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
TOOL_TEMPLATE = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[tools]"
# The tiny Llama's max_position_embeddings is 64: a longer max_model_len would not start in vLLM.
PROFILE = parse_serving_profile({"engine": "vllm", "gpu": {"type": "L4", "count": 1},
                                 "settings": {"max_model_len": 64, "max_num_seqs": 4, "dtype": "bfloat16",
                                              "gpu_memory_utilization": 0.85, "seed": 7,
                                              "enable_prefix_caching": False, "chat_template": "tool_use"}})
# What only the deployment decides, on the command line: where it listens and the name it serves under.
DEPLOYMENT_FLAGS = {"--host", "--port", "--served-model-name"}


def unit_files(number: int) -> dict[str, bytes]:
    """Version ``number`` of the unit: the tiny Llama, its chat templates, a prompt template, a serving profile."""
    files = tiny_model_files(number)
    tokenizer_config = json.loads(files["tokenizer_config.json"])
    tokenizer_config["chat_template"] = [{"name": "default", "template": DEFAULT_TEMPLATE},
                                         {"name": "tool_use", "template": TOOL_TEMPLATE}]
    return {**files, "tokenizer_config.json": json.dumps(tokenizer_config, indent=2).encode(),
            "prompts/support.jinja": b"You support {{ product }}. Answer: {{ question }}",
            "serving-profile.json": PROFILE.canonical_json().encode()}


def predictor_container(isvc: dict) -> dict:
    (container,) = [c for c in isvc["spec"]["predictor"]["containers"] if c["name"] == USER_CONTAINER_NAME]
    return container


def served_argv(container: dict) -> list[str]:
    return [*container["command"], *container["args"]]


def option_values(argv: list[str]) -> dict[str, str]:
    """``--flag value`` pairs of a ``vllm serve MODEL_DIR ...`` command line (none of ours is a bare switch)."""
    options = argv[3:]
    assert len(options) % 2 == 0 and all(f.startswith("--") for f in options[::2]), argv
    return dict(zip(options[::2], options[1::2]))


@pytest.fixture(scope="module")
def manifests() -> tuple[dict, dict]:
    storage_container = yaml.safe_load((KSERVE / "cluster-storage-container.yaml").read_text())
    return storage_container, yaml.safe_load(UNIT_ISVC.read_text())


@pytest.fixture(scope="module")
def cluster(manifests, tmp_path_factory):
    with live_cluster(manifests[1], tmp_path_factory.mktemp("kserve-unit"), files_of=unit_files) as world:
        yield world


def test_the_unit_inference_service_is_a_valid_custom_predictor_with_nothing_of_the_engine_hand_written(manifests):
    storage_container, isvc = manifests
    assert (isvc["apiVersion"], isvc["kind"]) == ("serving.kserve.io/v1beta1", "InferenceService")
    assert set(isvc["spec"]) == {"predictor"}
    predictor = isvc["spec"]["predictor"]
    # The predictor is a PodSpec (KServe inlines it): every field a valid PodSpec field, written back unchanged
    # by the Kubernetes client's own models (a misspelt or misplaced field would be dropped).
    api = ApiClient()
    pod_spec = api._ApiClient__deserialize(predictor, "V1PodSpec")
    assert api.sanitize_for_serialization(pod_spec) == predictor
    container = predictor_container(isvc)
    assert api.sanitize_for_serialization(api._ApiClient__deserialize(container, "V1Container")) == container

    # KServe's storage URI for a custom predictor, one its ClusterStorageContainer supports.
    assert predictor_storage_uri(isvc) == "modelreg://acme/tiny-llm@prod"
    assert [e["name"] for e in container["env"]] == [STORAGE_URI_ENV]
    assert any(predictor_storage_uri(isvc).startswith(f["prefix"])
               for f in storage_container["spec"]["supportedUriFormats"])
    # The same identity as inference-service.yaml: its service account and projected token volume, so the same
    # `modelreg node bind` serves both and the injected storage initializer is the same container.
    plain = yaml.safe_load((KSERVE / "inference-service.yaml").read_text())
    assert predictor["serviceAccountName"] == plain["spec"]["predictor"]["serviceAccountName"]
    assert predictor["volumes"] == plain["spec"]["predictor"]["volumes"]
    assert injected_init_container(storage_container, isvc) == injected_init_container(storage_container, plain)
    # KServe mounts /mnt/models itself (AddModelMount); the container must not claim the path.
    assert not container.get("volumeMounts")

    # vLLM's OpenAI server at a pinned tag, serving /mnt/models with the config fetch wrote; on the command line
    # only what the deployment decides (vLLM lets the command line override the file: anything else would
    # override the release).
    image, tag = container["image"].rsplit(":", 1)
    assert image == "vllm/vllm-openai" and tag not in ("latest", "nightly")
    argv = served_argv(container)
    assert argv[:3] == ["vllm", "serve", MODEL_MOUNT]
    options = option_values(argv)
    assert options.pop("--config") == f"{MODEL_MOUNT}/vllm-config.yaml"
    assert set(options) == DEPLOYMENT_FLAGS
    assert [p["containerPort"] for p in container["ports"]] == [int(options["--port"])]


def test_the_storage_initializer_leaves_what_the_predictor_command_names_with_the_release_settings(manifests,
                                                                                                   cluster):
    server, admin = cluster["server"], cluster["admin"]
    # The profile passed the capacity gate at seal: the release is a unit with a serving profile.
    shown = server.cli("version", "show", f"{TENANT}/{cluster['model']}", "1", token=admin, check=True).stdout
    assert "serving profile: vllm on 1 x L4" in shown and "capacity: fits" in shown

    result, models, _ = run_pod(manifests, cluster, "pod-unit")
    assert result.returncode == 0, result.stdout + result.stderr

    def on_host(path: str) -> Path:
        """Where a path the predictor container sees under /mnt/models is in this Pod's emptyDir."""
        assert path == MODEL_MOUNT or path.startswith(MODEL_MOUNT + "/"), path
        return models / Path(path).relative_to(MODEL_MOUNT)

    container = predictor_container(manifests[1])
    named = [a for a in served_argv(container) if a.startswith("/")]
    assert named == [MODEL_MOUNT, f"{MODEL_MOUNT}/vllm-config.yaml"]
    for path in named:
        assert on_host(path).exists(), f"{path}: the predictor's command names it, the storage initializer left none"

    config = yaml.safe_load(on_host(f"{MODEL_MOUNT}/vllm-config.yaml").read_text())
    # The profile's settings under vLLM's option names, its defaults filled in; paths inside /mnt/models.
    assert config == {"max-model-len": 64, "max-num-seqs": 4, "dtype": "bfloat16", "kv-cache-dtype": "auto",
                      "tensor-parallel-size": 1, "pipeline-parallel-size": 1, "gpu-memory-utilization": 0.85,
                      "seed": 7, "no-enable-prefix-caching": True, "generation-config": MODEL_MOUNT,
                      "chat-template": f"{MODEL_MOUNT}/modelreg-chat-template.jinja"}
    for name, value in PROFILE.settings.items():
        if name not in ("chat_template", "generation_config", "enable_prefix_caching"):
            assert config[name.replace("_", "-")] == value, name
    assert on_host(config["chat-template"]).read_text() == TOOL_TEMPLATE
    assert (on_host(config["generation-config"]) / "generation_config.json").is_file()
    # Nothing on the command line overrides the release's settings.
    assert not {f"--{key}" for key in config} & set(option_values(served_argv(container)))
    # The GPUs asked for are the ones the profile's capacity was checked for.
    assert int(container["resources"]["limits"]["nvidia.com/gpu"]) == PROFILE.gpu_count

    unit = json.loads((models / "modelreg-unit.json").read_text())
    assert (unit["model"], unit["ref"], unit["version"]) == (f"{TENANT}/{cluster['model']}", "prod", 1)
    assert unit["serving_profile"] == hashlib.sha256(PROFILE.canonical_json().encode()).hexdigest()
    assert unit["prompt_templates"] == ["support"] and unit["engine_config"] == "vllm-config.yaml"
    for path, data in unit_files(1).items():
        assert (models / path).read_bytes() == data, path
