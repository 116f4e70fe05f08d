"""Every model reference a Kubernetes object carries, with the JSON pointer to where it is written.

The admission webhook asks the registry about each reference a Pod or KServe resource would make a node load;
this module finds them, reading the objects as the API server sends them (``request.object`` of an
``AdmissionReview``), and does no I/O. It reads:

- ``InferenceService`` (``serving.kserve.io/v1beta1``): ``storageUri`` and ``storage.path`` of every framework
  spec of the predictor (``model``, ``huggingface``, ``sklearn`` ...) and the explainer (``art``), each
  component's ``storageUris[].uri``, the canaries' predictors, and the pod spec each component inlines;
- ``LLMInferenceService`` (``v1alpha1``, ``v1alpha2``): ``spec.model.uri``, the LoRA adapters'
  ``spec.model.lora.adapters[].uri``, and its pod templates (workload, worker, prefill, scheduler, tokenizer);
- ``LocalModelCache`` and ``LocalModelNamespaceCache`` (``v1alpha1``): ``spec.sourceModelUri``;
- ``TrainedModel`` (``v1alpha1``): ``spec.model.storageUri``;
- ``Pod`` (``v1``) and every pod spec above: ``volumes[].image.reference``, the ``STORAGE_URI`` variable of any
  container, KServe's injected ``storage-initializer`` (its ``[uri, dest]`` argument pairs) and modelcar
  containers (their image is the model), and any container that runs ``modelreg fetch REF DEST``.

A container runs ``modelreg fetch`` when its argv (``command`` + ``args``; ``args`` alone when there is no
``command``, and ``modelreg fetch`` + ``args`` for the shipped ``modelreg-fetch`` image, whose entrypoint that
is) starts with ``modelreg fetch``, ``/any/path/modelreg fetch``, ``python -m registry.cli fetch`` or one of
these after ``env [NAME=VALUE ...]``; the reference is its first positional argument. A shell script
(``sh -c "..."``) is not read: what a script downloads is not a reference anyone can check.

Kinds of reference: ``storage-uri`` (a storage URI, or ``storage.path`` under a storage key: a location the
registry decides on or policy allows), ``adapter-uri``, ``local-model-cache``, ``image-volume`` (an OCI image
reference whose content is the model: an image volume or a modelcar container) and ``init-fetch``. An object
of another kind has none; a kind this module reads, at an ``apiVersion`` it does not know, is refused (the
webhook asks for the versions it reads, so another is a mistake, and guessing could miss a reference).

Example:
    >>> isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
    ...         "spec": {"predictor": {"model": {"modelFormat": {"name": "huggingface"},
    ...                                          "storageUri": "modelreg://acme/llm@prod"}}}}
    >>> references_of(isvc)
    [ModelReference(uri='modelreg://acme/llm@prod', path='/spec/predictor/model/storageUri', kind='storage-uri')]
    >>> pod = {"apiVersion": "v1", "kind": "Pod", "spec": {"initContainers": [{"name": "w",
    ...        "image": "modelreg-fetch:1", "args": ["--with-base", "acme/lora@3", "/mnt/models"]}]}}
    >>> [(r.uri, r.path, r.kind) for r in references_of(pod)]
    [('acme/lora@3', '/spec/initContainers/0/args/1', 'init-fetch')]
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from registry.domain.errors import InvalidInputError, LimitExceededError

STORAGE_URI = "storage-uri"
ADAPTER_URI = "adapter-uri"
LOCAL_MODEL_CACHE = "local-model-cache"
IMAGE_VOLUME = "image-volume"
INIT_FETCH = "init-fetch"
KINDS = (STORAGE_URI, ADAPTER_URI, LOCAL_MODEL_CACHE, IMAGE_VOLUME, INIT_FETCH)

MAX_DEPTH = 64
"""Deepest nesting of objects and arrays read (a real pod spec nests about 15 deep)."""
MAX_NODES = 100_000
"""Most values (objects, arrays, strings, numbers) in one object."""
MAX_TEXT = 3 << 20
"""Most characters of keys and strings in one object (the API server takes requests of 3 MiB)."""
MAX_REFERENCES = 128
"""Most model references one object may carry."""
MAX_URI_LENGTH = 4096
"""Longest reference read."""

KSERVE = "serving.kserve.io"
READ_VERSIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "Pod"): ("v1",),
    (KSERVE, "InferenceService"): ("v1beta1",),
    (KSERVE, "LLMInferenceService"): ("v1alpha1", "v1alpha2"),
    (KSERVE, "LocalModelCache"): ("v1alpha1",),
    (KSERVE, "LocalModelNamespaceCache"): ("v1alpha1",),
    (KSERVE, "TrainedModel"): ("v1alpha1",),
}
"""The (group, kind) pairs read, and the versions of each."""

PREDICTOR_FRAMEWORKS = ("model", "huggingface", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx",
                        "pmml", "lightgbm", "paddle")
"""The predictor's runtime specs (``PredictorSpec`` in KServe's v1beta1 types), each with ``storageUri``."""
EXPLAINER_FRAMEWORKS = ("art",)

FETCH_IMAGE = "modelreg-fetch"
"""The shipped fetch image (deploy/fetch/Dockerfile): its entrypoint is ``modelreg fetch``."""
FETCH_FLAGS = frozenset({"--with-base", "--json"})
"""The options of ``modelreg fetch`` that take no value (every other one takes the next argument)."""
FETCH_VALUE_OPTIONS = frozenset({
    "--trust-root", "--trust-root-sha256", "--cache", "--parallel", "--cache-high", "--cache-low",
    "--recheck-hours", "--witness", "--witness-quorum", "--part-size", "--metrics-textfile", "--url", "--token",
    "--token-file"})
"""The options of ``modelreg fetch`` that take a value (tests/unit/test_admission_refs.py checks both sets
against the command itself)."""

STORAGE_INITIALIZER = "storage-initializer"
"""The init container KServe injects, with arguments ``[uri, dest, uri, dest ...]``."""
_MODELCAR_RE = re.compile(r"\Amodelcar(-init)?(-[0-9]+)?\Z")
"""KServe's modelcar containers (``modelcar``, ``modelcar-init``, ``-N`` for the N-th OCI source)."""
_PYTHON_RE = re.compile(r"\Apython[0-9.]*\Z")
_ENV_ASSIGNMENT_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class ModelReference:
    """A model reference as written in an object.

    Attributes:
        uri: The reference exactly as written.
        path: RFC 6901 JSON pointer to it in the object, e.g. ``/spec/predictor/model/storageUri`` (its tokens
            are field names and array indices, none with a ``~`` or ``/`` to escape).
        kind: One of :data:`KINDS`.
    """

    uri: str
    path: str
    kind: str


