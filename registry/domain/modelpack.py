"""A released version as OCI artifacts: the CNCF ModelPack artifact (raw layers) and the image-shaped one.

Pure: it takes what the registry recorded of a version (:class:`PackInput`) and returns the exact bytes
of the config blob and of the manifest, and their digests. Every file is one ``.raw`` layer whose digest
is the file's sha256 and whose size is its size, so the layers are the blob store's bytes as they are. The
JSON is canonical (sorted keys, no whitespace) and layers follow the files' path order, so one version
always gives the same manifest digest. Media types are the ModelPack ones of ``specs-go/v1/mediatype.go``.

The **image shape** (:func:`build_image`) is a plain OCI image for runtimes that read only tar layers
(image volumes, KServe ``oci+native://`` and ``oci+fetch://``; it holds no shell, so it is no KServe
modelcar): an image config with ``rootfs.diff_ids`` and one uncompressed tar layer per file at ``models/<path>``. A tar
layer (:class:`TarLayer`) is never stored: it is its headers, the file's stored bytes and padding, so its size is known
without reading, and its digest is computed once by reading the files (the caller does the reads:
:meth:`TarLayer.segments`). The headers are written here byte by byte (ustar, with a PAX record where a field does not
fit), not by ``tarfile``, so a served layer stays the bytes its stored digest names whatever the Python version.

A version of more than :data:`MAX_FILE_LAYERS` files has its small non-weight files packed into one
tar layer in both shapes (:func:`layer_groups`), so manifests stay well under the clients' 4 MiB.

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from registry.domain.files import WEIGHT_FORMATS

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
ARTIFACT_TYPE = "application/vnd.cncf.model.manifest.v1+json"
CONFIG = "application/vnd.cncf.model.config.v1+json"
WEIGHT = "application/vnd.cncf.model.weight.v1.raw"
WEIGHT_CONFIG = "application/vnd.cncf.model.weight.config.v1.raw"
DOC = "application/vnd.cncf.model.doc.v1.raw"
CODE = "application/vnd.cncf.model.code.v1.raw"
PACKED = "application/vnd.cncf.model.weight.config.v1.tar"
"""The raw shape's one tar layer of small non-weight files (ModelPack's tar media type for configuration)."""
IMAGE_CONFIG = "application/vnd.oci.image.config.v1+json"
IMAGE_LAYER = "application/vnd.oci.image.layer.v1.tar"
IMAGE_ROOT = "models"
"""Where the image shape puts a version's files (KServe and image volumes read the model from there)."""
IMAGE_PLATFORM = {"architecture": "amd64", "os": "linux"}
"""An image config must name a platform; a model's files run anywhere, and containerd matches this one."""
RAW, IMAGE = "raw", "image"
"""The two shapes of a version (``oci_artifacts.shape``)."""

MAX_FILE_LAYERS = 1000
"""Above this many files, the small non-weight files share one tar layer (a raw layer's descriptor is
about 600 bytes, so a thousand of them is 0.6 MiB of manifest)."""
SMALL_FILE = 1024 * 1024
"""The largest file packed into the shared tar layer."""
MAX_MANIFEST = 4 * 1024 * 1024
"""The manifest size OCI clients accept at most (containerd, the distribution registry)."""
BLOCK = 512
PACKED_TITLE = "modelreg-small-files.tar"
"""The raw shape's packed layer's name: a tar of the small files at their paths (extract it where it lands)."""

ANNOTATION_FILEPATH = "org.cncf.model.filepath"
ANNOTATION_FILE_METADATA = "org.cncf.model.file.metadata+json"
ANNOTATION_UNTESTED = "org.cncf.model.file.mediatype.untested"
ANNOTATION_TITLE = "org.opencontainers.image.title"
ANNOTATION_CREATED = "org.opencontainers.image.created"
ANNOTATION_ADAPTER_BASE = "dev.modelreg.adapter.base"
"""On an adapter's manifest: its bound base's manifest in the same shape, ``<tenant>/<model>@sha256:<hex>`` (a
reference on this registry). ModelPack has no field for a base model; OCI's ``org.opencontainers.image.base.*``
means an image whose layers this one's start with, which an adapter's do not."""
ANNOTATION_ADAPTER_BASE_WEIGHTS = "dev.modelreg.adapter.base.weights-digest"
"""On an adapter's manifest: ``sha256:<hex>``, the digest of its base's ``weights`` component it is bound to."""

