"""A benign corpus written by the real libraries, with every documented save option.

Each entry of :data:`BENIGN` writes one sample into an empty directory of its own (most write
one file; SavedModel and ONNX-with-external-data write several). Nothing here is hand-made: the
bytes are what ``torch.save``, ``torch.jit.save``, ``numpy.save``, ``joblib.dump``,
``safetensors``, Keras 3, tf_keras, ``gguf.GGUFWriter`` and ``onnx`` write, so a finding on any
of them is a false positive that would cost a security approver's time.

TensorFlow and Keras are imported only by the builders that need them (importing TF is slow).
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import decimal
import fractions
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

Builder = Callable[[Path], None]
BENIGN: dict[str, Builder] = {}


def _register(name: str, fn: Builder) -> None:
    assert name not in BENIGN, name
    BENIGN[name] = fn


# --- torch.save --------------------------------------------------------------------------------


def _linear_state_dict() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU()).state_dict()


def _torch_objects() -> dict[str, Callable[[], Any]]:
    import numpy as np
    import torch

    dtypes = [
        torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
        torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128, torch.float8_e4m3fn,
        torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz, torch.uint16, torch.uint32, torch.uint64,
    ]
    return {
        "state_dict": _linear_state_dict,
        "ordered_dict": lambda: collections.OrderedDict(weight=torch.ones(2, 2), bias=torch.zeros(2)),
        "every_dtype": lambda: {str(d): torch.arange(4).to(d) for d in dtypes},
        "checkpoint": lambda: {
            "model": _linear_state_dict(), "epoch": 3, "lr": 1e-3, "betas": (0.9, 0.999), "tags": {"a", "b"},
            "names": ["x", "y"], "none": None, "blob": b"\x00\x01", "complex": 1 + 2j, "size": torch.Size([2, 3]),
            "dtype": torch.bfloat16, "device": torch.device("cpu"), "big": 2**80, "ratio": float("nan"),
        },
        "parameter": lambda: {"p": torch.nn.Parameter(torch.ones(2)),
                              "frozen": torch.nn.Parameter(torch.ones(1), requires_grad=False)},
        "views_share_storage": lambda: (lambda t: {"a": t, "b": t[2:5], "c": t.view(2, 5)})(torch.arange(10.0)),
        "channels_last": lambda: torch.zeros(1, 2, 3, 3).to(memory_format=torch.channels_last),
        "sparse": lambda: {
            "coo": torch.eye(3).to_sparse(), "csr": torch.eye(3).to_sparse_csr(), "csc": torch.eye(3).to_sparse_csc(),
            "bsr": torch.eye(4).to_sparse_bsr((2, 2)), "bsc": torch.eye(4).to_sparse_bsc((2, 2)),
        },
        "quantized": lambda: {
            "per_tensor": torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8),
            "per_channel": torch.quantize_per_channel(
                torch.ones(2, 3), torch.tensor([0.1, 0.2]), torch.tensor([0, 0]), 0, torch.qint8
            ),
            "qint32": torch.quantize_per_tensor(torch.ones(3), 0.5, 0, torch.qint32),
        },
        "meta_and_nested": lambda: {
            "meta": torch.empty(3, device="meta"),
            "nested": torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
        },
        "numpy_inside": lambda: {"a": np.arange(3), "scalar": np.float32(1.5), "dtype": np.dtype("<f4"),
                                 "i": np.int64(2)},
    }


_TORCH_OPTIONS: dict[str, dict[str, Any]] = {
    "zip": {},
    "legacy": {"_use_new_zipfile_serialization": False},
    **{f"protocol{p}": {"pickle_protocol": p} for p in (2, 3, 4, 5)},
    "legacy_protocol4": {"_use_new_zipfile_serialization": False, "pickle_protocol": 4},
}


@contextlib.contextmanager
def _torch_save_config(**settings: Any) -> Iterator[None]:
    """Set ``torch.utils.serialization.config.save`` options for the duration of one save."""
    from torch.utils.serialization import config

    old = {k: getattr(config.save, k) for k in settings}
    for k, v in settings.items():
        setattr(config.save, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(config.save, k, v)


def _torch_builder(obj: str, option: str, config: dict[str, Any] | None = None) -> Builder:
    def build(d: Path) -> None:
        import warnings

        import torch

        with warnings.catch_warnings(), _torch_save_config(**(config or {})):
            warnings.simplefilter("ignore")  # sparse/quantized/nested tensors warn that they are beta
            torch.save(_torch_objects()[obj](), d / "pytorch_model.bin", **_TORCH_OPTIONS[option])

    return build


for _obj in ("state_dict", "ordered_dict", "every_dtype", "checkpoint", "parameter", "views_share_storage",
             "channels_last", "sparse", "quantized", "meta_and_nested", "numpy_inside"):
    for _opt in _TORCH_OPTIONS:
        _register(f"torch_save_{_obj}_{_opt}", _torch_builder(_obj, _opt))
for _name, _cfg in {
    "no_crc32": {"compute_crc32": False},
    "pinned_memory_d2h": {"use_pinned_memory_for_d2h": True},
    "storage_alignment_4096": {"storage_alignment": 4096},
    "storage_alignment_1": {"storage_alignment": 1},
}.items():
    _register(f"torch_save_config_{_name}", _torch_builder("checkpoint", "zip", _cfg))


def _torchscript(d: Path) -> None:
    import torch

    torch.manual_seed(0)
    torch.jit.save(torch.jit.script(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())), d / "model.pt")


_register("torch_jit_save_scripted", _torchscript)


# --- safetensors -------------------------------------------------------------------------------


def _safetensors_torch(d: Path) -> None:
    import torch
    from safetensors.torch import save_file

    tensors = {f"t_{str(dt).split('.')[1]}": torch.arange(6).reshape(2, 3).to(dt) for dt in (
        torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8, torch.int16,
        torch.int32, torch.int64, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2)}
    tensors["empty"] = torch.zeros(0, 4)
    tensors["scalar"] = torch.tensor(3.0)
    save_file(tensors, d / "model.safetensors", metadata={"format": "pt", "note": "benign, ünïcode ✓", "empty": ""})


def _safetensors_numpy(d: Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    save_file(
        {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(3, dtype=np.int64),
         "c": np.zeros(2, np.complex64)},
        str(d / "model.safetensors"),
        metadata={"format": "np"},
    )


_register("safetensors_torch_metadata", _safetensors_torch)
_register("safetensors_numpy_metadata", _safetensors_numpy)


# --- numpy -------------------------------------------------------------------------------------


def _numpy_arrays() -> dict[str, Any]:
    import numpy as np

    return {
        "f32": np.arange(12, dtype=np.float32).reshape(3, 4),
        "fortran": np.asfortranarray(np.arange(6, dtype=">i4").reshape(2, 3)),
        "structured": np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8", (2,))]),
        "strings": np.array(["ab", "ü"]),
        "empty": np.zeros(0),
        "datetime": np.array(["2024-01-01"], dtype="datetime64[D]"),
    }


def _object_arrays() -> dict[str, Any]:
    """Object arrays of plain data: what np.save writes with allow_pickle (the pickles are benign)."""
    import numpy as np

    ragged = np.empty(3, dtype=object)
    ragged[:] = [[1, 2], [3], []]
    return {
        "dicts": np.array([{"label": "cat", "id": 1}, {"label": "dog", "id": 2}], dtype=object),
        "ragged": ragged,
        "mixed": np.array([1, "two", 3.0, None, (4, 5), b"six", {7}, 1 + 2j], dtype=object),
        "arrays": np.array([np.arange(3), np.ones((2, 2))] + [None], dtype=object)[:2],
        "with_object_field": np.array([(1, {"k": [1, 2]})], dtype=[("i", "<i4"), ("o", "O")]),
        "datetime_objects": np.array(
            [datetime.datetime(2024, 1, 2, 3, 4, 5), datetime.date(2024, 1, 2), datetime.timedelta(seconds=3),
             decimal.Decimal("1.5"), fractions.Fraction(1, 3)], dtype=object,
        ),
    }


def _npy(arrays: Callable[[], dict[str, Any]], key: str, allow_pickle: bool) -> Builder:
    def build(d: Path) -> None:
        import numpy as np

        np.save(d / "array.npy", arrays()[key], allow_pickle=allow_pickle)

    return build


def _npz(arrays: Callable[[], dict[str, Any]], compressed: bool) -> Builder:
    def build(d: Path) -> None:
        import numpy as np

        (np.savez_compressed if compressed else np.savez)(d / "arrays.npz", **arrays())

    return build


for _key in ("f32", "fortran", "structured", "strings", "empty", "datetime"):
    _register(f"numpy_npy_{_key}", _npy(_numpy_arrays, _key, False))
for _key in ("dicts", "ragged", "mixed", "arrays", "with_object_field", "datetime_objects"):
    _register(f"numpy_npy_object_{_key}", _npy(_object_arrays, _key, True))
_register("numpy_npz", _npz(_numpy_arrays, False))
_register("numpy_npz_compressed", _npz(_numpy_arrays, True))
_register("numpy_npz_objects", _npz(_object_arrays, False))
_register("numpy_npz_objects_compressed", _npz(_object_arrays, True))


# --- joblib ------------------------------------------------------------------------------------


def _joblib_payloads() -> dict[str, Callable[[], Any]]:
    import numpy as np

    return {
        "arrays": lambda: {"w": np.arange(1000, dtype=np.float64).reshape(10, 100), "b": np.ones(7, dtype=np.int8)},
        "dict": lambda: {"classes": ["a", "b"], "n": 3, "params": {"alpha": 0.5, "fit": True},
                         "coef": np.zeros((2, 3))},
        "object_array": lambda: {"labels": np.array(["x", None, 3], dtype=object)},
    }


def _joblib_compressors() -> list[str | None]:
    import importlib.util

    out: list[str | None] = [None, "zlib", "gzip", "bz2", "lzma", "xz"]
    if importlib.util.find_spec("lz4") is not None:
        out.append("lz4")
    return out


def _joblib(payload: str, compress: str | None) -> Builder:
    def build(d: Path) -> None:
        import joblib

        joblib.dump(_joblib_payloads()[payload](), d / "model.joblib", compress=(compress, 3) if compress else 0)

    return build


for _payload in ("arrays", "dict", "object_array"):
    for _comp in _joblib_compressors():
        _register(f"joblib_{_payload}_{_comp or 'raw'}", _joblib(_payload, _comp))


# --- Keras 3 and tf_keras ----------------------------------------------------------------------


def _quiet_tf() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _keras3_model() -> Any:
    _quiet_tf()
    import keras

    inputs = keras.Input((8,), name="x")
    h = keras.layers.Dense(4, activation="relu", kernel_regularizer=keras.regularizers.L2(1e-4))(inputs)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.Dropout(0.1)(h)
    outputs = keras.layers.Dense(2, activation="softmax")(h)
    model = keras.Model(inputs, outputs, name="benign")
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def _keras3_sequential_rnn() -> Any:
    _quiet_tf()
    import keras

    model = keras.Sequential(
        [keras.Input((5, 3)), keras.layers.Bidirectional(keras.layers.LSTM(4)), keras.layers.Dense(1)], name="rnn"
    )
    model.compile(optimizer="sgd", loss="mse")
    return model


def _keras3(factory: Callable[[], Any], filename: str) -> Builder:
    def build(d: Path) -> None:
        factory().save(d / filename)

    return build


def _keras3_weights(d: Path) -> None:
    _keras3_model().save_weights(d / "model.weights.h5")


_register("keras3_functional_keras", _keras3(_keras3_model, "model.keras"))
_register("keras3_functional_h5", _keras3(_keras3_model, "model.h5"))
_register("keras3_rnn_keras", _keras3(_keras3_sequential_rnn, "model.keras"))
_register("keras3_weights_h5", _keras3_weights)


def _tf_keras_model() -> Any:
    _quiet_tf()
    import tf_keras

    model = tf_keras.Sequential(
        [tf_keras.layers.Input((6,)), tf_keras.layers.Dense(3, activation="relu"), tf_keras.layers.Dense(1)]
    )
    model.compile(optimizer="adam", loss="mse")
    return model


def _tf_keras(filename: str, **kwargs: Any) -> Builder:
    def build(d: Path) -> None:
        _tf_keras_model().save(d / filename, **kwargs)

    return build


def tf_keras_functional_model() -> Any:
    """A tf_keras functional model (its class serializes as ``tf_keras.src.engine.functional.Functional``),
    with a loss and a metric added on tensors (``AddLoss``, ``AddMetric``) and a nested Sequential."""
    _quiet_tf()
    import tf_keras

    inputs = tf_keras.Input((8,), name="x")
    h = tf_keras.layers.Dense(4, activation="relu", kernel_regularizer=tf_keras.regularizers.L2(1e-4))(inputs)
    h = tf_keras.layers.BatchNormalization()(h)
    h = tf_keras.layers.Dropout(0.1)(h)
    h = tf_keras.Sequential([tf_keras.layers.Dense(4), tf_keras.layers.LayerNormalization()], name="block")(h)
    outputs = tf_keras.layers.Dense(2, activation="softmax")(h)
    model = tf_keras.Model(inputs, outputs, name="benign")
    model.add_loss(tf_keras.layers.Dense(1, name="aux")(h))
    model.add_metric(outputs, name="mean_out", aggregation="mean")
    model.compile(optimizer=tf_keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


def _tf_keras_layers_model() -> Any:
    _quiet_tf()
    import tf_keras

    layers = tf_keras.layers
    model = tf_keras.Sequential([
        layers.Input((6, 6, 1)), layers.Conv2D(2, 3, padding="same"), layers.MaxPooling2D(), layers.Reshape((9, 2)),
        layers.Bidirectional(layers.LSTM(3, return_sequences=True)), layers.GRU(2), layers.Dense(2),
        layers.Activation("tanh"),
    ], name="layers")
    model.compile(optimizer="sgd", loss="mse")
    return model


def _tf_keras_save(factory: Callable[[], Any], filename: str) -> Builder:
    def build(d: Path) -> None:
        factory().save(d / filename)

    return build


_register("tf_keras_h5", _tf_keras("model.h5"))
_register("tf_keras_keras", _tf_keras("model.keras"))
_register("tf_keras_functional_keras", _tf_keras_save(tf_keras_functional_model, "model.keras"))
_register("tf_keras_functional_h5", _tf_keras_save(tf_keras_functional_model, "model.h5"))
_register("tf_keras_layers_keras", _tf_keras_save(_tf_keras_layers_model, "model.keras"))
# SavedModel directories (tf_keras ``save_format="tf"``) are read by the SavedModel scanner that
# lands with the other half of this issue; their samples join this corpus after that merge.


# --- GGUF --------------------------------------------------------------------------------------


def _gguf(d: Path) -> None:
    import gguf
    import numpy as np

    from tests.support.format_samples import CHAT_TEMPLATE_LLAMA3

    w = gguf.GGUFWriter(str(d / "model.gguf"), "llama")
    w.add_name("benign-llama")
    w.add_context_length(2048)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokens = ["<unk>", "<s>", "</s>", "▁hello", "▁world", "<|eot_id|>"]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([2, 3, 3, 1, 1, 3])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_chat_template(CHAT_TEMPLATE_LLAMA3)
    w.add_tensor("token_embd.weight", np.ones((len(tokens), 8), dtype=np.float32))
    w.add_tensor("blk.0.attn_q.weight", np.ones((8, 8), dtype=np.float16))
    w.add_tensor("output_norm.weight", np.ones(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


_register("gguf_writer_llama3_chat_template", _gguf)


# --- ONNX --------------------------------------------------------------------------------------


def _onnx_model() -> Any:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "W")
    b = numpy_helper.from_array(np.zeros(64, dtype=np.float32), "B")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["XW"]), helper.make_node("Add", ["XW", "B"], ["Y"]),
         helper.make_node("Relu", ["Y"], ["Z"])],
        "benign",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("Z", TensorProto.FLOAT, [1, 64])],
        initializer=[w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="modelreg-tests")
    model.metadata_props.append(onnx.StringStringEntryProto(key="author", value="tests"))
    onnx.checker.check_model(model)
    return model


def _onnx(d: Path) -> None:
    import onnx

    onnx.save_model(_onnx_model(), str(d / "model.onnx"))


def _onnx_external(single_file: bool) -> Builder:
    def build(d: Path) -> None:
        import onnx

        onnx.save_model(
            _onnx_model(), str(d / "model.onnx"), save_as_external_data=True,
            all_tensors_to_one_file=single_file, location="model.onnx_data" if single_file else None, size_threshold=0,
        )

    return build


_register("onnx_helper", _onnx)
_register("onnx_external_data_one_file", _onnx_external(True))
_register("onnx_external_data_per_tensor", _onnx_external(False))


def build_all(root: Path) -> dict[str, Path]:
    """Write every sample into ``root/<name>/``; returns name -> directory.

    Args:
        root: an empty directory.

    Returns:
        The sample directories, by sample name.
    """
    out: dict[str, Path] = {}
    for name, build in BENIGN.items():
        d = root / name
        d.mkdir()
        build(d)
        out[name] = d
    return out