def references_of(obj: Mapping[str, Any]) -> list[ModelReference]:
    """Every model reference ``obj`` carries, in the order they are written.

    Args:
        obj: A Kubernetes object as the API server sends it (decoded JSON).

    Raises:
        LimitExceededError: the object is too deep or too large, or carries too many references or too long a
            one.
        InvalidInputError: a field read has the wrong type (naming its path), or the object is a kind this
            module reads at an ``apiVersion`` it does not.
    """
    if not isinstance(obj, Mapping):
        raise InvalidInputError("the object must be a JSON object", path="")
    _check_bounds(obj)
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    for key, value in (("apiVersion", api_version), ("kind", kind)):
        if value is not None and not isinstance(value, str):
            raise _wrong_type(f"/{key}", "a string", value)
    if api_version is None or kind is None:
        return []
    group, _, version = api_version.rpartition("/")
    versions = READ_VERSIONS.get((group, kind))
    if versions is None:
        return []
    if version not in versions:
        raise InvalidInputError(f"{kind} {api_version} is not read: the webhook reads {kind} "
                                f"{', '.join(f'{group}/{v}' if group else v for v in versions)}",
                                path="/apiVersion", api_version=api_version, kind=kind)
    found = list(_READERS[kind](obj))
    if len(found) > MAX_REFERENCES:
        raise LimitExceededError(f"the object carries {len(found)} model references, over the limit of "
                                 f"{MAX_REFERENCES}", path="", count=len(found), limit=MAX_REFERENCES)
    return found


