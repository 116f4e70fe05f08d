"""TensorFlow SavedModels and frozen graphs: the ops a graph would run, read from its protobuf.

A TensorFlow model is a program: ``tf.saved_model.load`` (and TF Serving, and the C++ loader) runs the
restore function of ``saved_model.pb`` at load time and its signatures when called, and ops in a graph can
read and write files, list directories, map memory, call Python functions of the loading process, open
RPC channels and database connections (the TensorAbuse primitives; ``saved_model_cli scan`` denies a few).
Loaders pick the parser by the file's name, so this module is chosen by name too:

- ``saved_model.pb``: a ``SavedModel``; every ``MetaGraphDef``'s graph and function library is walked, and
  its Keras metadata (``SavedUserObject.metadata``) and asset file names are checked;
- ``keras_metadata.pb``: tf_keras's ``SavedMetadata``; each object's JSON config goes through the Keras
  config walker (a ``Lambda`` layer carries marshalled bytecode that ``tf_keras`` runs on load);
- ``fingerprint.pb``: checked to be a well-formed message;
- ``*.meta``: the ``MetaGraphDef`` a TF1 ``Saver`` writes beside its checkpoint (``import_meta_graph``);
- ``saved_model.pbtxt``: the text format, not inspected here (suspicious);
- any other ``*.pb``: a frozen ``GraphDef``.

The checkpoint ops every SavedModel holds (``SaveV2``, ``MergeV2Checkpoints``, ``RestoreV2``) are allowed only
where the ``SaverDef`` points: in the nodes its save tensor and restore op depend on and the functions they
call (TF2 writes ``__inference__traced_save_*`` and ``__inference__traced_restore_*``); save ops only on the
save side, restore ops only on the restore side. Anywhere else they read or write files.

Example:
    >>> import io
    >>> [f.rule_id for f in scan(io.BytesIO(b"\\x0a\\x05"), 2, ScanContext("frozen.pb"))]
    ['tensorflow.protobuf.malformed']
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from registry.domain.errors import InvalidPathError
from registry.domain.files import validate_path
from registry.scanning import keras
from registry.scanning._formatio import BoundedReader, FindingSink, TruncatedError
from registry.scanning._protobuf import ProtobufBudgetError, ProtobufError, ProtobufWalker
from registry.scanning.model import Finding, ScanContext, Severity

MAX_FIELDS = 20_000_000
"""A budget of protobuf fields visited; far above any real model's structure."""
MAX_ATTR_DEPTH = 16
MAX_METADATA_BYTES = keras.MAX_CONFIG_BYTES

