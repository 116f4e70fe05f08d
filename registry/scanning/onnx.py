"""ONNX models: external data that stays inside the model directory, and custom operator domains.

An ONNX tensor may keep its bytes in another file: ``external_data`` entries ``location``,
``offset``, ``length``. Loaders join ``location`` to the model's directory, so ``../../etc/passwd``
or ``/root/.ssh/id_rsa`` reads (and, with ``save_model``, writes) files outside it
(CVE-2022-25882, CVE-2024-27318). Every tensor is checked: graph initializers, sparse initializers,
tensors in node attributes, and those of every subgraph (``If``/``Loop``/``Scan`` bodies), local
function and training graph.

The model is not loaded with ``onnx``: a minimal protobuf walk follows only the messages that can
hold tensors and skips everything else with a seek, so a 2 GB model with embedded weights costs a
few reads of its structure, and no third-party parser sees hostile bytes first.

Example:
    >>> import io
    >>> scan(io.BytesIO(b""), 0, ScanContext("model.onnx"))[0].rule_id
    'onnx.model.invalid'
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import BinaryIO

from registry.domain.errors import InvalidPathError
from registry.domain.files import validate_path
from registry.scanning._formatio import BoundedReader, FindingSink, TruncatedError
from registry.scanning._protobuf import ProtobufBudgetError, ProtobufError, ProtobufWalker
from registry.scanning.model import Finding, ScanContext, Severity

MAX_GRAPH_DEPTH = 64
MAX_FIELDS = 20_000_000
"""A budget of protobuf fields visited; far above any real model's structure."""
KNOWN_DOMAINS = frozenset(
    {
        "",
        "ai.onnx",
        "ai.onnx.ml",
        "ai.onnx.training",
        "ai.onnx.preview.training",
        "com.microsoft",
        "com.microsoft.nchwc",
        "com.microsoft.experimental",
        "com.ms.internal.nhwc",
    }
)
EXTERNAL_KEYS = frozenset({"location", "offset", "length", "checksum"})

# Field numbers from onnx.proto (stable across IR versions).
_MODEL_IR_VERSION, _MODEL_GRAPH, _MODEL_OPSET_IMPORT, _MODEL_TRAINING_INFO, _MODEL_FUNCTIONS = 1, 7, 8, 20, 25
_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_SPARSE_INITIALIZER = 1, 5, 15
_NODE_OP_TYPE, _NODE_ATTRIBUTE, _NODE_DOMAIN = 4, 5, 7
_ATTR_T, _ATTR_G, _ATTR_TENSORS, _ATTR_GRAPHS, _ATTR_SPARSE, _ATTR_SPARSES = 5, 6, 10, 11, 22, 23
_TENSOR_NAME, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 8, 13, 14
_SPARSE_VALUES, _SPARSE_INDICES = 1, 2
_FUNC_NAME, _FUNC_NODE, _FUNC_DOMAIN, _FUNC_ATTRIBUTE_PROTO = 1, 7, 10, 11
_TRAINING_INIT, _TRAINING_ALGO = 1, 2
_EXTERNAL = 1


@dataclass(slots=True)
class _State:
    pb: ProtobufWalker
    sink: FindingSink
    ctx: ScanContext
    nodes: list[tuple[str, str, str]] = field(default_factory=list)
    """(domain, op_type, where) of every node, judged once local functions are known."""
    functions: set[tuple[str, str]] = field(default_factory=set)
    saw_graph: bool = False
    saw_ir_version: bool = False
    saw_opset: bool = False


def scan(reader: BinaryIO, size: int, ctx: ScanContext) -> list[Finding]:
    """Walk an ONNX ModelProto and check every tensor's external data and every node's domain.

    Args:
        reader: Seekable stream over the ``.onnx`` file.
        size: Its byte size.
        ctx: ``ctx.path`` locates the model directory; ``ctx.siblings`` (when known) are the files
            external data may name.

    Returns:
        Findings: ``onnx.external-data.escape`` (unsafe) for a location leaving the directory,
        ``onnx.external-data.missing`` (suspicious), ``onnx.custom-op-domain`` (suspicious),
        ``onnx.protobuf.malformed`` (unsafe) when the bytes are not a well-formed protobuf.
    """
    st = _State(ProtobufWalker(BoundedReader(reader, size, chunk=1 << 16), budget=MAX_FIELDS), FindingSink(), ctx)
    try:
        _walk_model(st, 0, size)
    except TruncatedError as exc:
        st.sink.add("onnx.protobuf.malformed", Severity.UNSAFE, f"@{exc.offset}", f"a field runs past the end: {exc}")
        return st.sink.findings
    except ProtobufError as exc:
        st.sink.add("onnx.protobuf.malformed", Severity.UNSAFE, f"@{exc.offset}", str(exc))
        return st.sink.findings
    except ProtobufBudgetError:
        # onnxruntime parses any number of fields: what was not walked may name external data.
        st.sink.add("onnx.structure.too-large", Severity.UNSAFE, "model",
                    f"more than {MAX_FIELDS} protobuf fields: not inspected")
        return st.sink.findings
    if not (st.saw_graph and st.saw_ir_version and st.saw_opset):
        # Every ONNX writer emits these three; without them the bytes are something else (or cut short).
        st.sink.add("onnx.model.invalid", Severity.ERROR, "model",
                    "no ir_version, opset_import or graph: not an ONNX model")
    for domain, op_type, where in st.nodes:
        if domain not in KNOWN_DOMAINS and not domain.startswith("ai.onnx.") and (domain, op_type) not in st.functions:
            st.sink.add(
                "onnx.custom-op-domain",
                Severity.SUSPICIOUS,
                where,
                f"operator {op_type!r} from custom domain {domain!r} needs a custom operator library",
            )
    return st.sink.findings


