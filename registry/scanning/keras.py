"""Keras models (``.keras`` v3 archives and legacy HDF5): the config names what gets built.

Loading a Keras model deserializes ``config.json`` (``.keras``) or the ``model_config`` attribute
(``.h5``): each ``{"class_name", "module", "config", "registered_name"}`` dict is resolved to a Python
class or function and called. That is code execution when the config names:

- a ``Lambda`` layer or a ``__lambda__`` function: marshalled bytecode (CVE-2024-3660, and for ``.h5``
  files ``safe_mode`` is ignored altogether, CVE-2025-9905);
- ``TFSMLayer``: loads and later runs an external TensorFlow SavedModel (CVE-2026-1462);
- ``TorchModuleWrapper``: its config carries a pickled torch module (CVE-2025-49655);
- any function or class from outside Keras's layers, or a Keras function that is a gadget:
  ``keras.models.load_model`` with ``safe_mode=False``, ``keras.config.enable_unsafe_deserialization``
  (CVE-2025-9906), ``keras.utils.get_file`` (CVE-2025-8747), ``builtins.exec`` (CVE-2025-1550).

The whole config is walked, so layers nested in ``Sequential``/``Functional`` models, wrappers
(``TimeDistributed``, ``Bidirectional``), ``inbound_nodes`` and compile configs are all seen.

Inside a ``.keras`` zip, the other members (``model.weights.h5``, assets) go back to the engine
through ``ctx.scan_nested``; an HDF5 file without ``model_config`` (plain weights) is safe here.

Example:
    >>> [f.rule_id for f in check_config({"class_name": "Lambda", "config": {}}, "config.json")]
    ['keras.layer.lambda']
"""

from __future__ import annotations

import struct
import sys
import zipfile
import zlib
from typing import Any, BinaryIO

from registry.domain.errors import InvalidPathError
from registry.domain.files import validate_path
from registry.scanning._formatio import FindingSink, json_path, strict_json_loads
from registry.scanning.model import Finding, ScanContext, Severity

MAX_CONFIG_BYTES = 16 << 20
"""Configs past this are not parsed; Keras would still build them, so that is ``unsafe`` (fail closed)."""
MAX_MEMBERS = 10_000
MAX_WALK_NODES = 2_000_000
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
# What zipfile raises on hostile bytes (I/O errors of the reader itself are left to propagate).
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    NotImplementedError,
    RuntimeError,
    ValueError,
    EOFError,
    zlib.error,
    struct.error,
    OverflowError,
)