_READS = "reads files"
_WRITES = "writes files"
_PYTHON = "calls a Python function of the loading process"
_NETWORK = "opens network connections"
UNSAFE_OPS: dict[str, str] = {
    **dict.fromkeys(("PyFunc", "PyFuncStateless", "EagerPyFunc"), _PYTHON),
    **dict.fromkeys(
        (
            "ReadFile", "MatchingFiles", "MatchingFilesDataset", "ExperimentalMatchingFilesDataset", "WholeFileReader",
            "WholeFileReaderV2", "TextLineReader", "TextLineReaderV2", "FixedLengthRecordReader",
            "FixedLengthRecordReaderV2", "TFRecordReader", "TFRecordReaderV2", "LMDBReader", "TextLineDataset",
            "TFRecordDataset", "TFRecordDatasetV2", "FixedLengthRecordDataset", "FixedLengthRecordDatasetV2",
            "CSVDataset", "CSVDatasetV2", "ExperimentalCSVDataset", "LMDBDataset", "ExperimentalLMDBDataset",
            "LoadDataset", "SnapshotDatasetReader", "SnapshotNestedDatasetReader", "SnapshotChunkDataset",
            "ListSnapshotChunksDataset", "LoadAndRemapMatrix", "GenerateVocabRemapping", "DTensorRestoreV2",
        ),
        _READS,
    ),
    "ImmutableConst": "memory-maps a file named in its attributes",
    **dict.fromkeys(
        (
            "WriteFile", "SaveDataset", "SaveDatasetV2", "DatasetToTFRecord", "ExperimentalDatasetToTFRecord",
            "SnapshotDataset", "SnapshotDatasetV2", "DistributedSave", "DumpTensor", "CalibrationStatisticsSaver",
            "CreateSummaryFileWriter", "CreateSummaryDbWriter", "SummaryWriter", "WriteSummary", "WriteScalarSummary",
            "WriteHistogramSummary", "WriteImageSummary", "WriteAudioSummary", "WriteGraphSummary",
            "WriteRawProtoSummary", "ImportEvent", "FlushSummaryWriter", "CloseSummaryWriter",
            "StatsAggregatorSetSummaryWriter",
        ),
        _WRITES,
    ),
    # tfdbg ops (and the Copy ops it rewrites) send tensors to their debug URLs: file:// or grpc://.
    **dict.fromkeys(
        ("DebugIdentity", "DebugIdentityV2", "DebugIdentityV3", "DebugNanCount", "DebugNumericSummary",
         "DebugNumericSummaryV2", "Copy", "CopyHost"),
        "sends tensors to debug URLs (files or gRPC)",
    ),
    **dict.fromkeys(("SqlDataset", "ExperimentalSqlDataset"), "opens a database file"),
    "FileSystemSetConfiguration": "reconfigures a filesystem (endpoints, credentials)",
    **dict.fromkeys(
        ("RpcCall", "RpcClient", "RpcServer", "RpcServerStart", "RpcServerRegister", "RpcCheckStatus", "RpcGetValue",
         "DeleteRpcFutureResource", "DataServiceDataset", "DataServiceDatasetV2", "DataServiceDatasetV3",
         "DataServiceDatasetV4", "RegisterDataset", "RegisterDatasetV2"),
        _NETWORK,
    ),
    "Abort": "terminates the loading process",
}
"""Ops that touch files, processes or the network wherever they appear."""

SUSPICIOUS_OPS: dict[str, str] = {
    # Vocabulary tables of text models read their asset file this way; the path is still the model's choice.
    "InitializeTableFromTextFile": "fills a lookup table from a file",
    "InitializeTableFromTextFileV2": "fills a lookup table from a file",
    # tf.data's cache() writes to disk when given a file name (an input tensor, not visible here).
    "CacheDataset": "may cache a dataset to a file",
    "CacheDatasetV2": "may cache a dataset to a file",
}
SAVE_OPS = frozenset({"Save", "SaveV2", "SaveSlices", "MergeV2Checkpoints"})
RESTORE_OPS = frozenset({"Restore", "RestoreV2", "RestoreSlice"})
# Ops that are harmless unless one string attribute names a file: (attribute, values that stay in memory).
_ATTR_GATED: dict[str, tuple[str, str, tuple[bytes, ...]]] = {
    "PrintV2": ("output_stream", "tensorflow.op.print-to-file", (b"stderr", b"stdout", b"log(info)", b"log(warning)",
                                                                  b"log(error)")),
    "DecodeProtoV2": ("descriptor_source", "tensorflow.op.proto-descriptor-file", (b"local://",)),
    "EncodeProto": ("descriptor_source", "tensorflow.op.proto-descriptor-file", (b"local://",)),
}
_ATTR_KEYS = frozenset(spec[0] for spec in _ATTR_GATED.values())