def _expect_len(number: int, wire: int, at: int) -> None:
    if wire != 2:
        raise ProtobufError(at, f"field {number} should be a message/string, has wire type {wire}")


def _walk_model(st: _State, start: int, end: int) -> None:
    for number, wire, value in st.pb.fields(start, end):
        if number == _MODEL_IR_VERSION and wire == 0:
            st.saw_ir_version = True
        elif number == _MODEL_OPSET_IMPORT and wire == 2:
            st.saw_opset = True
        elif number in (_MODEL_GRAPH, _MODEL_TRAINING_INFO, _MODEL_FUNCTIONS):
            _expect_len(number, wire, st.pb.r.pos)
            off, length = value  # type: ignore[misc]
            if number == _MODEL_GRAPH:
                st.saw_graph = True
                _walk_graph(st, off, off + length, "graph", 0)
            elif number == _MODEL_TRAINING_INFO:
                _walk_training(st, off, off + length)
            else:
                _walk_function(st, off, off + length)


def _walk_training(st: _State, start: int, end: int) -> None:
    for number, wire, value in st.pb.fields(start, end):
        if number in (_TRAINING_INIT, _TRAINING_ALGO) and wire == 2:
            off, length = value  # type: ignore[misc]
            _walk_graph(st, off, off + length, f"training_info.{'initialization' if number == 1 else 'algorithm'}", 0)


def _walk_function(st: _State, start: int, end: int) -> None:
    name = domain = ""
    for number, wire, value in st.pb.fields(start, end):
        if wire != 2:
            continue
        if number == _FUNC_NAME:
            name = st.pb.string(value) or ""
        elif number == _FUNC_DOMAIN:
            domain = st.pb.string(value) or ""
    st.functions.add((domain, name))
    for number, wire, value in st.pb.fields(start, end):
        if number == _FUNC_NODE and wire == 2:
            off, length = value  # type: ignore[misc]
            _walk_node(st, off, off + length, f"functions[{domain}:{name}]", 0)
        elif number == _FUNC_ATTRIBUTE_PROTO and wire == 2:
            # Default attribute values of the function: tensors (and their external data) too.
            off, length = value  # type: ignore[misc]
            _walk_attribute(st, off, off + length, f"functions[{domain}:{name}].attribute_proto", 0)


def _walk_graph(st: _State, start: int, end: int, where: str, depth: int) -> None:
    if depth > MAX_GRAPH_DEPTH:
        raise ProtobufError(start, f"subgraphs nested deeper than {MAX_GRAPH_DEPTH}")
    n_node = n_init = n_sparse = 0
    for number, wire, value in st.pb.fields(start, end):
        if number not in (_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_SPARSE_INITIALIZER):
            continue
        _expect_len(number, wire, start)
        off, length = value  # type: ignore[misc]
        if number == _GRAPH_NODE:
            _walk_node(st, off, off + length, f"{where}.node[{n_node}]", depth)
            n_node += 1
        elif number == _GRAPH_INITIALIZER:
            _walk_tensor(st, off, off + length, f"{where}.initializer[{n_init}]")
            n_init += 1
        else:
            _walk_sparse(st, off, off + length, f"{where}.sparse_initializer[{n_sparse}]")
            n_sparse += 1


def _walk_node(st: _State, start: int, end: int, where: str, depth: int) -> None:
    domain = op_type = ""
    attributes: list[tuple[int, int]] = []
    for number, wire, value in st.pb.fields(start, end):
        if wire != 2:
            continue
        if number == _NODE_DOMAIN:
            domain = st.pb.string(value) or "<long>"
        elif number == _NODE_OP_TYPE:
            op_type = st.pb.string(value) or "<long>"
        elif number == _NODE_ATTRIBUTE:
            attributes.append(value)  # type: ignore[arg-type]
    where = f"{where}({op_type})"
    st.nodes.append((domain, op_type, where))
    for off, length in attributes:
        _walk_attribute(st, off, off + length, where, depth)


