"""A released version as a CNCF ModelPack artifact (raw layers): the OCI manifest and the model config.

Pure: it takes what the registry recorded of a version (:class:`PackInput`) and returns the exact bytes
of the config blob and of the manifest, and their digests. Every file is one ``.raw`` layer whose digest
is the file's sha256 and whose size is its size, so the layers are the blob store's bytes as they are. The
JSON is canonical (sorted keys, no whitespace) and layers follow the files' path order, so one version
always gives the same manifest digest. Media types are the ModelPack ones of ``specs-go/v1/mediatype.go``.

Decisions (see ``docs/oci.md``):

- **Kinds**: weights by suffix (:data:`WEIGHT_SUFFIXES`); weight configuration for JSON, YAML, tokenizer
  files and chat templates; documentation for README, LICENSE and the like and ``*.md``; code for
  ``*.py`` and other sources. ModelPack names no kind for anything else: such a file is a weight
  configuration layer marked ``org.cncf.model.file.mediatype.untested: "true"`` (the spec's flag for a
  kind inferred by heuristics).
- **Config facts** come from the recorded facts (``registry/facts``), never guessed: ``family`` is
  ``model_type``, ``architecture`` the first of ``architectures``, ``format`` the one weight format (left out
  with several), ``paramSize`` the parameter count (``"1.1b"``), ``precision`` the one dtype (``"mixed"`` with
  several), ``quantization`` the method (else the GGUF file type).

Example:
    >>> art = build(PackInput(repository="acme/llm", version=3, revision=None, license="MIT", source_url=None,
    ...                       created_at=None, files=(PackFile("config.json", 2, "a" * 64),), facts=None))
    >>> art.manifest["layers"][0]["mediaType"], art.manifest_digest == digest_of(art.manifest_bytes)
    ('application/vnd.cncf.model.weight.config.v1.raw', True)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import posixpath
from dataclasses import dataclass
from typing import Any

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ARTIFACT_TYPE = "application/vnd.cncf.model.manifest.v1+json"
CONFIG = "application/vnd.cncf.model.config.v1+json"
WEIGHT = "application/vnd.cncf.model.weight.v1.raw"
WEIGHT_CONFIG = "application/vnd.cncf.model.weight.config.v1.raw"
DOC = "application/vnd.cncf.model.doc.v1.raw"
CODE = "application/vnd.cncf.model.code.v1.raw"

ANNOTATION_FILEPATH = "org.cncf.model.filepath"
ANNOTATION_FILE_METADATA = "org.cncf.model.file.metadata+json"
ANNOTATION_UNTESTED = "org.cncf.model.file.mediatype.untested"
ANNOTATION_TITLE = "org.opencontainers.image.title"
ANNOTATION_CREATED = "org.opencontainers.image.created"

WEIGHT_SUFFIXES = (
    ".safetensors", ".gguf", ".bin", ".pt", ".pth", ".ckpt", ".onnx", ".h5", ".keras", ".msgpack", ".pb",
    ".tflite", ".npz", ".npy", ".pkl", ".pickle", ".joblib", ".mlmodel", ".ot", ".gguf.part",
)
WEIGHT_CONFIG_SUFFIXES = (".json", ".yaml", ".yml", ".jinja", ".model", ".tiktoken", ".spm", ".vocab", ".toml")
WEIGHT_CONFIG_NAMES = ("vocab.txt", "merges.txt", "added_tokens.txt")
DOC_STEMS = ("readme", "license", "licence", "notice", "copying", "authors", "changelog", "citation")
DOC_SUFFIXES = (".md", ".rst", ".txt", ".pdf", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".html")
CODE_SUFFIXES = (".py", ".sh", ".ipynb", ".js", ".ts", ".c", ".cc", ".cpp", ".h", ".cu", ".rs", ".go", ".java")
FILE_MODE = 0o644
REGULAR_FILE = ord("0")
"""The tar type flag of a regular file, as ModelPack's ``FileMetadata.typeflag`` (a Go byte) holds it."""
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


