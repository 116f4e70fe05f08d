"""What loaders do with a file because of its name: the one table of name -> formats they accept.

The format of a file is decided from its bytes (:mod:`registry.scanning.sniff`), but the *loader* that
opens it is chosen by its name: ``torch.load("x.pt")``, ``safe_open("x.safetensors")``,
``keras.saving.load_model("x.keras")``, ``tf.saved_model.load(dir)`` reading ``saved_model.pb``. A file
whose bytes are no format its name's loader accepts is therefore never ``safe``: it is at least not what
it claims to be (``name.format-mismatch``, suspicious), and when that loader falls back to ``pickle.load``
on bytes it does not recognize (``torch.load``, ``numpy.load``, ``joblib.load``) the bytes are interpreted
as a pickle, so a stream our sniffer would not call a pickle is judged as the unpickler would run it.

Names no loader opens by name (``tokenizer.model``, ``*.data`` external tensors, ``*.index``) keep the
rule "unknown bytes are opaque data". The price is paid by raw weights under a torch name: OpenVINO's
``openvino_model.bin`` or an ONNX external-data file called ``weights.bin`` come out ``suspicious``. ``.dat``/``.data``,
which some scanners treat as pickles, are left out on purpose: ONNX writes its external tensors as ``model.onnx.data``,
raw bytes no loader unpickles.

Example:
    >>> rule_for("weights/pytorch_model.bin").loader
    'torch.load'
    >>> rule_for("tokenizer.model") is None
    True
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

PICKLES = frozenset({"pickle", "pytorch-legacy"})
ZIPS = frozenset({"zip", "pytorch-zip", "keras", "npz"})
COMPRESSED = frozenset({"gzip", "bz2", "xz", "zlib", "lzma", "lz4"})


@dataclass(frozen=True, slots=True)
class LoaderRule:
    """How the loader chosen by a file's name reads it.

    Attributes:
        loader: who opens files of this name (for messages).
        accepts: formats (as decided from the bytes) that loader parses.
        unpickles: bytes in none of ``accepts`` are handed to ``pickle.load`` by that loader.
        validator: a scanner module that reads the file as the loader does, whatever the bytes sniff as.
        inner: the rule for what a compressed stream in ``accepts`` holds (joblib decompresses, then unpickles).
    """

    loader: str
    accepts: frozenset[str] = frozenset()
    unpickles: bool = False
    validator: str | None = None
    inner: LoaderRule | None = None


_UNPICKLED = LoaderRule("pickle.load", PICKLES, unpickles=True)
_PICKLE = LoaderRule("pickle.load / joblib.load", PICKLES | COMPRESSED, unpickles=True, inner=_UNPICKLED)
# torch.load opens a zip (data.pkl), then tries a legacy tar, then unpickles whatever is left.
_TORCH = LoaderRule("torch.load", frozenset({"pytorch-zip", "tar"}) | PICKLES, unpickles=True)
# numpy.load sniffs: a zip is an npz, the NPY magic an array, anything else goes to pickle.load.
_NUMPY = LoaderRule("numpy.load", frozenset({"npy"}) | ZIPS | PICKLES, unpickles=True)
_TENSORFLOW = LoaderRule("tensorflow", validator="savedmodel")

_BY_SUFFIX: dict[str, LoaderRule] = {
    ".safetensors": LoaderRule("safetensors", frozenset({"safetensors"})),
    ".sft": LoaderRule("safetensors", frozenset({"safetensors"})),
    ".gguf": LoaderRule("gguf", frozenset({"gguf"})),
    ".ggml": LoaderRule("ggml", frozenset({"ggml", "gguf"})),
    ".onnx": LoaderRule("onnx", frozenset({"onnx"})),
    ".pt": _TORCH,
    ".pth": _TORCH,
    ".ckpt": _TORCH,
    # whisper.cpp and early llama.cpp write ggml files as .bin too; torch.load would refuse them at once.
    ".bin": LoaderRule("torch.load", _TORCH.accepts | {"ggml"}, unpickles=True),
    ".pt2": LoaderRule("torch.export.load", ZIPS),
    ".ptl": LoaderRule("torch.jit.load", ZIPS),
    ".mar": LoaderRule("torchserve", ZIPS),
    ".nemo": LoaderRule("nemo", frozenset({"tar", "gzip"})),
    ".h5": LoaderRule("h5py / keras", frozenset({"hdf5"})),
    ".hdf5": LoaderRule("h5py / keras", frozenset({"hdf5"})),
    # tf_keras opens any HDF5 file as a legacy model before looking at the extension.
    ".keras": LoaderRule("keras.saving.load_model", frozenset({"keras", "hdf5"})),
    ".npy": _NUMPY,
    ".npz": _NUMPY,
    ".pkl": _PICKLE,
    ".pickle": _PICKLE,
    ".joblib": _PICKLE,
    ".dill": _PICKLE,
    ".pdparams": _PICKLE,
    ".msgpack": LoaderRule("flax.serialization", validator="msgpack"),
    ".tflite": LoaderRule("tflite", frozenset({"tflite"})),
    ".llamafile": LoaderRule("llamafile", frozenset({"executable"})),
    ".pb": _TENSORFLOW,
    ".meta": _TENSORFLOW,
}
_BY_NAME: dict[str, LoaderRule] = {"saved_model.pbtxt": _TENSORFLOW}


def rule_for(path: str) -> LoaderRule | None:
    """The rule for a file (or archive member) path, by its base name; None when no loader picks it by name."""
    base = posixpath.basename(path.rsplit("!", 1)[-1]).lower()
    if base in _BY_NAME:
        return _BY_NAME[base]
    return _BY_SUFFIX.get(posixpath.splitext(base)[1])