# Modules whose classes Keras ships as layers, models and their building blocks.
ALLOWED_MODULES = frozenset(
    {
        "keras",
        "keras.layers",
        "keras.models",
        "keras.initializers",
        "keras.regularizers",
        "keras.constraints",
        "keras.activations",
        "keras.losses",
        "keras.metrics",
        "keras.optimizers",
        "keras.optimizers.schedules",
        "keras.saving",
        "keras.dtype_policies",
        "keras.mixed_precision",
    }
)
# Keras 3 serializes its own classes by implementation module (``keras.src.layers.core.dense``).
# Only the packages holding layers, models, ops and their building blocks are allowed: ``keras.src``
# also holds ``utils.file_utils.get_file``, ``saving`` switches and loaders, ``export.TFSMLayer``.
ALLOWED_SRC_PACKAGES = frozenset(
    {
        "layers",
        "models",
        "ops",
        "initializers",
        "regularizers",
        "constraints",
        "activations",
        "losses",
        "metrics",
        "optimizers",
        "dtype_policies",
        "random",
        "quantizers",
        "applications",
    }
)
_GADGET_PACKAGES = frozenset({"utils", "saving", "config", "export", "legacy"})
# tf_keras (the Keras 2 line) writes a class with a public ``keras.*`` name under that name, and any
# other by its implementation module, which its loader imports to take the class from. These are the
# classes of tf_keras's own layer table (``tf_keras.src.layers.serialization``, what it deserializes by
# name) that have no public name, so a standard model writes them so (``Functional`` for every
# functional model). Pairs, never whole modules: the loader takes any name from the module's namespace,
# imported functions included. Left out of that table's list, so they stay findings: ``TFOpLambda``,
# ``SlicingOpLambda``, ``ClassMethod``, ``InstanceMethod``, ``InstanceProperty`` (each calls a TensorFlow
# API symbol or tensor method named in its config: ``tf.io.write_file`` is one), ``TensorFlowOpLayer``
# (runs a graph node its config defines) and the RNN cell wrappers (``ResidualWrapper``'s ``residual_fn``
# and ``DropoutWrapper``'s state filter are marshalled bytecode, outside any class_name this walk sees).
# tests/unit/scanning/test_keras.py derives the table from the installed tf_keras and compares.
TF_KERAS_STANDARD_CLASSES = frozenset(
    {
        ("tf_keras.src.engine.functional", "Functional"),
        ("tf_keras.src.engine.base_layer", "AddLoss"),
        ("tf_keras.src.engine.base_layer", "AddMetric"),
        ("tf_keras.src.layers.normalization.batch_normalization", "BatchNormalizationBase"),
    }
)
# Modules whose *functions* are harmless to call by name (activations, losses, metrics).
FUNCTION_MODULES = frozenset({"keras.activations", "keras.losses", "keras.metrics", "keras.initializers"})
FUNCTION_PREFIXES = ("keras.src.activations", "keras.src.losses", "keras.src.metrics", "keras.src.initializers")
# Keras's own serialization markers (not classes to resolve).
_MARKERS = frozenset(
    {"__keras_tensor__", "__tensor__", "__numpy__", "__bytes__", "__typespec__", "__ellipsis__", "__slice__"}
)
# TensorFlow type specs a TF-backend model may serialize (their _deserialize builds a spec only).
_TYPESPEC_MODULES = ("tensorflow.python.framework.", "tensorflow.python.ops.ragged.")
_TYPESPECS = frozenset({"TensorSpec", "BoundedTensorSpec", "RaggedTensorSpec", "SparseTensorSpec"})

UNSAFE_CLASSES = {
    "Lambda": ("keras.layer.lambda", "Lambda layer carries marshalled Python bytecode or source"),
    "TFSMLayer": ("keras.layer.tfsmlayer", "TFSMLayer loads and runs an external TensorFlow SavedModel"),
    "TorchModuleWrapper": ("keras.layer.torch-module-wrapper", "TorchModuleWrapper unpickles a torch module"),
    "__lambda__": ("keras.function.lambda", "serialized lambda: marshalled Python bytecode"),
}
# Layers that read a file named in their config (vocabulary paths; CVE-2025-12058-style reads).
_FILE_READING = {"StringLookup": "vocabulary", "IntegerLookup": "vocabulary", "TextVectorization": "vocabulary"}


def scan(reader: BinaryIO, size: int, ctx: ScanContext) -> list[Finding]:
    """Check a ``.keras`` archive or a legacy Keras ``.h5`` file.

    Args:
        reader: Seekable stream over the file.
        size: Its byte size.
        ctx: ``ctx.scan_nested`` (when set) receives the archive's other members.

    Returns:
        Findings with rule ids ``keras.layer.*``, ``keras.module.*``, ``keras.function.*``,
        ``keras.archive.*``, ``keras.config.*``, ``keras.h5.*``.
    """
    reader.seek(0)
    head = reader.read(8)
    if head[:2] == b"PK":
        return _scan_zip(reader, size, ctx)
    if head == HDF5_MAGIC or _hdf5_userblock(reader, size):
        return _scan_hdf5(reader, size, ctx)
    return [Finding("keras.format.unknown", Severity.ERROR, ctx.path, "neither a .keras zip nor an HDF5 file")]


def _hdf5_userblock(reader: BinaryIO, size: int) -> bool:
    # HDF5 allows a user block: the superblock may sit at 512, 1024, 2048... bytes.
    # The HDF5 library tries every power of two from 512 up to the file's size: so must this
    # (a few dozen reads), or a model behind a large user block is no Keras file to us.
    offset = 512
    while offset + 8 <= size:
        reader.seek(offset)
        if reader.read(8) == HDF5_MAGIC:
            return True
        offset *= 2
    return False


