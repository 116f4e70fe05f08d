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
    assert len(_fetch_containers()) == 4


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
    assert {"MODELREG_URL", "MODELREG_TOKEN", "MODELREG_TRUST_ROOT", "MODELREG_CACHE"} <= env, where
    assert env - {"MODELREG_URL", "MODELREG_TOKEN"} <= read, f"{where}: {command.name} reads none of {env - read}"
    # The required options a container does not pass must come from its environment.
    for p in command.params:
        if _is_option(p) and p.required and not set(p.opts) & set(rest):
            assert p.envvar in env, f"{where}: {p.opts[0]} is required and not set"


def test_kserve_selects_the_modelreg_storage_container_by_uri_prefix():
    storage = [doc for _, doc in _documents() if doc["kind"] == "ClusterStorageContainer"]
    assert {d["spec"]["workloadType"] for d in storage} == {"initContainer", "localModelDownloadJob"}
    for d in storage:
        assert d["apiVersion"] == "serving.kserve.io/v1alpha1"
        assert d["spec"]["container"]["name"] == "storage-initializer"
        assert d["spec"]["supportedUriFormats"] == [{"prefix": "modelreg://"}]
    (isvc,) = [doc for _, doc in _documents() if doc["kind"] == "InferenceService"]
    uri = isvc["spec"]["predictor"]["model"]["storageUri"]
    assert uri.startswith("modelreg://")
    ref = parse_ref(uri)
    assert (ref.tenant, ref.name) == ("acme", "tiny-llm")


def test_the_dockerfile_copies_what_the_package_needs():
    text = (DEPLOY / "fetch" / "Dockerfile").read_text()
    for source in re.findall(r"^COPY (\S+)", text, re.MULTILINE):
        assert (ROOT / source).exists(), source
    assert _entrypoint()[:2] == ["modelreg", "fetch"]