WEIGHT_SUFFIXES = tuple(WEIGHT_FORMATS)
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
    annotations: tuple[tuple[str, str], ...] = ()
    """More annotations of the manifest, sorted by key (an adapter's base: :data:`ANNOTATION_ADAPTER_BASE`)."""


@dataclass(frozen=True, slots=True)
class Artifact:
    manifest: dict[str, Any]
    manifest_bytes: bytes
    manifest_digest: str
    """``sha256:<hex>`` of :attr:`manifest_bytes`."""
    config_bytes: bytes
    config_digest: str
    media_type: str = OCI_MANIFEST
    tar_layers: tuple[TarLayer, ...] = ()
    """The manifest's tar layers with their digests: generated when served, never stored."""


class ManifestTooLargeError(ValueError):
    """A version whose manifest would pass :data:`MAX_MANIFEST` even with its small files packed."""

    def __init__(self, size: int) -> None:
        super().__init__(f"the manifest would be {size} bytes, over the clients' {MAX_MANIFEST}")
        self.size = size


@dataclass(frozen=True, slots=True)
class TarLayer:
    """An uncompressed tar of ``members`` (each at ``root/<path>``, mode 0644, owner 0, fixed ``mtime``).

    >>> layer = TarLayer("models", (PackFile("config.json", 2, "a" * 64),), 0)
    >>> layer.size, [len(s) if isinstance(s, bytes) else s.path for s in layer.segments()]
    (2048, [512, 'config.json', 510, 1024])
    """

    root: str
    members: tuple[PackFile, ...]
    mtime: int
    """Seconds since the epoch: the version's sealing time."""
    digest: str | None = None
    """``sha256:<hex>`` of the whole tar, once computed (:meth:`digest_with`)."""

    @property
    def size(self) -> int:
        return sum(len(tar_header(self._name(f), f.size, self.mtime)) + f.size + tar_padding(f.size)
                   for f in self.members) + 2 * BLOCK

    def segments(self) -> Iterator[bytes | PackFile]:
        """The tar in order: generated bytes, and each member's stored bytes (a :class:`PackFile` to read)."""
        for f in self.members:
            yield tar_header(self._name(f), f.size, self.mtime)
            yield f
            if tar_padding(f.size):
                yield bytes(tar_padding(f.size))
        yield bytes(2 * BLOCK)

    def digest_with(self, read: Callable[[PackFile], Iterator[bytes]]) -> TarLayer:
        """This layer with its digest, the members' bytes read in chunks by ``read`` (streamed, never whole).

        Raises:
            ValueError: a member's bytes are not its recorded size.
        """
        h = hashlib.sha256()
        for segment in self.segments():
            if isinstance(segment, bytes):
                h.update(segment)
                continue
            seen = 0
            for chunk in read(segment):
                seen += len(chunk)
                h.update(chunk)
            if seen != segment.size:
                raise ValueError(f"{segment.path}: read {seen} bytes, recorded {segment.size}")
        return TarLayer(self.root, self.members, self.mtime, "sha256:" + h.hexdigest())

    def _name(self, f: PackFile) -> str:
        return f"{self.root}/{f.path}" if self.root else f.path


def tar_padding(size: int) -> int:
    """The zero bytes that fill a member's data up to a 512-byte block."""
    return -size % BLOCK


def tar_header(name: str, size: int, mtime: int) -> bytes:
    """The header blocks of a regular file: ustar, preceded by a PAX header where the name does not fit
    ustar's 100 + 155 bytes (or is not ASCII) or the size does not fit 11 octal digits.

    >>> len(tar_header("models/config.json", 2, 0)), len(tar_header("models/" + "d/" * 200 + "f", 2, 0))
    (512, 1536)
    """
    raw = name.encode()
    pax: dict[str, bytes] = {}
    split = _ustar_split(raw) if name.isascii() else None
    if split is None:
        pax["path"] = raw
        split = (b"", raw[-100:].lstrip(b"/")[:100] if name.isascii() else b"pax-path")
    if size >= 8 ** 11:
        pax["size"] = str(size).encode()
    out = b""
    if pax:
        records = b"".join(_pax_record(k, v) for k, v in sorted(pax.items()))
        out = _ustar(b"././@PaxHeader", b"", len(records), mtime, b"x") + records + bytes(tar_padding(len(records)))
    return out + _ustar(split[1], split[0], 0 if "size" in pax else size, mtime, b"0")


