"""Names that make loaders choose a parser: bytes that parser would not accept are never ``safe``."""

from __future__ import annotations

import gzip
import io
import pickle
import random
import struct
import zlib
from pathlib import Path

import pytest

from registry.scanning import Verdict, scan_stream
from registry.scanning.loaders import _BY_NAME, _BY_SUFFIX, rule_for
from tests.support import format_samples as F
from tests.support import scan_samples as S

# Bytes that are no format at all: they start with a byte that is no pickle opcode, so only the name decides.
NOT_A_FORMAT = b"\xff\xfe" + random.Random(7).randbytes(4094)
NAMED = sorted({f"model{suffix}" for suffix in _BY_SUFFIX} | set(_BY_NAME))


def _scan(name: str, data: bytes):  # type: ignore[no-untyped-def]
    return scan_stream(name, io.BytesIO(data), len(data))


def _rules(scan) -> set[str]:  # type: ignore[no-untyped-def]
    return {f.rule_id for f in scan.findings}


@pytest.mark.parametrize("name", NAMED)
def test_every_name_in_the_table_refuses_bytes_of_no_format(name: str) -> None:
    scan = _scan(name, NOT_A_FORMAT)
    assert scan.verdict is Verdict.SUSPICIOUS, scan.as_dict()


@pytest.mark.parametrize("name", ["tokenizer.model", "model.onnx.data", "weights.dat", "variables.data-00000-of-00001",
                                  "variables.index", "README", "model.pth.tar"])
def test_names_no_loader_opens_by_name_keep_opaque_bytes_safe(name: str) -> None:
    assert rule_for(name) is None
    assert _scan(name, NOT_A_FORMAT).verdict is Verdict.SAFE


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("model.safetensors", "name.format-mismatch"),
        ("model.gguf", "name.format-mismatch"),
        ("model.onnx", "name.format-mismatch"),
        ("pytorch_model.bin", "name.format-mismatch"),
        ("model.pt", "name.format-mismatch"),
        ("tf_model.h5", "name.format-mismatch"),
        ("model.keras", "name.format-mismatch"),
        ("arr.npy", "name.format-mismatch"),
        ("model.joblib", "name.format-mismatch"),
        ("model.pkl", "name.format-mismatch"),
        ("flax_model.msgpack", "msgpack.malformed"),
        ("frozen_graph.pb", "tensorflow.protobuf.malformed"),
        ("saved_model.pb", "tensorflow.protobuf.malformed"),
        ("model.tflite", "name.format-mismatch"),
        ("model.llamafile", "name.format-mismatch"),
    ],
)
def test_mismatch_has_a_stable_rule_id(name: str, rule: str) -> None:
    assert rule in _rules(_scan(name, NOT_A_FORMAT))


@pytest.mark.parametrize("name", ["model.safetensors", "model.gguf", "model.onnx", "weights.h5", "model.keras",
                                  "model.tflite", "flax_model.msgpack"])
def test_a_benign_pickle_under_a_name_whose_loader_never_unpickles_is_not_safe(name: str) -> None:
    data = pickle.dumps({"w": [1.0, 2.0]}, protocol=4)
    scan = _scan(name, data)
    assert scan.format == "pickle" and scan.verdict is Verdict.SUSPICIOUS, scan.as_dict()


def test_a_zip_torch_load_cannot_open_is_not_safe_as_pt() -> None:
    data = S.rezip({"weights/w.txt": b"1 2 3\n"})
    assert _scan("model.pt", data).verdict is Verdict.SUSPICIOUS
    assert _scan("bundle.zip", data).verdict is Verdict.SAFE


def test_bytes_torch_load_hands_to_pickle_are_read_as_a_pickle() -> None:
    # Not a pickle to the sniffer (it breaks right after its global), but torch.load / pickle.load import
    # the module before failing: the name says these bytes go to the unpickler, so they are judged as such.
    data = b"cfoo\nbar\n\xff\xfe"
    assert _scan("notes.dat", data).verdict is Verdict.SAFE
    for name in ("model.pt", "model.pkl", "arr.npy", "pytorch_model.bin"):
        scan = _scan(name, data)
        assert {"name.format-mismatch", "pickle.global.not-allowed"} <= _rules(scan), (name, scan.as_dict())


def test_the_decompressed_stream_of_a_joblib_file_is_unpickled() -> None:
    data = zlib.compress(b"cfoo\nbar\n\xff\xfe")
    scan = _scan("model.joblib", data)
    assert scan.format == "zlib", scan.as_dict()
    assert {"name.format-mismatch", "pickle.global.not-allowed"} <= _rules(scan), scan.as_dict()


def test_random_raw_data_named_bin_is_suspicious_never_unsafe() -> None:
    # Raw tensors (ONNX external data, OpenVINO weights) are not what torch.load reads, but pickle.load
    # refuses them before anything runs: a format mismatch, not a payload.
    rng = random.Random(2024)
    for _ in range(400):
        data = rng.randbytes(rng.choice((64, 4096)))
        scan = _scan("weights.bin", data)
        if scan.format not in ("pickle", "pytorch-legacy"):
            assert scan.verdict is Verdict.SUSPICIOUS, (data[:16], scan.as_dict())