def check_config(config: Any, location: str) -> list[Finding]:
    """Walk a deserialized Keras config (any nesting) and report what loading it would run.

    Args:
        config: The parsed JSON (``config.json`` or ``model_config``).
        location: Prefix for finding locations (e.g. ``config.json``).

    Returns:
        Findings, empty for a config made only of Keras's own layers.
    """
    sink = FindingSink()
    _walk(config, location + "$", sink)
    return sink.findings


def _walk(root: Any, root_path: str, sink: FindingSink) -> None:
    # Iterative: a hostile config can nest deeper than Python's recursion limit.
    stack: list[tuple[Any, str]] = [(root, root_path)]
    visited = 0
    while stack:
        node, path = stack.pop()
        visited += 1
        if visited > MAX_WALK_NODES:
            sink.add("keras.config.too-large", Severity.UNSAFE, root_path, f"more than {MAX_WALK_NODES} config nodes")
            return
        if isinstance(node, dict):
            if "class_name" in node:
                _check_object(node, path, sink)
            for key, value in node.items():
                if isinstance(value, (dict, list)):
                    stack.append((value, json_path(path, str(key))))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                if isinstance(value, (dict, list)):
                    stack.append((value, json_path(path, i)))


def _top_module(module: str) -> str:
    return module.split(".", 1)[0]


def _is_keras_module(module: str) -> bool:
    return module == "keras" or module.startswith("keras.")


def _check_object(node: dict[str, Any], path: str, sink: FindingSink) -> None:
    U, S = Severity.UNSAFE, Severity.SUSPICIOUS
    class_name = node.get("class_name")
    module = node.get("module")
    registered = node.get("registered_name")
    config = node.get("config")
    name = config.get("name") if isinstance(config, dict) else None
    where = f"{path}({name})" if isinstance(name, str) else path
    if not isinstance(class_name, str):
        sink.add("keras.config.invalid", S, where, f"class_name is {type(class_name).__name__}")
        return
    # The loader may resolve the registered name (``package>Name``) or a dotted class name too.
    for candidate in (class_name, class_name.rsplit(".", 1)[-1],
                      *( [registered.rsplit(">", 1)[-1]] if isinstance(registered, str) else [])):
        if candidate in UNSAFE_CLASSES:
            rule, why = UNSAFE_CLASSES[candidate]
            sink.add(rule, U, where, why)
            return
    if class_name in _MARKERS:
        # ``__typespec__`` resolves ``module`` + ``spec_name`` to a class and calls its _deserialize.
        spec = node.get("spec_name")
        if isinstance(module, str) and module.startswith(_TYPESPEC_MODULES) and spec in _TYPESPECS:
            return
        if isinstance(module, str) and module:
            _check_class_module(module, spec if isinstance(spec, str) else class_name, where, sink)
        elif module is not None:
            sink.add("keras.config.invalid", U, where, f"module is {type(module).__name__}")
        return
    if module is not None and not isinstance(module, str):
        sink.add("keras.config.invalid", U, where, f"module is {type(module).__name__}")
        return
    if class_name == "function":
        _check_function(module, config, where, sink)
    elif module is not None:
        _check_class_module(module, class_name, where, sink)
    if isinstance(registered, str) and ">" in registered:
        package = registered.split(">", 1)[0]
        if not _is_keras_module(package.lower()):
            sink.add(
                "keras.registered-name.custom",
                S,
                where,
                f"registered_name {registered!r} resolves to a custom registered object",
            )
    if class_name in _FILE_READING and isinstance(config, dict):
        value = config.get(_FILE_READING[class_name])
        if isinstance(value, str):
            sink.add("keras.layer.external-file", S, where,
                     f"{class_name} reads {value!r} from the filesystem or network")