def _walk_attribute(st: _State, start: int, end: int, where: str, depth: int) -> None:
    i = 0
    for number, wire, value in st.pb.fields(start, end):
        if wire != 2 or number not in (_ATTR_T, _ATTR_G, _ATTR_TENSORS, _ATTR_GRAPHS, _ATTR_SPARSE, _ATTR_SPARSES):
            continue
        off, length = value  # type: ignore[misc]
        loc = f"{where}.attribute[{i}]"
        i += 1
        if number in (_ATTR_T, _ATTR_TENSORS):
            _walk_tensor(st, off, off + length, loc)
        elif number in (_ATTR_G, _ATTR_GRAPHS):
            _walk_graph(st, off, off + length, f"{loc}.graph", depth + 1)
        else:
            _walk_sparse(st, off, off + length, loc)


def _walk_sparse(st: _State, start: int, end: int, where: str) -> None:
    for number, wire, value in st.pb.fields(start, end):
        if number in (_SPARSE_VALUES, _SPARSE_INDICES) and wire == 2:
            off, length = value  # type: ignore[misc]
            _walk_tensor(st, off, off + length, f"{where}.{'values' if number == 1 else 'indices'}")


def _walk_tensor(st: _State, start: int, end: int, where: str) -> None:
    name = ""
    entries: list[tuple[int, int]] = []
    location_kind = 0
    for number, wire, value in st.pb.fields(start, end):
        if number == _TENSOR_NAME and wire == 2:
            name = st.pb.string(value) or "<long>"
        elif number == _TENSOR_EXTERNAL_DATA and wire == 2:
            entries.append(value)  # type: ignore[arg-type]
        elif number == _TENSOR_DATA_LOCATION and wire == 0:
            location_kind = int(value)  # type: ignore[call-overload]
    if not entries and location_kind != _EXTERNAL:
        return
    loc = f"{where}[{name!r}]" if name else where
    pairs: list[tuple[str, str]] = []
    for off, length in entries:
        key = val = ""
        for number, wire, value in st.pb.fields(off, off + length):
            if wire == 2 and number in (1, 2):
                text = st.pb.string(value, limit=4096)
                if text is None:
                    st.sink.add("onnx.external-data.malformed", Severity.UNSAFE, loc,
                                "external_data entry longer than 4096 bytes")
                    text = ""
                if number == 1:
                    key = text
                else:
                    val = text
        pairs.append((key, val))
    _check_external(st, pairs, location_kind, loc)


def _check_external(st: _State, pairs: list[tuple[str, str]], location_kind: int, loc: str) -> None:
    U = Severity.UNSAFE
    sink = st.sink
    seen: dict[str, str] = {}
    for key, value in pairs:
        if key in seen:
            sink.add("onnx.external-data.malformed", U, loc, f"external_data key {key!r} repeated: readers disagree")
        seen[key] = value
        if key not in EXTERNAL_KEYS:
            sink.add("onnx.external-data.unknown-key", Severity.SUSPICIOUS, loc, f"unknown external_data key {key!r}")
        elif key in ("offset", "length") and not (value.isascii() and value.isdigit()):
            sink.add("onnx.external-data.malformed", U, loc,
                     f"external_data {key} {value!r} is not a non-negative integer")
    if location_kind != _EXTERNAL:
        sink.add(
            "onnx.external-data.inconsistent",
            Severity.SUSPICIOUS,
            loc,
            "tensor has external_data entries but data_location is not EXTERNAL",
        )
    location = seen.get("location")
    if location is None:
        sink.add("onnx.external-data.malformed", U, loc, "external tensor without a location")
        return
    if "_ORT_MEM_ADDR_" in location or location.startswith("*"):
        # onnxruntime reserves ``*/_ORT_MEM_ADDR_/*``: the offset is then a raw pointer it reads from.
        sink.add(
            "onnx.external-data.memory-address",
            U,
            loc,
            f"external data location {location!r} is onnxruntime's in-memory tag: offset becomes a raw pointer",
        )
        return
    try:
        # ``./weights.bin`` stays inside the directory; ``.`` segments are harmless, ``..`` is not.
        validate_path("/".join(seg for seg in location.split("/") if seg != ".")
                      if location.startswith("./") else location)
    except InvalidPathError as exc:
        sink.add(
            "onnx.external-data.escape",
            U,
            loc,
            f"external data location {location!r} is not a clean relative path ({exc.details['reason']}): "
            "it can read or write outside the model directory",
        )
        return
    inner = st.ctx.path.rsplit("!", 1)[-1]
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(inner), location))
    if st.ctx.siblings and "!" not in st.ctx.path and resolved not in st.ctx.siblings:
        sink.add(
            "onnx.external-data.missing",
            Severity.SUSPICIOUS,
            loc,
            f"external data file {resolved!r} is not part of the model",
        )

