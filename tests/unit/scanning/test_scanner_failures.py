"""A scanner that cannot run decides nothing: the file's verdict is ``error``, never ``safe``.

Making a scanner raise (or its module unimportable) is the failure under test here, so these tests
monkeypatch the scanners themselves.
"""

from __future__ import annotations

import importlib
import io
import json
import pickle
import sys
from pathlib import Path
from typing import Callable

import pytest

from registry.scanning import Verdict, scan_stream
from tests.support import format_samples as F
from tests.support import scan_samples as S


def _pb(number: int, body: bytes) -> bytes:
    return bytes([number << 3 | 2, len(body)]) + body


def _gguf(tmp: Path) -> bytes:
    return F.gguf_ordinary(tmp / "m.gguf", chat_template=None).read_bytes()


# One ordinary file per validator module, under the name it is found by.
SAMPLES: dict[str, tuple[str, Callable[[Path], bytes]]] = {
    "safetensors": ("model.safetensors", lambda _: F.safetensors_ordinary()),
    "gguf": ("model.gguf", _gguf),
    "onnx": ("model.onnx", lambda _: F.onnx_model()),
    "keras": ("model.keras", lambda _: F.keras_archive(F.keras_sequential_config())),
    "savedmodel": ("frozen_graph.pb", lambda _: _pb(1, _pb(1, b"c") + _pb(2, b"Const"))),
    "msgpack": ("flax_model.msgpack", lambda _: b"\x81\xa1w\xc4\x02\x00\x00"),
    "remote_code": ("config.json", lambda _: json.dumps(F.LLAMA_CONFIG).encode()),
}


def _scan(name: str, data: bytes):  # type: ignore[no-untyped-def]
    return scan_stream(name, io.BytesIO(data), len(data))


@pytest.mark.parametrize("module", sorted(SAMPLES))
def test_samples_are_safe_while_their_scanner_runs(module: str, tmp_path: Path) -> None:
    name, build = SAMPLES[module]
    assert _scan(name, build(tmp_path)).verdict is Verdict.SAFE


@pytest.mark.parametrize("module", sorted(SAMPLES))
def test_a_scanner_that_raises_makes_the_verdict_error(module: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    name, build = SAMPLES[module]
    data = build(tmp_path)

    def broken(*args: object, **kwargs: object) -> list[object]:
        raise RuntimeError("scanner bug")

    monkeypatch.setattr(importlib.import_module(f"registry.scanning.{module}"), "scan", broken)
    scan = _scan(name, data)
    assert scan.verdict is Verdict.ERROR, scan.as_dict()


@pytest.mark.parametrize("module", sorted(SAMPLES))
def test_a_scanner_that_cannot_be_imported_makes_the_verdict_error(
    module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, build = SAMPLES[module]
    data = build(tmp_path)
    # None in sys.modules makes the import raise ModuleNotFoundError for the module itself.
    monkeypatch.setitem(sys.modules, f"registry.scanning.{module}", None)
    scan = _scan(name, data)
    assert scan.verdict is Verdict.ERROR, scan.as_dict()
    assert any(f.rule_id == f"{module}.scanner-unavailable" for f in scan.findings)


def test_a_scanner_whose_dependency_fails_to_import_makes_the_verdict_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # The module exists but something it imports does not: an ImportError other than its own absence.
    monkeypatch.delitem(sys.modules, "registry.scanning.onnx", raising=False)
    monkeypatch.setitem(sys.modules, "registry.scanning._protobuf", None)
    data = F.onnx_model()
    assert _scan("model.onnx", data).verdict is Verdict.ERROR


@pytest.mark.parametrize(
    ("target", "name", "build"),
    [
        ("registry.scanning.pickle_scan.scan_pickle_file", "model.pkl", lambda: pickle.dumps({"a": 1})),
        ("registry.scanning.pickle_scan.probe_pickle", "model.safetensors", F.safetensors_ordinary),
        ("registry.scanning.engine.sniff", "weights.bin", S.torch_zip),
        ("registry.scanning.engine.scan_tar", "files.tar", lambda: S.tar_bytes({"a.txt": b"x"})),
        ("registry.scanning.numpy_scan.scan_npy", "a.npy", lambda: S.npy(__import__("numpy").arange(3))),
        ("registry.scanning.engine.Engine._zip_trailer", "README.md", lambda: b"hello\n"),
    ],
)
def test_a_crash_anywhere_in_the_engine_is_an_error_verdict(
    target: str, name: str, build: Callable[[], bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("scanner bug")

    monkeypatch.setattr(target, broken)
    scan = _scan(name, build())
    assert scan.verdict is Verdict.ERROR, scan.as_dict()


def test_a_crash_inside_an_archive_member_is_an_error_of_the_archive(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("scanner bug")

    monkeypatch.setattr("registry.scanning.safetensors.scan", broken)
    data = S.rezip({"weights/model.safetensors": F.safetensors_ordinary(), "README.md": b"hi\n"})
    assert _scan("bundle.zip", data).verdict is Verdict.ERROR