# Field numbers from tensorflow/core/protobuf and core/framework (stable since TF 1.x).
_SM_META_GRAPHS = 2
_MG_GRAPH_DEF, _MG_SAVER_DEF, _MG_ASSET_FILE_DEF, _MG_OBJECT_GRAPH = 2, 3, 6, 7
_GD_NODE, _GD_LIBRARY = 1, 2
_LIB_FUNCTION = 1
_FN_SIGNATURE, _FN_NODE_DEF, _OPDEF_NAME = 1, 3, 1
_NODE_NAME, _NODE_OP, _NODE_INPUT, _NODE_ATTR = 1, 2, 3, 5
_ATTR_LIST, _ATTR_S, _ATTR_PLACEHOLDER, _ATTR_FUNC = 1, 2, 9, 10
_LIST_FUNC = 9
_NAMEATTR_NAME, _NAMEATTR_ATTR = 1, 2
_SAVER_SAVE_TENSOR, _SAVER_RESTORE_OP = 2, 3
_ASSET_FILENAME = 2
_OG_NODES, _OBJ_USER_OBJECT, _USER_OBJECT_METADATA = 1, 4, 3
_SMD_NODES, _SMD_NODE_METADATA = 1, 5


@dataclass(slots=True)
class _Node:
    where: str
    name: str = ""
    ops: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    calls: set[str] = field(default_factory=set)
    attrs: dict[str, list[bytes | None]] = field(default_factory=dict)
    """Values of the attributes in :data:`_ATTR_KEYS` (None: a placeholder, resolved elsewhere)."""


@dataclass(slots=True)
class _Graph:
    nodes: list[_Node] = field(default_factory=list)
    functions: dict[str, list[_Node]] = field(default_factory=dict)
    save_seeds: set[str] = field(default_factory=set)
    restore_seeds: set[str] = field(default_factory=set)


class _State:
    def __init__(self, reader: BinaryIO, size: int, ctx: ScanContext) -> None:
        self.pb = ProtobufWalker(BoundedReader(reader, size, chunk=1 << 16), budget=MAX_FIELDS, groups=True)
        self.size = size
        self.ctx = ctx
        self.sink = FindingSink()


def scan(reader: BinaryIO, size: int, ctx: ScanContext) -> list[Finding]:
    """Read a TensorFlow protobuf the way its loader would (chosen by the file's name) and check it.

    Args:
        reader: Seekable stream over the file.
        size: Its byte size.
        ctx: ``ctx.path`` names the file (``saved_model.pb``, ``keras_metadata.pb``...).

    Returns:
        Findings: ``tensorflow.op.*`` for ops touching files, processes or the network,
        ``keras.*`` for Keras metadata, ``tensorflow.asset.escape``, and ``tensorflow.protobuf.malformed``,
        ``tensorflow.structure.too-large``, ``tensorflow.savedmodel.*`` when the bytes cannot be read as such.
    """
    base = posixpath.basename(ctx.path.rsplit("!", 1)[-1]).lower()
    st = _State(reader, size, ctx)
    if base == "saved_model.pbtxt":
        st.sink.add("tensorflow.savedmodel.text-format", Severity.SUSPICIOUS, ctx.path,
                    "text-format SavedModel: its graph is not inspected")
        return st.sink.findings
    try:
        if base == "saved_model.pb":
            _saved_model(st)
        elif base == "keras_metadata.pb":
            _keras_metadata(st)
        elif base.endswith(".meta"):
            _meta_graph(st, 0, size, "meta_graph")
        elif base == "fingerprint.pb":
            for _ in st.pb.fields(0, size):
                pass
        else:
            graph = _Graph()
            _graph_def(st, 0, size, graph, "graph_def")
            _check_graph(st, graph)
    except (TruncatedError, ProtobufError) as exc:
        # TensorFlow's parser refuses these bytes too (groups and unknown fields are skipped alike), so
        # nothing is loaded; but the file is not what its name says.
        st.sink.add("tensorflow.protobuf.malformed", Severity.SUSPICIOUS, f"{ctx.path}@{getattr(exc, 'offset', '?')}",
                    f"not a well-formed protobuf message: {exc}")
    except ProtobufBudgetError:
        # TensorFlow parses any number of fields: what was not walked may hold any op.
        st.sink.add("tensorflow.structure.too-large", Severity.UNSAFE, ctx.path,
                    f"more than {MAX_FIELDS} protobuf fields: not inspected")
    return st.sink.findings