# --- bounds and typed access -----------------------------------------------------------------------


def _check_bounds(obj: Mapping[str, Any]) -> None:
    """Refuse an object deeper, or with more values or text, than the limits (before reading any of it)."""
    nodes = text = 0
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise LimitExceededError(f"the object has more than {MAX_NODES} values", path="", limit=MAX_NODES)
        if isinstance(value, str):
            text += len(value)
        elif isinstance(value, Mapping | list):
            if depth > MAX_DEPTH:
                raise LimitExceededError(f"the object nests deeper than {MAX_DEPTH}", path="", limit=MAX_DEPTH)
            if isinstance(value, Mapping):
                text += sum(len(k) if isinstance(k, str) else 0 for k in value)
                stack.extend((v, depth + 1) for v in value.values())
            else:
                stack.extend((v, depth + 1) for v in value)
        if text > MAX_TEXT:
            raise LimitExceededError(f"the object has more than {MAX_TEXT} characters of text", path="",
                                     limit=MAX_TEXT)


def _wrong_type(path: str, expected: str, value: Any) -> InvalidInputError:
    return InvalidInputError(f"{path or '/'} must be {expected}, not {_json_type(value)}", path=path,
                             expected=expected)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, Mapping) else type(value).__name__


def _object(parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any] | None:
    """``parent[key]`` when it is an object; None when absent or null."""
    value = parent.get(key)
    if value is None or isinstance(value, Mapping):
        return value
    raise _wrong_type(path, "an object", value)


def _array(parent: Mapping[str, Any], key: str, path: str) -> list[Any]:
    """``parent[key]`` when it is an array; [] when absent or null."""
    value = parent.get(key)
    if value is None:
        return []
    if isinstance(value, list):
        return value
    raise _wrong_type(path, "an array", value)


def _objects(parent: Mapping[str, Any], key: str, path: str) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """The objects of the array ``parent[key]``, with their indices."""
    for i, item in enumerate(_array(parent, key, path)):
        if not isinstance(item, Mapping):
            raise _wrong_type(f"{path}/{i}", "an object", item)
        yield i, item


def _string(parent: Mapping[str, Any], key: str, path: str) -> str | None:
    """``parent[key]`` when it is a string; None when absent, null or empty (Kubernetes' "unset")."""
    value = parent.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _wrong_type(path, "a string", value)
    return value


def _ref(uri: str, path: str, kind: str) -> ModelReference:
    if len(uri) > MAX_URI_LENGTH:
        raise LimitExceededError(f"the model reference at {path} is {len(uri)} characters, over the limit of "
                                 f"{MAX_URI_LENGTH}", path=path, limit=MAX_URI_LENGTH)
    return ModelReference(uri=uri, path=path, kind=kind)


def _uri_at(parent: Mapping[str, Any], key: str, path: str, kind: str) -> Iterator[ModelReference]:
    uri = _string(parent, key, f"{path}/{key}")
    if uri is not None:
        yield _ref(uri, f"{path}/{key}", kind)


# --- objects -----------------------------------------------------------------------------------------


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _object(obj, "spec", "/spec") or {}


def _pod(obj: Mapping[str, Any]) -> Iterator[ModelReference]:
    yield from _pod_spec(_spec(obj), "/spec")


def _inference_service(obj: Mapping[str, Any]) -> Iterator[ModelReference]:
    spec = _spec(obj)
    predictor = _object(spec, "predictor", "/spec/predictor")
    if predictor is not None:
        yield from _predictor(predictor, "/spec/predictor")
    for name, frameworks in (("transformer", ()), ("explainer", EXPLAINER_FRAMEWORKS)):
        component = _object(spec, name, f"/spec/{name}")
        if component is not None:
            yield from _component(component, f"/spec/{name}", frameworks)
    for i, canary in _objects(spec, "canary", "/spec/canary"):
        predictor = _object(canary, "predictor", f"/spec/canary/{i}/predictor")
        if predictor is not None:
            yield from _predictor(predictor, f"/spec/canary/{i}/predictor")


