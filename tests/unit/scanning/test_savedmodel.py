"""TensorFlow SavedModels and frozen graphs, written by TensorFlow 2.x itself, scanned by name.

TensorFlow stays out of the registry: the samples are built once per session in a subprocess (importing
TensorFlow is slow and changes process state), and the scanner reads the protobuf with its own walker.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from registry.scanning import Verdict, savedmodel, scan_directory, scan_stream
from tests.support import format_samples as F

BUILD = r'''
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
os.environ["TF_USE_LEGACY_KERAS"] = "1"
out = sys.argv[1]
import tensorflow as tf
import tf_keras
from tensorflow.python.framework import op_def_registry
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
from registry.scanning import savedmodel

f32, string = tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.string)

def module(fn, spec, **variables):
    m = tf.Module()
    for k, v in variables.items():
        setattr(m, k, tf.Variable(v))
    m.__call__ = tf.function(lambda x: fn(m, x), input_signature=[spec])
    return m

def save(name, m):
    tf.saved_model.save(m, os.path.join(out, name))

save("benign_module", module(lambda m, x: x * m.v + tf.reduce_sum(tf.ones([2])), f32, v=3.0))
save("benign_print_stderr", module(lambda m, x: (tf.print("x is", x), x + 1.0)[1], f32))
save("read_file", module(lambda m, p: tf.io.read_file(p), string))
save("write_file", module(lambda m, p: (tf.io.write_file(p, "owned"), p)[1], string))
save("py_function", module(lambda m, x: tf.py_function(lambda v: v * 2, [x], tf.float32), f32))
save("matching_files", module(lambda m, p: tf.io.matching_files(p), string))
save("print_to_file", module(lambda m, x: (tf.print(x, output_stream="file:///tmp/modelreg-owned"), x)[1], f32))
save("save_v2_in_serving", module(
    lambda m, p: (tf.raw_ops.SaveV2(prefix=p, tensor_names=["v"], shape_and_slices=[""], tensors=[m.v]), p)[1],
    string, v=1.0))
save("restore_v2_in_serving", module(
    lambda m, p: tf.raw_ops.RestoreV2(prefix=p, tensor_names=["v"], shape_and_slices=[""], dtypes=[tf.float32])[0],
    string))

dense = tf_keras.Sequential([tf_keras.layers.Dense(2, input_shape=(3,), activation="relu"), tf_keras.layers.Dense(1)])
dense.compile(optimizer="adam", loss="mse")
dense.save(os.path.join(out, "tf_keras_dense"), save_format="tf")
lam = tf_keras.Sequential([tf_keras.layers.Lambda(lambda x: x * 2, input_shape=(3,))])
lam.save(os.path.join(out, "tf_keras_lambda"), save_format="tf")

# Frozen graphs, the TF1 way of shipping a model: one GraphDef with the variables as constants.
def frozen(name, fn, spec):
    concrete = tf.function(fn).get_concrete_function(spec)
    graph_def = convert_variables_to_constants_v2(concrete).graph.as_graph_def()
    with open(os.path.join(out, name), "wb") as f:
        f.write(graph_def.SerializeToString())

v = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
frozen("frozen_benign.pb", lambda x: tf.matmul(tf.reshape(x, [1, 2]), v), tf.TensorSpec([2], tf.float32))
frozen("frozen_read_file.pb", lambda p: tf.strings.length(tf.io.read_file(p)), string)

# A TF1-style SavedModel: the saver's ops sit in the main graph under save/.
with tf.Graph().as_default() as g:
    x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")
    w = tf.compat.v1.get_variable("w", [2, 1])
    y = tf.matmul(x, w, name="y")
    with tf.compat.v1.Session(graph=g) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        builder = tf.compat.v1.saved_model.Builder(os.path.join(out, "tf1_builder"))
        sig = tf.compat.v1.saved_model.predict_signature_def({"x": x}, {"y": y})
        builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map={"serving_default": sig})
        builder.save()

# A TF1 Saver checkpoint: model.ckpt.index/.data-* and the MetaGraphDef in model.ckpt.meta.
with tf.Graph().as_default() as g:
    w = tf.compat.v1.get_variable("w", [2, 2])
    tf.identity(w * 2.0, name="out")
    with tf.compat.v1.Session(graph=g) as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        os.makedirs(os.path.join(out, "tf1_saver"))
        tf.compat.v1.train.Saver().save(sess, os.path.join(out, "tf1_saver", "model.ckpt"))

listed = set(savedmodel.UNSAFE_OPS) | set(savedmodel.SUSPICIOUS_OPS) | savedmodel.SAVE_OPS | savedmodel.RESTORE_OPS
json.dump({"unknown_ops": sorted(op for op in listed | set(savedmodel._ATTR_GATED) if op_def_registry.get(op) is None)},
          open(os.path.join(out, "report.json"), "w"))
'''


@pytest.fixture(scope="session")
def tf_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tf-models")
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, "-c", BUILD, str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def _scans(directory: Path) -> dict[str, object]:
    return {s.path: s for s in scan_directory(directory)}


def _rules(scan) -> set[str]:  # type: ignore[no-untyped-def]
    return {f.rule_id for f in scan.findings}


def test_every_listed_op_is_a_tensorflow_op(tf_models: Path) -> None:
    assert json.loads((tf_models / "report.json").read_text())["unknown_ops"] == []


def test_a_tf1_saver_checkpoint_and_its_meta_graph_are_safe(tf_models: Path) -> None:
    scans = _scans(tf_models / "tf1_saver")
    assert "model.ckpt.meta" in scans and scans["model.ckpt.meta"].format == "savedmodel"  # type: ignore[attr-defined]
    for path, scan in scans.items():
        assert scan.verdict is Verdict.SAFE, (path, scan.as_dict())  # type: ignore[attr-defined]
    data = (tf_models / "tf1_saver" / "model.ckpt.meta").read_bytes()
    # The same meta graph with the SaverDef's save tensor renamed: its SaveV2 is then an unexplained write.
    assert data.count(b"save/control_dependency:0") == 1
    bad = data.replace(b"save/control_dependency:0", b"save/control_dependencX:0")
    scan = scan_stream("model.ckpt.meta", io.BytesIO(bad), len(bad))
    assert "tensorflow.op.checkpoint-outside-saver" in _rules(scan)


@pytest.mark.parametrize("name", ["benign_module", "benign_print_stderr", "tf_keras_dense", "tf1_builder"])
def test_ordinary_savedmodels_are_safe(tf_models: Path, name: str) -> None:
    scans = _scans(tf_models / name)
    assert "saved_model.pb" in scans
    for path, scan in scans.items():
        assert scan.verdict is Verdict.SAFE, (path, scan.as_dict())  # type: ignore[attr-defined]
    assert scans["saved_model.pb"].format == "savedmodel"  # type: ignore[attr-defined]


def test_a_frozen_graph_is_read_as_a_graphdef(tf_models: Path) -> None:
    data = (tf_models / "frozen_benign.pb").read_bytes()
    scan = scan_stream("frozen_benign.pb", io.BytesIO(data), len(data))
    assert scan.verdict is Verdict.SAFE, scan.as_dict()
    data = (tf_models / "frozen_read_file.pb").read_bytes()
    scan = scan_stream("frozen_read_file.pb", io.BytesIO(data), len(data))
    assert scan.verdict is Verdict.UNSAFE and "op ReadFile reads files" in {f.message for f in scan.findings}


@pytest.mark.parametrize(
    ("name", "rule", "op"),
    [
        ("read_file", "tensorflow.op.unsafe", "ReadFile"),
        ("write_file", "tensorflow.op.unsafe", "WriteFile"),
        ("py_function", "tensorflow.op.unsafe", "EagerPyFunc"),
        ("matching_files", "tensorflow.op.unsafe", "MatchingFiles"),
        ("print_to_file", "tensorflow.op.print-to-file", "PrintV2"),
        ("save_v2_in_serving", "tensorflow.op.checkpoint-outside-saver", "SaveV2"),
        ("restore_v2_in_serving", "tensorflow.op.checkpoint-outside-saver", "RestoreV2"),
    ],
)
def test_ops_touching_files_processes_or_python_are_unsafe(tf_models: Path, name: str, rule: str, op: str) -> None:
    scan = _scans(tf_models / name)["saved_model.pb"]
    assert scan.verdict is Verdict.UNSAFE, scan.as_dict()  # type: ignore[attr-defined]
    hits = [f for f in scan.findings if f.rule_id == rule]  # type: ignore[attr-defined]
    assert hits and all(f"op {op} " in f.message and "library.function[" in f.location for f in hits), hits


def test_a_keras_lambda_layer_in_keras_metadata_is_unsafe(tf_models: Path) -> None:
    scans = _scans(tf_models / "tf_keras_lambda")
    meta = scans["keras_metadata.pb"]
    assert meta.verdict is Verdict.UNSAFE and "keras.layer.lambda" in _rules(meta), meta.as_dict()  # type: ignore[attr-defined]


def test_saver_ops_are_allowed_only_where_the_saver_def_points(tf_models: Path) -> None:
    # Point the SaverDef's save tensor elsewhere (same length, so the protobuf stays well-formed): the
    # SaveV2 of the save function is then a file write nothing explains.
    data = (tf_models / "benign_module" / "saved_model.pb").read_bytes()
    assert data.count(b"StatefulPartitionedCall_1:0") == 1
    moved = data.replace(b"StatefulPartitionedCall_1:0", b"StatefulPartitionedCall_X:0")
    scan = scan_stream("saved_model.pb", io.BytesIO(moved), len(moved))
    bad = [f.message for f in scan.findings if f.rule_id == "tensorflow.op.checkpoint-outside-saver"]
    assert scan.verdict is Verdict.UNSAFE and bad and all("SaveV2" in m or "MergeV2Checkpoints" in m for m in bad), bad


def _graph(*nodes: bytes) -> bytes:
    from tests.support.format_samples import _pb_field

    return b"".join(_pb_field(1, 2, n) for n in nodes)


def _node(name: str, op: str, attrs: dict[str, bytes] | None = None) -> bytes:
    from tests.support.format_samples import _pb_field

    body = _pb_field(1, 2, name.encode()) + _pb_field(2, 2, op.encode())
    for key, value in (attrs or {}).items():
        body += _pb_field(5, 2, _pb_field(1, 2, key.encode()) + _pb_field(2, 2, value))
    return body


def test_hand_made_graphs_name_their_ops() -> None:
    from tests.support.format_samples import _pb_field

    cases = {
        _graph(_node("a", "Const")): set(),
        _graph(_node("a", "ImmutableConst")): {"tensorflow.op.unsafe"},
        _graph(_node("a", "Identity"), _node("b", "PyFunc")): {"tensorflow.op.unsafe"},
        _graph(_node("a", "PrintV2", {"output_stream": _pb_field(2, 2, b"stderr")})): set(),
        _graph(_node("a", "PrintV2",
                     {"output_stream": _pb_field(2, 2, b"file:///etc/cron.d/x")})): {"tensorflow.op.print-to-file"},
        _graph(_node("a", "DecodeProtoV2",
                     {"descriptor_source": _pb_field(2, 2, b"/etc/passwd")})): {"tensorflow.op.proto-descriptor-file"},
        _graph(_node("a", "InitializeTableFromTextFileV2")): {"tensorflow.op.suspicious"},
        _graph(_node("a", "SaveV2")): {"tensorflow.op.checkpoint-outside-saver"},
        # A second op field: protobuf keeps the last one, so every one is checked.
        _graph(_node("a", "Identity") + _pb_field(2, 2, b"ReadFile")): {"tensorflow.op.unsafe"},
        # A group before the node is skipped by protobuf parsers; it must not hide what follows.
        b"\x0b\x08\x01\x0c" + _graph(_node("a", "WriteFile")): {"tensorflow.op.unsafe"},
    }
    for data, want in cases.items():
        found = F.rules(F.scan_bytes(savedmodel.scan, data, "graph.pb"))
        assert found == want, (data, found)


def test_asset_names_leaving_the_assets_directory_are_unsafe() -> None:
    from tests.support.format_samples import _pb_field

    meta_graph = _pb_field(6, 2, _pb_field(2, 2, b"../../../etc/passwd"))
    data = _pb_field(1, 0, b"\x01") + _pb_field(2, 2, meta_graph)
    assert {f.rule_id for f in F.scan_bytes(savedmodel.scan, data, "saved_model.pb")} == {"tensorflow.asset.escape"}


def test_truncated_and_garbled_protobufs_fail_closed(tf_models: Path) -> None:
    data = (tf_models / "benign_module" / "saved_model.pb").read_bytes()
    for cut in (1, 2, 10, len(data) // 3, len(data) // 2, len(data) - 1):
        scan = scan_stream("saved_model.pb", io.BytesIO(data[:cut]), cut)
        assert scan.verdict is not Verdict.SAFE, (cut, scan.as_dict())
    garbled = [
        data[:2] + b"\xff" * 10 + data[12:],  # a varint longer than ten bytes
        b"\x0f" + data[1:],  # wire type 7 in the first tag
        b"\x12\xff\xff\xff\xff\x0f" + data,  # a field longer than the file
        b"saved_model.pb is not a protobuf at all\n",
        b"",
    ]
    for bad in garbled:
        for name in ("saved_model.pb", "keras_metadata.pb", "frozen.pb", "fingerprint.pb"):
            if not bad and name != "saved_model.pb":
                continue  # an empty message is a valid GraphDef, SavedMetadata and FingerprintDef
            scan = scan_stream(name, io.BytesIO(bad), len(bad))
            assert scan.verdict is not Verdict.SAFE, (name, bad[:20], scan.as_dict())
    text = b'meta_graphs { graph_def { node { name: "a" op: "ReadFile" } } }'
    assert scan_stream("saved_model.pbtxt", io.BytesIO(text), len(text)).verdict is Verdict.SUSPICIOUS


def _saved_model(graph: bytes, *, save: str = "", restore: str = "", objects: bytes = b"") -> bytes:
    from tests.support.format_samples import _pb_field

    saver = _pb_field(2, 2, save.encode()) + _pb_field(3, 2, restore.encode())
    meta_graph = _pb_field(2, 2, graph) + _pb_field(3, 2, saver) + (_pb_field(7, 2, objects) if objects else b"")
    return _pb_field(1, 0, b"\x01") + _pb_field(2, 2, meta_graph)


def _library(functions: dict[str, list[bytes]]) -> bytes:
    from tests.support.format_samples import _pb_field

    body = b""
    for name, nodes in functions.items():
        fn = _pb_field(1, 2, _pb_field(1, 2, name.encode())) + b"".join(_pb_field(3, 2, n) for n in nodes)
        body += _pb_field(1, 2, fn)
    return _pb_field(2, 2, body)


@pytest.mark.parametrize(
    ("save_body", "restore_body", "want"),
    [
        ("SaveV2", "RestoreV2", set()),
        ("RestoreV2", "RestoreV2", {"tensorflow.op.checkpoint-outside-saver"}),  # the save side may not read
        ("SaveV2", "SaveV2", {"tensorflow.op.checkpoint-outside-saver"}),  # the restore side may not write
    ],
)
def test_saver_functions_called_by_op_name_are_on_their_own_side(save_body: str, restore_body: str,
                                                                 want: set[str]) -> None:
    # TF1-era graphs call a library function by using its name as the op; the saver's functions are found so too.
    graph = _graph(_node("save", "save_fn"), _node("restore", "restore_fn")) + _library(
        {"save_fn": [_node("s", save_body)], "restore_fn": [_node("r", restore_body)]}
    )
    data = _saved_model(graph, save="save:0", restore="restore")
    assert F.rules(F.scan_bytes(savedmodel.scan, data, "saved_model.pb")) == want


def test_keras_metadata_inside_the_saved_model_object_graph_is_checked() -> None:
    from tests.support.format_samples import _pb_field

    lam = json.dumps({"class_name": "Lambda", "config": {"name": "l", "function": ["4wEAAAAA", None, None]}})
    user_object = _pb_field(1, 2, b"_tf_keras_layer") + _pb_field(3, 2, lam.encode())
    objects = _pb_field(1, 2, _pb_field(4, 2, user_object))
    data = _saved_model(_graph(_node("a", "Const")), objects=objects)
    assert F.rules(F.scan_bytes(savedmodel.scan, data, "saved_model.pb")) == {"keras.layer.lambda"}


def test_a_name_that_is_not_utf8_does_not_hide_the_nodes_after_it() -> None:
    data = _graph(_node("a", "Const").replace(b"\x0a\x01a", b"\x0a\x01\xff"), _node("b", "ReadFile"))
    assert b"\x0a\x01\xff" in data
    assert F.rules(F.scan_bytes(savedmodel.scan, data, "graph.pb")) == {"tensorflow.op.unsafe"}


def test_a_savedmodel_shipped_as_a_tar_gz_is_read_member_by_member(tf_models: Path) -> None:
    # TF Hub and many model zoos publish SavedModels as model.tar.gz.
    import gzip

    from tests.support.scan_samples import tar_bytes

    for name, want in (("benign_module", Verdict.SAFE), ("read_file", Verdict.UNSAFE)):
        root = tf_models / name
        members = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
        data = gzip.compress(tar_bytes(members), mtime=0)
        scan = scan_stream("model.tar.gz", io.BytesIO(data), len(data))
        assert scan.verdict is want, (name, scan.as_dict())