def _check_function(module: Any, config: Any, where: str, sink: FindingSink) -> None:
    fname = config if isinstance(config, str) else "?"
    if module is None:
        sink.add("keras.function.not-allowed", Severity.SUSPICIOUS, where, f"function {fname!r} without a module")
        return
    qual = f"{module}.{fname}"
    if module in FUNCTION_MODULES or module.startswith(FUNCTION_PREFIXES):
        return
    if _is_keras_module(module) or _top_module(module) in sys.stdlib_module_names:
        # Keras's own loaders, config switches and downloaders are the gadgets of safe_mode bypasses.
        sink.add("keras.function.not-allowed", Severity.UNSAFE, where, f"config calls function {qual!r}")
    else:
        sink.add("keras.function.custom", Severity.SUSPICIOUS, where, f"config calls custom function {qual!r}")


def _allowed_src(module: str) -> bool:
    parts = module.split(".")
    return len(parts) >= 3 and parts[0] == "keras" and parts[1] == "src" and parts[2] in ALLOWED_SRC_PACKAGES


def _check_class_module(module: str, class_name: str, where: str, sink: FindingSink) -> None:
    if module in ALLOWED_MODULES or _allowed_src(module) or (module, class_name) in TF_KERAS_STANDARD_CLASSES:
        return
    qual = f"{module}.{class_name}"
    if _top_module(module) in sys.stdlib_module_names or _top_module(module) in ("builtins", "posix", "nt"):
        sink.add("keras.module.dangerous", Severity.UNSAFE, where,
                 f"config instantiates {qual!r} from the standard library")
    elif _is_keras_module(module) and _GADGET_PACKAGES & set(module.split(".")[1:3]):
        # Downloaders, loaders and the safe-mode switch: the gadgets of published safe_mode bypasses.
        sink.add("keras.module.gadget", Severity.UNSAFE, where,
                 f"config instantiates {qual!r} from Keras's loading/IO code")
    elif _is_keras_module(module):
        sink.add("keras.module.not-allowed", Severity.SUSPICIOUS, where, f"config instantiates {qual!r}")
    else:
        sink.add("keras.module.custom", Severity.SUSPICIOUS, where, f"config instantiates custom class {qual!r}")


def _parse_config(raw: bytes, location: str, sink: FindingSink) -> Any:
    duplicates: list[str] = []
    try:
        config = strict_json_loads(raw.decode("utf-8"), duplicates)
    except (ValueError, RecursionError) as exc:
        sink.add("keras.config.unparseable", Severity.UNSAFE, location, f"config is not valid JSON: {exc}"[:300])
        return None
    for key in duplicates[:5]:
        sink.add("keras.config.duplicate-key", Severity.UNSAFE, location, f"key {key!r} repeated: readers disagree")
    return config


def _scan_zip(reader: BinaryIO, size: int, ctx: ScanContext) -> list[Finding]:
    sink = FindingSink()
    U = Severity.UNSAFE
    reader.seek(0)
    try:
        zf = zipfile.ZipFile(reader)
    except _ZIP_ERRORS as exc:
        sink.add("keras.archive.malformed", U, ctx.path, f"not a readable zip: {exc}")
        return sink.findings
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            sink.add("keras.archive.too-many-members", Severity.UNSAFE, ctx.path, f"{len(infos)} members")
            return sink.findings
        names = [i.filename for i in infos]
        for dup in sorted({n for n in names if names.count(n) > 1}) if len(set(names)) != len(names) else []:
            sink.add("keras.archive.duplicate-member", U, f"{ctx.path}!{dup}", "member name repeated: readers disagree")
        for info in infos:
            try:
                validate_path(info.filename.rstrip("/") if info.is_dir() else info.filename)
            except InvalidPathError as exc:
                sink.add("keras.archive.member-path", U, f"{ctx.path}!{info.filename}", str(exc))
        config_infos = [i for i in infos if i.filename == "config.json"]
        if not config_infos:
            sink.add("keras.archive.no-config", Severity.INFO, ctx.path, "zip has no config.json: not a Keras archive")
        for info in config_infos:
            loc = f"{ctx.path}!config.json"
            if info.file_size > MAX_CONFIG_BYTES:
                sink.add("keras.config.too-large", Severity.UNSAFE, loc, f"config.json is {info.file_size} bytes")
                continue
            try:
                with zf.open(info) as member:
                    raw = member.read(MAX_CONFIG_BYTES + 1)
            except _ZIP_ERRORS as exc:
                sink.add("keras.archive.malformed", U, loc, f"config.json cannot be read: {exc}")
                continue
            if len(raw) > MAX_CONFIG_BYTES:
                sink.add("keras.config.too-large", Severity.UNSAFE, loc, "config.json inflates past the limit")
                continue
            config = _parse_config(raw, loc, sink)
            if config is not None:
                sink.extend(check_config(config, loc))
        if ctx.scan_nested is not None:
            for info in infos:
                if info.is_dir() or info.filename in ("config.json", "metadata.json"):
                    continue
                try:
                    with zf.open(info) as member:
                        sink.extend(ctx.scan_nested(info.filename, member, info.file_size))  # type: ignore[arg-type]
                except _ZIP_ERRORS as exc:
                    sink.add("keras.archive.malformed", U, f"{ctx.path}!{info.filename}",
                             f"member cannot be read: {exc}")
    return sink.findings