def _predictor(predictor: Mapping[str, Any], path: str) -> Iterator[ModelReference]:
    yield from _component(predictor, path, PREDICTOR_FRAMEWORKS)
    worker = _object(predictor, "workerSpec", f"{path}/workerSpec")
    if worker is not None:
        yield from _pod_spec(worker, f"{path}/workerSpec")


def _component(component: Mapping[str, Any], path: str, frameworks: tuple[str, ...]) -> Iterator[ModelReference]:
    """A predictor, transformer or explainer: its runtime specs, ``storageUris`` and inlined pod spec."""
    for name in frameworks:
        runtime = _object(component, name, f"{path}/{name}")
        if runtime is None:
            continue
        where = f"{path}/{name}"
        yield from _uri_at(runtime, "storageUri", where, STORAGE_URI)
        storage = _object(runtime, "storage", f"{where}/storage")
        if storage is not None:
            yield from _uri_at(storage, "path", f"{where}/storage", STORAGE_URI)
        # The runtime spec inlines a container: KServe reads its STORAGE_URI too.
        yield from _container(runtime, where, init=False)
    for i, entry in _objects(component, "storageUris", f"{path}/storageUris"):
        yield from _uri_at(entry, "uri", f"{path}/storageUris/{i}", STORAGE_URI)
    yield from _pod_spec(component, path)


def _llm_inference_service(obj: Mapping[str, Any]) -> Iterator[ModelReference]:
    spec = _spec(obj)
    model = _object(spec, "model", "/spec/model")
    if model is not None:
        yield from _uri_at(model, "uri", "/spec/model", STORAGE_URI)
        yield from _adapters(model, "/spec/model")
    workloads = [("/spec", spec)]
    prefill = _object(spec, "prefill", "/spec/prefill")
    if prefill is not None:
        workloads.append(("/spec/prefill", prefill))
    for where, workload in workloads:
        for key in ("template", "worker"):
            pod = _object(workload, key, f"{where}/{key}")
            if pod is not None:
                yield from _pod_spec(pod, f"{where}/{key}")
    router = _object(spec, "router", "/spec/router") or {}
    scheduler = _object(router, "scheduler", "/spec/router/scheduler") or {}
    pod = _object(scheduler, "template", "/spec/router/scheduler/template")
    if pod is not None:
        yield from _pod_spec(pod, "/spec/router/scheduler/template")
    tokenizer = _object(scheduler, "tokenizer", "/spec/router/scheduler/tokenizer") or {}
    pod = _object(tokenizer, "template", "/spec/router/scheduler/tokenizer/template")
    if pod is not None:
        yield from _pod_spec(pod, "/spec/router/scheduler/tokenizer/template")


def _adapters(model: Mapping[str, Any], path: str) -> Iterator[ModelReference]:
    """``lora.adapters[].uri`` (an adapter is a model spec too, schemaless in the CRD: read its own adapters)."""
    lora = _object(model, "lora", f"{path}/lora")
    if lora is None:
        return
    for i, adapter in _objects(lora, "adapters", f"{path}/lora/adapters"):
        where = f"{path}/lora/adapters/{i}"
        yield from _uri_at(adapter, "uri", where, ADAPTER_URI)
        yield from _adapters(adapter, where)


def _local_model_cache(obj: Mapping[str, Any]) -> Iterator[ModelReference]:
    yield from _uri_at(_spec(obj), "sourceModelUri", "/spec", LOCAL_MODEL_CACHE)


def _trained_model(obj: Mapping[str, Any]) -> Iterator[ModelReference]:
    model = _object(_spec(obj), "model", "/spec/model")
    if model is not None:
        yield from _uri_at(model, "storageUri", "/spec/model", STORAGE_URI)


_READERS = {
    "Pod": _pod,
    "InferenceService": _inference_service,
    "LLMInferenceService": _llm_inference_service,
    "LocalModelCache": _local_model_cache,
    "LocalModelNamespaceCache": _local_model_cache,
    "TrainedModel": _trained_model,
}