# -- SavedModel


def _saved_model(st: _State) -> None:
    meta_graphs = [v for n, w, v in st.pb.fields(0, st.size) if n == _SM_META_GRAPHS and w == 2]
    if not meta_graphs:
        st.sink.add("tensorflow.savedmodel.invalid", Severity.SUSPICIOUS, st.ctx.path,
                    "no MetaGraphDef: not a SavedModel a loader would accept")
    for i, (off, length) in enumerate(meta_graphs):
        _meta_graph(st, off, off + length, f"meta_graphs[{i}]")


def _meta_graph(st: _State, start: int, end: int, where: str) -> None:
    graph = _Graph()
    # A repeated singular message is merged by protobuf: every occurrence counts.
    for number, wire, value in st.pb.fields(start, end):
        if wire != 2:
            continue
        off, length = value
        if number == _MG_GRAPH_DEF:
            _graph_def(st, off, off + length, graph, f"{where}.graph_def")
        elif number == _MG_SAVER_DEF:
            for n, w, v in st.pb.fields(off, off + length):
                if w == 2 and n in (_SAVER_SAVE_TENSOR, _SAVER_RESTORE_OP):
                    target = _node_ref(_text(st, v) or "")
                    (graph.save_seeds if n == _SAVER_SAVE_TENSOR else graph.restore_seeds).add(target)
        elif number == _MG_ASSET_FILE_DEF:
            _asset(st, off, off + length, where)
        elif number == _MG_OBJECT_GRAPH:
            _object_graph(st, off, off + length, f"{where}.object_graph_def")
    _check_graph(st, graph)


def _asset(st: _State, start: int, end: int, where: str) -> None:
    for number, wire, value in st.pb.fields(start, end):
        if number != _ASSET_FILENAME or wire != 2:
            continue
        name = _text(st, value, limit=4096)
        try:
            validate_path(name or "")
        except InvalidPathError as exc:
            st.sink.add("tensorflow.asset.escape", Severity.UNSAFE, f"{st.ctx.path}: {where}.asset_file_def",
                        f"asset file name {name!r} is not a clean relative path ({exc.details['reason']}): "
                        "the loader opens it outside the assets directory")


def _object_graph(st: _State, start: int, end: int, where: str) -> None:
    for i, (number, wire, value) in enumerate(st.pb.fields(start, end)):
        if number != _OG_NODES or wire != 2:
            continue
        for n, w, v in st.pb.fields(value[0], value[0] + value[1]):
            if n != _OBJ_USER_OBJECT or w != 2:
                continue
            for n2, w2, v2 in st.pb.fields(v[0], v[0] + v[1]):
                if n2 == _USER_OBJECT_METADATA and w2 == 2:
                    _keras_json(st, v2, f"{where}.nodes[{i}].user_object.metadata")


def _keras_metadata(st: _State) -> None:
    for i, (number, wire, value) in enumerate(st.pb.fields(0, st.size)):
        if number != _SMD_NODES or wire != 2:
            continue
        for n, w, v in st.pb.fields(value[0], value[0] + value[1]):
            if n == _SMD_NODE_METADATA and w == 2:
                _keras_json(st, v, f"nodes[{i}].metadata")


