"""Zero false positives on files the model libraries write, with every documented save option.

The corpus (``tests/support/benign_corpus.py``) is written once per session by the real
libraries: torch.save (zip and legacy formats, pickle protocols 2-5, the
``torch.utils.serialization.config.save`` settings), safetensors (torch and numpy writers, with
metadata), numpy (.npy/.npz, object arrays of plain data), joblib (every installed compressor),
Keras 3 and tf_keras, gguf.GGUFWriter and onnx. Every file must come out ``safe``.

One exception, by design: TorchScript (``torch.jit.save``). ``torch.jit.load`` compiles and runs
the archive's ``code/`` (TorchScript can call any registered operator, file readers included), so
such an archive is code that a security approver reviews: ``suspicious``, never ``unsafe``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from registry.scanning import Severity, Verdict, scan_directory
from tests.support.benign_corpus import BENIGN, build_all

BY_DESIGN = {"torch_jit_save_scripted": Verdict.SUSPICIOUS}


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_all(tmp_path_factory.mktemp("benign-corpus"))


@pytest.mark.parametrize("sample", sorted(set(BENIGN) - set(BY_DESIGN)))
def test_library_written_file_is_safe(corpus: dict[str, Path], sample: str) -> None:
    scans = scan_directory(corpus[sample])
    assert scans, f"{sample} wrote nothing"
    for scan in scans:
        assert scan.verdict is Verdict.SAFE, scan.as_dict()


def test_torchscript_is_suspicious_code_not_unsafe(corpus: dict[str, Path]) -> None:
    (scan,) = scan_directory(corpus["torch_jit_save_scripted"])
    assert scan.format == "pytorch-zip"
    assert scan.verdict is Verdict.SUSPICIOUS, scan.as_dict()
    flagged = [f for f in scan.findings if f.severity is not Severity.INFO]
    # Only the archive's code (code/*.py) and its own TorchScript classes (__torch__.*) are flagged.
    rules = {"pickle.global.torchscript-class", "pickle.call.not-allowed", "remote-code.python-file"}
    assert {f.rule_id for f in flagged} <= rules, flagged
    assert all("global __torch__." in f.location for f in flagged if f.rule_id.startswith("pickle.")), flagged
    assert all("/code/" in f.location for f in flagged if f.rule_id.startswith("remote-code.")), flagged


def test_corpus_covers_each_writer_and_option() -> None:
    names = set(BENIGN)
    for option in ("zip", "legacy", "protocol2", "protocol3", "protocol4", "protocol5"):
        assert f"torch_save_state_dict_{option}" in names
    for setting in ("no_crc32", "pinned_memory_d2h", "storage_alignment_4096"):
        assert f"torch_save_config_{setting}" in names
    for comp in ("raw", "zlib", "gzip", "bz2", "lzma", "xz"):
        assert f"joblib_arrays_{comp}" in names
    for prefix in ("safetensors_torch", "safetensors_numpy", "numpy_npy_object_", "numpy_npz_objects", "keras3_",
                   "tf_keras_h5", "tf_keras_keras", "gguf_writer", "onnx_external_data", "torch_jit_save"):
        assert any(n.startswith(prefix) for n in names), prefix