def _ustar_split(name: bytes) -> tuple[bytes, bytes] | None:
    """(prefix, name) as ustar holds a path, or None where it cannot."""
    if len(name) <= 100:
        return b"", name
    for i in range(len(name) - 1, 0, -1):
        if name[i:i + 1] == b"/" and i <= 155 and len(name) - i - 1 <= 100:
            return name[:i], name[i + 1:]
    return None


def _ustar(name: bytes, prefix: bytes, size: int, mtime: int, typeflag: bytes) -> bytes:
    header = b"".join([
        name.ljust(100, b"\0"), b"%07o\0" % FILE_MODE, b"%07o\0" % 0, b"%07o\0" % 0, b"%011o\0" % size,
        b"%011o\0" % mtime, b" " * 8, typeflag, bytes(100), b"ustar\x0000", bytes(32), bytes(32),
        b"%07o\0" % 0, b"%07o\0" % 0, prefix.ljust(155, b"\0"), bytes(12),
    ])
    # The checksum is of the header with its own field as spaces: six octal digits, NUL, space.
    return header[:148] + b"%06o\0 " % sum(header) + header[156:]


def _pax_record(key: str, value: bytes) -> bytes:
    """``"<length> key=value\\n"``, the length counting its own digits."""
    body = b" " + key.encode() + b"=" + value + b"\n"
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length = len(str(length)) + len(body)
    return str(length).encode() + body


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


Read = Callable[[PackFile], Iterator[bytes]]
"""Reads a file's stored bytes in chunks (the caller's blob store): what a tar layer's digest needs."""


def layer_groups(files: list[PackFile]) -> tuple[list[PackFile], tuple[PackFile, ...]]:
    """The files with a layer of their own, and those packed into one tar layer (none up to
    :data:`MAX_FILE_LAYERS` files; above, every non-weight file of at most :data:`SMALL_FILE` bytes).

    >>> few = [PackFile(f"{i}.json", 1, "a" * 64) for i in range(3)]
    >>> layer_groups(few)[1]
    ()
    >>> many = [*few * 400, PackFile("w.safetensors", 1, "b" * 64)]
    >>> own, packed = layer_groups(many)
    >>> [f.path for f in own], len(packed)
    (['w.safetensors'], 1200)
    """
    if len(files) <= MAX_FILE_LAYERS:
        return files, ()
    packed = tuple(f for f in files if f.size <= SMALL_FILE and media_type_of(f.path)[0] != WEIGHT)
    chosen = {id(f) for f in packed}
    return [f for f in files if id(f) not in chosen], packed


def raw_needs_reads(pack: PackInput) -> bool:
    """Whether the raw shape has a tar layer (many files), whose digest needs the files read."""
    return bool(layer_groups(sorted(pack.files, key=lambda f: f.path))[1])


def build(pack: PackInput, read: Read | None = None) -> Artifact:
    """The ModelPack artifact of ``pack`` (raw layers): config blob and manifest as bytes with digests.

    Args:
        read: reads a file's bytes; needed only where :func:`raw_needs_reads`.

    Raises:
        ValueError: a packed layer to digest and no ``read``.
        ManifestTooLargeError: over :data:`MAX_MANIFEST`.
    """
    files = sorted(pack.files, key=lambda f: f.path)
    own, packed = layer_groups(files)
    created = _rfc3339(pack.created_at) if pack.created_at is not None else None
    layers = [_layer(f, created) for f in own]
    diff_ids = ["sha256:" + f.sha256 for f in own]
    tars: tuple[TarLayer, ...] = ()
    if packed:
        if read is None:
            raise ValueError("the raw shape of a version of many files needs its small files read")
        tar = TarLayer("", packed, mtime_of(pack.created_at)).digest_with(read)
        tars = (tar,)
        layers.append({"mediaType": PACKED, "digest": tar.digest, "size": tar.size,
                       "annotations": {ANNOTATION_FILEPATH: PACKED_TITLE, ANNOTATION_TITLE: PACKED_TITLE,
                                       ANNOTATION_UNTESTED: "true"}})
        diff_ids.append(tar.digest)
    config_bytes = canonical_json(_config(pack, diff_ids, created))
    config_digest = digest_of(config_bytes)
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": {"mediaType": CONFIG, "digest": config_digest, "size": len(config_bytes)},
        "layers": layers,
    }
    annotations = _manifest_annotations(pack, created)
    if annotations:
        manifest["annotations"] = annotations
    return _artifact(manifest, config_bytes, config_digest, tars)