def _keras_json(st: _State, span: Any, where: str) -> None:
    loc = f"{st.ctx.path}: {where}"
    if span[1] == 0:
        return
    text = st.pb.raw(span, limit=MAX_METADATA_BYTES)
    if text is None:
        st.sink.add("tensorflow.keras-metadata.too-large", Severity.UNSAFE, loc,
                    f"more than {MAX_METADATA_BYTES} bytes of Keras config: not inspected")
        return
    try:
        config = json.loads(text.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        # tf_keras cannot rebuild the object either; nothing it holds runs, but it is no model.
        st.sink.add("tensorflow.keras-metadata.invalid", Severity.SUSPICIOUS, loc, f"not JSON: {exc}"[:300])
        return
    st.sink.extend(keras.check_config(config, loc))


# -- graphs


def _text(st: _State, span: tuple[int, int], limit: int = 1 << 16) -> str | None:
    """A string field, None when longer than ``limit``.

    Bytes that are not UTF-8 are replaced rather than refused: a parser more lenient than ours must not
    find nodes after the point where we stopped reading.
    """
    raw = st.pb.raw(span, limit)
    return None if raw is None else raw.decode("utf-8", "replace")


def _node_ref(text: str) -> str:
    """The node an input or tensor name refers to: ``^a``, ``a:0``, ``a:output:0`` are all ``a``."""
    return text.removeprefix("^").split(":", 1)[0]


def _graph_def(st: _State, start: int, end: int, graph: _Graph, where: str) -> None:
    for number, wire, value in st.pb.fields(start, end):
        if wire != 2:
            continue
        off, length = value
        if number == _GD_NODE:
            graph.nodes.append(_node(st, off, off + length, f"{where}.node[{len(graph.nodes)}]"))
        elif number == _GD_LIBRARY:
            for n, w, v in st.pb.fields(off, off + length):
                if n == _LIB_FUNCTION and w == 2:
                    _function(st, v[0], v[0] + v[1], graph, f"{where}.library")


def _function(st: _State, start: int, end: int, graph: _Graph, where: str) -> None:
    name = ""
    node_spans: list[tuple[int, int]] = []
    for number, wire, value in st.pb.fields(start, end):
        if wire != 2:
            continue
        if number == _FN_SIGNATURE:
            for n, w, v in st.pb.fields(value[0], value[0] + value[1]):
                if n == _OPDEF_NAME and w == 2:
                    name = _text(st, v) or "<long>"
        elif number == _FN_NODE_DEF:
            node_spans.append(value)
    nodes = graph.functions.setdefault(name, [])
    for off, length in node_spans:
        nodes.append(_node(st, off, off + length, f"{where}.function[{name}].node_def[{len(nodes)}]"))


def _node(st: _State, start: int, end: int, where: str) -> _Node:
    node = _Node(where)
    for number, wire, value in st.pb.fields(start, end):
        if wire != 2:
            continue
        if number == _NODE_NAME:
            node.name = _text(st, value) or "<long>"
        elif number == _NODE_OP:
            node.ops.append(_text(st, value) or "<long>")
        elif number == _NODE_INPUT:
            node.inputs.append(_node_ref(_text(st, value) or ""))
        elif number == _NODE_ATTR:
            key, attr = _attr_entry(st, value)
            if attr is not None:
                _attr(st, attr, node, key, 0)
    return node


def _attr_entry(st: _State, span: tuple[int, int]) -> tuple[str, tuple[int, int] | None]:
    """One entry of a ``map<string, AttrValue>``: its key and the span of its value (None when absent)."""
    key, attr = "", None
    for n, w, v in st.pb.fields(span[0], span[0] + span[1]):
        if w == 2 and n == 1:
            key = _text(st, v) or ""
        elif w == 2 and n == 2:
            attr = v
    return key, attr


def _attr(st: _State, span: tuple[int, int], node: _Node, key: str, depth: int) -> None:
    """Collect the functions an attribute value names (calls) and the literal strings of watched keys."""
    if depth > MAX_ATTR_DEPTH:
        raise ProtobufError(span[0], f"attribute values nested deeper than {MAX_ATTR_DEPTH}")
    for number, wire, value in st.pb.fields(span[0], span[0] + span[1]):
        if wire != 2:
            continue
        if number == _ATTR_FUNC:
            _name_attr_list(st, value, node, depth)
        elif number == _ATTR_LIST:
            for n, w, v in st.pb.fields(value[0], value[0] + value[1]):
                if n == _LIST_FUNC and w == 2:
                    _name_attr_list(st, v, node, depth)
        elif key in _ATTR_KEYS and number == _ATTR_S:
            node.attrs.setdefault(key, []).append(st.pb.raw(value, limit=4096))
        elif key in _ATTR_KEYS and number == _ATTR_PLACEHOLDER:
            node.attrs.setdefault(key, []).append(None)


def _name_attr_list(st: _State, span: tuple[int, int], node: _Node, depth: int) -> None:
    for number, wire, value in st.pb.fields(span[0], span[0] + span[1]):
        if wire != 2:
            continue
        if number == _NAMEATTR_NAME:
            node.calls.add(_text(st, value) or "<long>")
        elif number == _NAMEATTR_ATTR:
            key, attr = _attr_entry(st, value)
            if attr is not None:
                _attr(st, attr, node, key, depth + 1)


def _callees(node: _Node, graph: _Graph) -> set[str]:
    # A node whose op is a library function's name calls that function (TF refuses names of real ops).
    return node.calls | {op for op in node.ops if op in graph.functions}


def _saver_side(graph: _Graph, seeds: set[str]) -> tuple[set[str], set[str]]:
    """The main-graph nodes ``seeds`` depend on, and every function those nodes call, transitively."""
    by_name: dict[str, list[_Node]] = {}
    for node in graph.nodes:
        by_name.setdefault(node.name, []).append(node)
    nodes: set[str] = set()
    todo = [s for s in seeds if s]
    while todo:
        name = todo.pop()
        if name in nodes:
            continue
        nodes.add(name)
        for node in by_name.get(name, []):
            todo.extend(node.inputs)
    functions: set[str] = set()
    pending = [f for name in nodes for node in by_name.get(name, []) for f in _callees(node, graph)]
    while pending:
        fn = pending.pop()
        if fn in functions:
            continue
        functions.add(fn)
        for node in graph.functions.get(fn, []):
            pending.extend(_callees(node, graph))
    return nodes, functions


def _check_graph(st: _State, graph: _Graph) -> None:
    save_nodes, save_fns = _saver_side(graph, graph.save_seeds)
    restore_nodes, restore_fns = _saver_side(graph, graph.restore_seeds)
    for node in graph.nodes:
        _check_node(st, node, node.name in save_nodes, node.name in restore_nodes)
    for name, nodes in graph.functions.items():
        for node in nodes:
            _check_node(st, node, name in save_fns, name in restore_fns)


def _check_node(st: _State, node: _Node, saving: bool, restoring: bool) -> None:
    loc = f"{st.ctx.path}: {node.where}({node.name})"
    for op in node.ops:
        if op in UNSAFE_OPS:
            st.sink.add("tensorflow.op.unsafe", Severity.UNSAFE, loc, f"op {op} {UNSAFE_OPS[op]}")
        elif (op in SAVE_OPS and not saving) or (op in RESTORE_OPS and not restoring):
            st.sink.add("tensorflow.op.checkpoint-outside-saver", Severity.UNSAFE, loc,
                        f"op {op} {'writes' if op in SAVE_OPS else 'reads'} checkpoint files outside the "
                        f"model's {'save' if op in SAVE_OPS else 'restore'} function")
        elif op in SUSPICIOUS_OPS:
            st.sink.add("tensorflow.op.suspicious", Severity.SUSPICIOUS, loc, f"op {op} {SUSPICIOUS_OPS[op]}")
        elif op in _ATTR_GATED:
            key, rule, harmless = _ATTR_GATED[op]
            for value in node.attrs.get(key, []):
                if value is None or value not in harmless:
                    st.sink.add(rule, Severity.UNSAFE, loc,
                                f"op {op} has {key} {value!r}: it reads or writes a file or another stream")
