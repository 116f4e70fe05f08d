"""The engine: format from bytes, dispatch, directories, and the whole sample catalogue."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from registry.scanning import SCANNER_NAME, SCANNER_VERSION, Verdict, scan_directory, scan_file, scan_stream
from registry.scanning.sniff import sniff
from tests.support import scan_samples as S


def _rank(v: str) -> int:
    return Verdict(v).rank


@pytest.mark.parametrize("sample", sorted(S.MALICIOUS))
def test_every_bypass_sample_is_flagged(sample: str) -> None:
    name, data, want = S.MALICIOUS[sample]()
    scan = scan_stream(name, io.BytesIO(data), len(data))
    assert scan.verdict is not Verdict.SAFE
    assert scan.verdict.rank >= _rank(want), scan.as_dict()
    assert scan.verdict is not Verdict.ERROR, scan.as_dict()


@pytest.mark.parametrize("sample", sorted(S.ORDINARY))
def test_every_ordinary_file_is_safe(sample: str) -> None:
    name, data = S.ORDINARY[sample]()
    scan = scan_stream(name, io.BytesIO(data), len(data))
    assert scan.verdict is Verdict.SAFE, scan.as_dict()
    assert (scan.scanner, scan.scanner_version) == (SCANNER_NAME, SCANNER_VERSION)


def test_format_comes_from_bytes_not_names() -> None:
    payload = S.reduce_pickle()
    for name in ("model.safetensors", "tokenizer.json", "weights.npy", "README.md", "x.gguf"):
        scan = scan_stream(name, io.BytesIO(payload), len(payload))
        assert (scan.format, scan.verdict) == ("pickle", Verdict.UNSAFE), name


@pytest.mark.parametrize(
    ("head", "fmt"),
    [
        (b"", "empty"),
        (b"\x93NUMPY\x01\x00", "npy"),
        (b"PK\x03\x04" + bytes(30), "zip"),
        (b"\x1f\x8b\x08\x00", "gzip"),
        (b"BZh91AY&SY", "bz2"),
        (b"\xfd7zXZ\x00\x00", "xz"),
        (b"7z\xbc\xaf\x27\x1c\x00\x04", "7z"),
        (b"GGUF\x03\x00\x00\x00", "gguf"),
        (b"\x89HDF\r\n\x1a\n" + bytes(8), "hdf5"),
        (b"\x0a\x00\x00\x00\x00\x00\x00\x00{\"a\":1}   ", "safetensors"),
        (b"\x08\x07\x12\x04test\x3a\x02\x0a\x00", "onnx"),
        (b'  {"a": [1]}', "json"),
        (b"plain words\n", "text"),
        (b"\x0a\x05<unk>\xff\xfe\x00", "unknown"),
    ],
)
def test_sniff(head: bytes, fmt: str) -> None:
    assert sniff(head, len(head)) == fmt


def test_random_binaries_are_safe_opaque_data() -> None:
    rng = random.Random(99)
    for _ in range(50):
        data = rng.randbytes(rng.randrange(1, 5000))
        scan = scan_stream("tokenizer.model", io.BytesIO(data), len(data))
        assert scan.verdict is Verdict.SAFE, scan.as_dict()


def test_scan_directory_names_and_siblings(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "model.bin").write_bytes(S.reduce_pickle())
    (tmp_path / "config.json").write_bytes(b'{"model_type": "x"}')
    (tmp_path / "weights.pt").write_bytes(S.torch_zip())
    (tmp_path / "link.bin").symlink_to(tmp_path / "sub" / "model.bin")
    scans = {s.path: s for s in scan_directory(tmp_path)}
    assert sorted(scans) == ["config.json", "link.bin", "sub/model.bin", "weights.pt"]
    assert scans["sub/model.bin"].verdict is Verdict.UNSAFE
    assert scans["weights.pt"].verdict is Verdict.SAFE and scans["weights.pt"].format == "pytorch-zip"
    assert scans["link.bin"].verdict is Verdict.SUSPICIOUS
    assert scans["config.json"].format == "json"


def test_scan_file_uses_given_name(tmp_path: Path) -> None:
    p = tmp_path / "blob"
    p.write_bytes(S.gzip_pickle_joblib())
    scan = scan_file(p, "model.joblib")
    assert scan.path == "model.joblib" and scan.format == "gzip" and scan.verdict is Verdict.UNSAFE


def test_findings_are_serializable_and_located() -> None:
    name, data, _ = S.MALICIOUS["zip_in_zip"]()
    d = scan_stream(name, io.BytesIO(data), len(data)).as_dict()
    assert d["verdict"] == "unsafe"
    bad = [f for f in d["findings"] if f["severity"] == "unsafe"]
    assert bad and all(f["rule_id"] and f["location"] and f["message"] for f in bad)