def test_archive_members_are_opened_by_their_names_too() -> None:
    data = S.tar_bytes({"pkg/model.safetensors": NOT_A_FORMAT, "pkg/notes.dat": NOT_A_FORMAT})
    scan = _scan("bundle.tar", data)
    mismatches = [f.location for f in scan.findings if f.rule_id == "name.format-mismatch"]
    assert scan.verdict is Verdict.SUSPICIOUS and mismatches == ["pkg/model.safetensors: offset 0"], scan.as_dict()


def _msgpack_map() -> bytes:
    # {"params": {"w": bin8(8 bytes)}} as flax.serialization writes it (no msgpack package here).
    return b"\x81\xa6params\x81\xa1w\xc4\x08" + bytes(8)


def _tflite() -> bytes:
    return struct.pack("<I", 28) + b"TFL3" + bytes(64)


@pytest.mark.parametrize(
    ("name", "build"),
    [
        ("model.safetensors", F.safetensors_ordinary),
        ("model.sft", F.safetensors_ordinary),
        ("model.onnx", lambda: F.onnx_model()),
        ("pytorch_model.bin", S.torch_zip),
        ("legacy.pth", S.torch_legacy),
        ("optimizer.pt", lambda: pickle.dumps({"step": 3}, protocol=2)),
        ("weights.h5", F.keras_weights_h5),
        ("model.keras", lambda: F.keras_archive(F.keras_sequential_config())),
        ("model.keras", F.keras_weights_h5),
        ("a.npy", lambda: S.npy(__import__("numpy").arange(4))),
        ("a.npz", lambda: S.npz(True)),
        ("model.joblib", lambda: gzip.compress(pickle.dumps([1, 2]), mtime=0)),
        # joblib.dump(obj, "model.pkl", compress=3) writes zlib under a pickle name.
        ("model.pkl", lambda: zlib.compress(pickle.dumps({"a": 1}))),
        ("flax_model.msgpack", _msgpack_map),
        ("model.tflite", _tflite),
        ("ggml-base.en.bin", lambda: b"lmgg" + bytes(60)),
        ("model.ggml", lambda: b"tjgg" + bytes(60)),
        ("handler.mar", lambda: S.rezip({"MAR-INF/MANIFEST.json": b"{}", "weights.pt": S.torch_zip()})),
    ],
)
def test_files_in_a_format_their_loader_accepts_are_safe(name: str, build) -> None:  # type: ignore[no-untyped-def]
    scan = _scan(name, build())
    assert scan.verdict is Verdict.SAFE, scan.as_dict()


def test_gguf_is_accepted_under_its_name(tmp_path: Path) -> None:
    data = F.gguf_ordinary(tmp_path / "m.gguf", chat_template=None).read_bytes()
    assert _scan("model.gguf", data).verdict is Verdict.SAFE


def test_an_executable_is_suspicious_whatever_its_name() -> None:
    elf = b"\x7fELF\x02\x01\x01" + bytes(120)
    for name in ("model.llamafile", "run", "weights.dat"):
        scan = _scan(name, elf)
        assert scan.format == "executable" and "format.executable" in _rules(scan)
        assert scan.verdict is Verdict.SUSPICIOUS


def test_msgpack_trailing_bytes_and_truncation_are_malformed() -> None:
    good = _msgpack_map()
    assert _scan("flax_model.msgpack", good).verdict is Verdict.SAFE
    for bad in (good + b"\x00", good[:-3], b"\xc1", b"\xdd\xff\xff\xff\xff"):
        assert "msgpack.malformed" in _rules(_scan("flax_model.msgpack", bad)), bad


def test_the_table_is_the_only_place_names_are_decided() -> None:
    # Every rule's formats are ones the engine can report (a typo would make a whole name unsafe).
    from registry.scanning import sniff as sniff_mod

    known = set(sniff_mod.sniff.__doc__.replace("``", " ").replace(",", " ").split()) | {
        "pytorch-zip", "pytorch-legacy", "keras", "npz", "msgpack"}
    for suffix, rule in {**_BY_SUFFIX, **_BY_NAME}.items():
        assert rule.accepts <= known or rule.validator, (suffix, rule.accepts - known)


@pytest.mark.parametrize("filler", [b"(", b"N", b"]"])
def test_a_payload_behind_more_opcodes_than_the_scanner_interprets_is_unsafe_under_a_pickle_name(filler: bytes) -> None:
    # pickle.load pushes a hundred thousand marks or values and then runs the payload; our interpreter stops
    # at its own bound. Under a name that is unpickled, that bound is no reason to call the bytes inert.
    data = filler * 100_001 + b"cos\nsystem\n(S'id'\ntR."
    for name in ("model.pkl", "pytorch_model.bin", "model.joblib"):
        assert _scan(name, data).verdict is Verdict.UNSAFE, name