def _scan_hdf5(reader: BinaryIO, size: int, ctx: ScanContext) -> list[Finding]:
    import h5py

    sink = FindingSink()
    reader.seek(0)
    try:
        with h5py.File(reader, "r") as f:
            for attr in ("model_config", "training_config"):
                if attr not in f.attrs:
                    continue
                loc = f"{ctx.path}:/@{attr}"
                aid = h5py.h5a.open(f.id, attr.encode())
                if aid.get_storage_size() > MAX_CONFIG_BYTES:
                    sink.add("keras.config.too-large", Severity.UNSAFE, loc, f"{attr} exceeds {MAX_CONFIG_BYTES} bytes")
                    continue
                value = f.attrs[attr]
                raw = _attr_bytes(value)
                if raw is None:
                    sink.add("keras.config.unparseable", Severity.UNSAFE, loc,
                             f"{attr} is {type(value).__name__}, not text")
                    continue
                config = _parse_config(raw, loc, sink)
                if config is not None:
                    sink.extend(check_config(config, loc))
            _check_hdf5_links(f, ctx.path, sink)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        sink.add("keras.h5.unparseable", Severity.ERROR, ctx.path, f"HDF5 file cannot be read: {exc}"[:300])
    return sink.findings


MAX_HDF5_LINKS = 200_000


def _check_hdf5_links(f: Any, path: str, sink: FindingSink) -> None:
    """Links and storage that make a reader of this file open other files.

    An external link, a dataset whose raw data lives in external files (``/etc/passwd`` read as
    weights) or a virtual dataset mapping other files reads outside the model, like ONNX external
    data. Walked by link, so nothing is dereferenced but datasets of this file.
    """
    import h5py

    count = 0

    def visit(name: str, link: Any) -> Any:
        nonlocal count
        count += 1
        if count > MAX_HDF5_LINKS:
            sink.add("keras.h5.too-large", Severity.UNSAFE, path, f"more than {MAX_HDF5_LINKS} links: not inspected")
            return True
        where = f"{path}:/{name}"
        if isinstance(link, h5py.ExternalLink):
            sink.add("keras.h5.external-link", Severity.UNSAFE, where,
                     f"external link to {link.filename!r}:{link.path}")
            return None
        if not isinstance(link, h5py.HardLink):
            return None
        obj = f.get(name)
        if isinstance(obj, h5py.Dataset):
            if obj.external:
                files = sorted({str(e[0]) for e in obj.external})[:3]
                sink.add("keras.h5.external-storage", Severity.UNSAFE, where,
                         f"dataset data is read from files {files}")
            elif obj.is_virtual:
                sink.add("keras.h5.virtual-dataset", Severity.UNSAFE, where,
                         "virtual dataset maps data from other files")
        return None

    f.visititems_links(visit)


def _attr_bytes(value: Any) -> bytes | None:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "size", 0) == 1:
        return _attr_bytes(item())
    return None