# --- pod specs and containers --------------------------------------------------------------------------


def _pod_spec(spec: Mapping[str, Any], path: str) -> Iterator[ModelReference]:
    for i, volume in _objects(spec, "volumes", f"{path}/volumes"):
        image = _object(volume, "image", f"{path}/volumes/{i}/image")
        if image is not None:
            yield from _uri_at(image, "reference", f"{path}/volumes/{i}/image", IMAGE_VOLUME)
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for i, container in _objects(spec, key, f"{path}/{key}"):
            yield from _container(container, f"{path}/{key}/{i}", init=key == "initContainers")


def _container(container: Mapping[str, Any], path: str, *, init: bool) -> Iterator[ModelReference]:
    name = _string(container, "name", f"{path}/name") or ""
    image = _string(container, "image", f"{path}/image")
    if _MODELCAR_RE.match(name) and image is not None:
        yield _ref(image, f"{path}/image", IMAGE_VOLUME)
    for j, var in _objects(container, "env", f"{path}/env"):
        if var.get("name") == "STORAGE_URI":
            yield from _uri_at(var, "value", f"{path}/env/{j}", STORAGE_URI)
    command = _strings(container, "command", f"{path}/command")
    args = _strings(container, "args", f"{path}/args")
    if init and name == STORAGE_INITIALIZER and not command:
        for k in range(0, len(args), 2):
            if args[k]:
                yield _ref(args[k], f"{path}/args/{k}", STORAGE_URI)
        return
    if command:
        argv = [*((c, f"{path}/command/{k}") for k, c in enumerate(command)),
                *((a, f"{path}/args/{k}") for k, a in enumerate(args))]
    elif image is not None and _image_name(image) == FETCH_IMAGE:
        argv = [("modelreg", ""), ("fetch", ""), *((a, f"{path}/args/{k}") for k, a in enumerate(args))]
    else:  # no command: an image without an entrypoint runs its args
        argv = [(a, f"{path}/args/{k}") for k, a in enumerate(args)]
    ref = _fetch_ref(argv)
    if ref is not None:
        yield _ref(*ref, INIT_FETCH)


def _strings(container: Mapping[str, Any], key: str, path: str) -> list[str]:
    values = _array(container, key, path)
    for k, value in enumerate(values):
        if not isinstance(value, str):
            raise _wrong_type(f"{path}/{k}", "a string", value)
    return values


def _image_name(image: str) -> str:
    """The last path segment of an image reference, without tag or digest: ``modelreg-fetch``."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0]


def _fetch_ref(argv: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The REF argument (and its pointer) of an argv running ``modelreg fetch``; None for any other argv.

    Raises:
        InvalidInputError: ``modelreg fetch`` with an option it does not have (it would refuse to start, and
            reading on could take the wrong argument for REF).
    """
    words = [w for w, _ in argv]
    start = 0
    if words and words[0].rsplit("/", 1)[-1] == "env":
        start = 1
        while start < len(words) and _ENV_ASSIGNMENT_RE.match(words[start]):
            start += 1
    program = words[start].rsplit("/", 1)[-1] if start < len(words) else ""
    if program == "modelreg" and words[start + 1:start + 2] == ["fetch"]:
        rest = start + 2
    elif _PYTHON_RE.match(program) and words[start + 1:start + 4] == ["-m", "registry.cli", "fetch"]:
        rest = start + 4
    else:
        return None
    k = rest
    while k < len(argv):
        word, path = argv[k]
        if word == "--":
            return argv[k + 1] if k + 1 < len(argv) else None
        if word.startswith("-") and word != "-":
            option, inline, _ = word.partition("=")
            if option in FETCH_FLAGS and not inline or option in FETCH_VALUE_OPTIONS and inline:
                k += 1
            elif option in FETCH_VALUE_OPTIONS:
                k += 2
            else:
                raise InvalidInputError(f"{path}: modelreg fetch takes no option {word!r}", path=path,
                                        option=option)
            continue
        return word, path
    return None