@dataclass(frozen=True, slots=True)
class PackFile:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class PackInput:
    """What the registry recorded of an approved version."""

    repository: str
    """``tenant/model``: the descriptor's ``name``."""
    version: int
    revision: str | None
    """The upstream commit (or other revision) the version was pinned to, where recorded."""
    license: str | None
    """An SPDX expression, or ``other:<name>`` (no SPDX expression: left out of ``licenses``)."""
    source_url: str | None
    created_at: dt.datetime | None
    """When the version was sealed: ``createdAt``, and every file's ``mtime``."""
    files: tuple[PackFile, ...]
    facts: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Artifact:
    manifest: dict[str, Any]
    manifest_bytes: bytes
    manifest_digest: str
    """``sha256:<hex>`` of :attr:`manifest_bytes`."""
    config_bytes: bytes
    config_digest: str


def canonical_json(doc: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8: the bytes one document always gives.

    >>> canonical_json({"b": 1, "a": [1, "é"]})
    b'{"a":[1,"\\xc3\\xa9"],"b":1}'
    """
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def media_type_of(path: str) -> tuple[str, bool]:
    """The ModelPack raw media type of a file, and whether it is a guess (the spec names no kind for it).

    >>> media_type_of("model-00001-of-00002.safetensors"), media_type_of("tokenizer.model")
    (('application/vnd.cncf.model.weight.v1.raw', False), ('application/vnd.cncf.model.weight.config.v1.raw', False))
    >>> media_type_of("docs/README"), media_type_of("modeling_x.py"), media_type_of("data.xyz")[1]
    (('application/vnd.cncf.model.doc.v1.raw', False), ('application/vnd.cncf.model.code.v1.raw', False), True)
    """
    name = posixpath.basename(path).lower()
    if name in WEIGHT_CONFIG_NAMES or name.startswith("tokenizer") or name.endswith(WEIGHT_CONFIG_SUFFIXES):
        return WEIGHT_CONFIG, False
    if name.endswith(WEIGHT_SUFFIXES):
        return WEIGHT, False
    if name.endswith(CODE_SUFFIXES):
        return CODE, False
    if name.split(".")[0] in DOC_STEMS or name.endswith(DOC_SUFFIXES):
        return DOC, False
    return WEIGHT_CONFIG, True


def build(pack: PackInput) -> Artifact:
    """The config blob and the manifest of ``pack``, as bytes with their digests."""
    files = sorted(pack.files, key=lambda f: f.path)
    created = _rfc3339(pack.created_at) if pack.created_at is not None else None
    config_bytes = canonical_json(_config(pack, files, created))
    config_digest = digest_of(config_bytes)
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": CONFIG, "digest": config_digest, "size": len(config_bytes)},
        "layers": [_layer(f, created) for f in files],
    }
    if created is not None:
        manifest["annotations"] = {ANNOTATION_CREATED: created}
    manifest_bytes = canonical_json(manifest)
    return Artifact(manifest, manifest_bytes, digest_of(manifest_bytes), config_bytes, config_digest)


def _layer(f: PackFile, created: str | None) -> dict[str, Any]:
    media_type, untested = media_type_of(f.path)
    metadata = {"name": posixpath.basename(f.path), "mode": FILE_MODE, "uid": 0, "gid": 0, "size": f.size,
                "mtime": created or _rfc3339(EPOCH), "typeflag": REGULAR_FILE}
    annotations = {ANNOTATION_FILEPATH: f.path, ANNOTATION_TITLE: f.path,
                   ANNOTATION_FILE_METADATA: canonical_json(metadata).decode()}
    if untested:
        annotations[ANNOTATION_UNTESTED] = "true"
    return {"mediaType": media_type, "digest": "sha256:" + f.sha256, "size": f.size, "annotations": annotations}


def _config(pack: PackInput, files: list[PackFile], created: str | None) -> dict[str, Any]:
    descriptor: dict[str, Any] = {"name": pack.repository, "version": str(pack.version)}
    if pack.revision:
        descriptor["revision"] = pack.revision
    if pack.license and not pack.license.startswith("other:"):
        descriptor["licenses"] = [pack.license]
    if pack.source_url:
        descriptor["sourceURL"] = pack.source_url
    if created is not None:
        descriptor["createdAt"] = created
    family = _fact(pack.facts, "architecture", "model_type")
    if isinstance(family, str):
        descriptor["family"] = family
    return {"descriptor": descriptor, "config": model_config(pack.facts),
            "modelfs": {"type": "layers", "diffIds": ["sha256:" + f.sha256 for f in files]}}


def model_config(facts: dict[str, Any] | None) -> dict[str, str]:
    """ModelPack's ``config`` from the recorded facts: only what they know.

    >>> model_config({"weights": {"formats": {"value": ["safetensors"]}, "parameters": {"value": 1_100_048_384},
    ...                           "dtypes": {"value": {"BF16": 10}}},
    ...               "architecture": {"architectures": {"value": ["LlamaForCausalLM"]}},
    ...               "quantization": {"method": {"value": "awq"}}})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'architecture': 'LlamaForCausalLM', 'format': 'safetensors', 'paramSize': '1.1b', 'precision': 'bf16',
     'quantization': 'awq'}
    """
    out: dict[str, str] = {}
    architectures = _fact(facts, "architecture", "architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        out["architecture"] = architectures[0]
    formats = _fact(facts, "weights", "formats")
    if isinstance(formats, list) and len(formats) == 1 and isinstance(formats[0], str):
        out["format"] = formats[0]
    parameters = _fact(facts, "weights", "parameters")
    if isinstance(parameters, int) and not isinstance(parameters, bool) and parameters > 0:
        out["paramSize"] = param_size(parameters)
    dtypes = _fact(facts, "weights", "dtypes")
    if isinstance(dtypes, dict) and dtypes:
        out["precision"] = precision(next(iter(dtypes))) if len(dtypes) == 1 else "mixed"
    method = _fact(facts, "quantization", "method") or _fact(facts, "quantization", "gguf_file_type")
    if isinstance(method, str) and method:
        out["quantization"] = method.lower()
    return out


def param_size(parameters: int) -> str:
    """A parameter count as ModelPack writes it: ``"8b"``, ``"1.1b"``, ``"124m"``, ``"900"``.

    >>> [param_size(n) for n in (8_030_261_248, 1_100_048_384, 124_439_808, 12_345, 900)]
    ['8b', '1.1b', '124m', '12k', '900']
    """
    for unit, scale in (("t", 10**12), ("b", 10**9), ("m", 10**6), ("k", 10**3)):
        if parameters >= scale:
            value = parameters / scale
            # Two significant digits below ten, whole units above (ModelPack's examples: "8b", "16b").
            return (f"{value:.1f}".removesuffix(".0") if value < 10 else str(round(value))) + unit
    return str(parameters)


def precision(dtype: str) -> str:
    """A safetensors or GGUF dtype as ModelPack writes a precision: ``BF16`` is ``bf16``, ``F16`` ``fp16``.

    >>> [precision(d) for d in ("BF16", "F16", "F32", "I8", "F8_E4M3", "Q4_K")]
    ['bf16', 'fp16', 'fp32', 'int8', 'fp8_e4m3', 'q4_k']
    """
    d = dtype.lower()
    if d.startswith("f") and d[1:2].isdigit():
        return "fp" + d[1:]
    if d.startswith("i") and d[1:2].isdigit():
        return "int" + d[1:]
    if d.startswith("u") and d[1:2].isdigit():
        return "uint" + d[1:]
    return d


def _fact(facts: dict[str, Any] | None, group: str, name: str) -> Any:
    cell = ((facts or {}).get(group) or {}).get(name)
    return cell.get("value") if isinstance(cell, dict) else None


def _rfc3339(at: dt.datetime) -> str:
    # A naive time is UTC (SQLite hands stored times back without their zone).
    at = at.replace(tzinfo=dt.timezone.utc) if at.tzinfo is None else at.astimezone(dt.timezone.utc)
    return at.strftime("%Y-%m-%dT%H:%M:%S") + (f".{at.microsecond:06d}".rstrip("0") if at.microsecond else "") + "Z"