def build_image(pack: PackInput, read: Read) -> Artifact:
    """The image shape of ``pack``: an OCI image config (``rootfs.diff_ids``) and one uncompressed tar
    layer per file at ``models/<path>`` (the small files in one where there are many), digests by ``read``.

    Raises:
        ValueError: a file's bytes are not its recorded size.
        ManifestTooLargeError: over :data:`MAX_MANIFEST`.
    """
    files = sorted(pack.files, key=lambda f: f.path)
    own, packed = layer_groups(files)
    mtime = mtime_of(pack.created_at)
    groups = [(f,) for f in own] + ([packed] if packed else [])
    tars = tuple(TarLayer(IMAGE_ROOT, group, mtime).digest_with(read) for group in groups)
    config: dict[str, Any] = {**IMAGE_PLATFORM, "rootfs": {"type": "layers", "diff_ids": [t.digest for t in tars]},
                              "config": {"Labels": {"org.opencontainers.image.ref.name": pack.repository,
                                                    "org.opencontainers.image.version": str(pack.version)}}}
    if pack.created_at is not None:
        config["created"] = _rfc3339(pack.created_at)
    config_bytes = canonical_json(config)
    config_digest = digest_of(config_bytes)
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": IMAGE_CONFIG, "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": IMAGE_LAYER, "digest": t.digest, "size": t.size} for t in tars],
    }
    annotations = _manifest_annotations(pack, _rfc3339(pack.created_at) if pack.created_at is not None else None)
    if annotations:
        manifest["annotations"] = annotations
    return _artifact(manifest, config_bytes, config_digest, tars)


def _manifest_annotations(pack: PackInput, created: str | None) -> dict[str, str]:
    return {**({ANNOTATION_CREATED: created} if created is not None else {}), **dict(pack.annotations)}


def _artifact(manifest: dict[str, Any], config_bytes: bytes, config_digest: str,
              tars: tuple[TarLayer, ...]) -> Artifact:
    manifest_bytes = canonical_json(manifest)
    if len(manifest_bytes) > MAX_MANIFEST:
        raise ManifestTooLargeError(len(manifest_bytes))
    return Artifact(manifest, manifest_bytes, digest_of(manifest_bytes), config_bytes, config_digest,
                    OCI_MANIFEST, tars)


def mtime_of(sealed_at: dt.datetime | None) -> int:
    """The mtime of every tar member: the sealing time in whole seconds (the epoch where unknown)."""
    at = sealed_at or EPOCH
    # A naive time is UTC (SQLite hands stored times back without their zone).
    at = at.replace(tzinfo=dt.timezone.utc) if at.tzinfo is None else at
    return max(0, int(at.timestamp()))


def _layer(f: PackFile, created: str | None) -> dict[str, Any]:
    media_type, untested = media_type_of(f.path)
    metadata = {"name": posixpath.basename(f.path), "mode": FILE_MODE, "uid": 0, "gid": 0, "size": f.size,
                "mtime": created or _rfc3339(EPOCH), "typeflag": REGULAR_FILE}
    annotations = {ANNOTATION_FILEPATH: f.path, ANNOTATION_TITLE: f.path,
                   ANNOTATION_FILE_METADATA: canonical_json(metadata).decode()}
    if untested:
        annotations[ANNOTATION_UNTESTED] = "true"
    return {"mediaType": media_type, "digest": "sha256:" + f.sha256, "size": f.size, "annotations": annotations}


def _config(pack: PackInput, diff_ids: list[str], created: str | None) -> dict[str, Any]:
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
            "modelfs": {"type": "layers", "diffIds": diff_ids}}


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
