"""Strict zip reading, tar, compressed streams and the bounds that keep bombs harmless."""

from __future__ import annotations

import io
import zipfile

import pytest

from registry.scanning import ScanLimits, Severity, Verdict, scan_stream
from registry.scanning.containers import ScanBudget, list_zip, scan_zip
from tests.support import scan_samples as S


def _scan(data: bytes, name: str = "x.zip", limits: ScanLimits = ScanLimits()):
    return scan_stream(name, io.BytesIO(data), len(data), limits=limits)


def _rules(scan) -> set[str]:
    return {f.rule_id for f in scan.findings if f.severity is not Severity.INFO}


@pytest.mark.parametrize(
    ("sample", "rule"),
    [
        ("zip_bad_crc", "zip.crc"),
        ("zip_local_central_name_mismatch", "zip.name.mismatch"),
        ("zip_overlapping_entries", "zip.overlap"),
    ],
)
def test_strict_zip_refusals_are_unsafe_even_with_harmless_members(sample: str, rule: str) -> None:
    name, data, _ = S.MALICIOUS[sample]()
    scan = _scan(data, name)
    assert scan.verdict is Verdict.UNSAFE
    assert rule in _rules(scan)


def test_encryption_flag_on_harmless_member_is_suspicious() -> None:
    # Issue 7: a flag runs nothing; the member is read as stored and is harmless.
    name, data, _ = S.MALICIOUS["zip_encryption_flag"]()
    scan = _scan(data, name)
    assert scan.verdict is Verdict.SUSPICIOUS, scan.as_dict()
    assert _rules(scan) == {"zip.encrypted"}


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_encrypted_flagged_member_in_the_clear_is_read_and_reported(compression: int) -> None:
    # The flag makes Python's zipfile refuse the member, torch.load reads it anyway: its pickle is
    # scanned and its findings reported beside the flag.
    data = S.set_zip_flag(S.rezip({"a.pkl": S.reduce_pickle(), "b.txt": b"x"}, compression), "a.pkl", 0x0001)
    with pytest.raises(RuntimeError, match="encrypted"):
        zipfile.ZipFile(io.BytesIO(data)).read("a.pkl")
    scan = _scan(data)
    assert scan.verdict is Verdict.UNSAFE, scan.as_dict()
    assert {"zip.encrypted", "pickle.global.dangerous"} <= _rules(scan)
    assert any(f.location.startswith("a.pkl: ") and "getcwd" in f.location for f in scan.findings)


def test_encrypted_member_that_is_ciphertext_is_suspicious() -> None:
    # Real ciphertext (12-byte header + data) is uninspectable, not known-malicious.
    data = S.set_zip_flag(S.rezip({"weights.bin": bytes(range(256)) * 4}), "weights.bin", 0x0001)
    scan = _scan(data)
    assert scan.verdict is Verdict.SUSPICIOUS, scan.as_dict()


def test_unsupported_compression_is_suspicious() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_LZMA) as z:
        z.writestr("a.txt", b"hello")
    scan = _scan(buf.getvalue())
    assert "zip.compression.unsupported" in _rules(scan)
    assert scan.verdict is Verdict.SUSPICIOUS, scan.as_dict()


def test_crc_not_recorded_is_not_a_finding_but_a_wrong_one_is() -> None:
    # torch.save with config.save.compute_crc32 = False writes CRC 0 (see the benign corpus).
    data = S.set_zip_crc(S.rezip({"a.txt": b"hello"}), "a.txt", 0)
    assert _scan(data).verdict is Verdict.SAFE
    assert _scan(S.set_zip_crc(S.rezip({"a.txt": b"hello"}), "a.txt", 1)).verdict is Verdict.UNSAFE


def test_python_zipfile_opens_what_the_strict_reader_refuses() -> None:
    # The point of strictness: a lenient loader reads these archives without complaint.
    for sample in ("zip_local_central_name_mismatch", "zip_overlapping_entries"):
        _, data, _ = S.MALICIOUS[sample]()
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            assert z.namelist()


def test_torch_zip_passes_the_strict_reader() -> None:
    data = S.torch_zip()
    entries, findings = list_zip(io.BytesIO(data), len(data), ScanBudget(ScanLimits()))
    assert findings == []
    assert any(e.name.endswith("data.pkl") for e in entries)


def test_data_between_entries_is_a_gap() -> None:
    # Every offset in the archive is consistent; only a region between members is covered by none.
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a.txt", b"a" * 10)
        buf.write(S.reduce_pickle(2))
        z.start_dir = buf.tell()  # zipfile would otherwise overwrite the hidden bytes
        z.writestr("b.txt", b"b" * 10)
    data = buf.getvalue()
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        assert z.read("b.txt") == b"b" * 10
    scan = _scan(data)
    assert "zip.gap" in _rules(scan) and scan.verdict is Verdict.UNSAFE


def test_prefix_before_first_entry_is_a_polyglot() -> None:
    name, data, _ = S.MALICIOUS["zip_prefix_polyglot"]()
    scan = _scan(data, name)
    assert scan.format == "pickle"
    assert scan.verdict is Verdict.UNSAFE
    assert "polyglot.zip-trailer" in _rules(scan)


def test_zip_in_zip_is_opened_and_located() -> None:
    name, data, _ = S.MALICIOUS["zip_in_zip"]()
    scan = _scan(data, name)
    assert scan.verdict is Verdict.UNSAFE
    assert any(f.location.startswith("inner.zip!weights.pkl: ") for f in scan.findings)


def test_zip_bomb_hits_the_expansion_cap() -> None:
    data = S.zip_bomb(16)
    assert len(data) < 64 << 10
    scan = _scan(data, limits=ScanLimits(max_expanded_bytes=1 << 20))
    assert scan.verdict is Verdict.UNSAFE
    assert "container.bomb" in _rules(scan)


def test_compression_ratio_is_suspicious_above_the_threshold() -> None:
    data = S.zip_bomb(4)
    scan = _scan(data, limits=ScanLimits(ratio_min_bytes=1 << 20, max_ratio=100))
    assert "container.compression-ratio" in _rules(scan)
    assert scan.verdict is Verdict.SUSPICIOUS


def test_gzip_bomb_hits_the_expansion_cap() -> None:
    import gzip

    data = gzip.compress(bytes(8 << 20))
    scan = _scan(data, "x.gz", limits=ScanLimits(max_expanded_bytes=1 << 20))
    assert scan.format == "gzip" and "container.bomb" in _rules(scan)


def test_member_limit() -> None:
    data = S.rezip({f"f{i}.txt": b"x" for i in range(20)})
    scan = _scan(data, limits=ScanLimits(max_members=10))
    assert "container.too-many-members" in _rules(scan)
    assert scan.verdict is Verdict.UNSAFE


def test_depth_limit() -> None:
    data = b"hello\n"
    for i in range(6):
        data = S.rezip({f"level{i}.zip" if i else "a.txt": data})
    scan = _scan(data, limits=ScanLimits(max_depth=3))
    assert "container.too-deep" in _rules(scan)
    # No writer nests archives this deep: a bound reached is an evasion, refused like one.
    assert scan.verdict is Verdict.UNSAFE


def test_unsafe_member_names() -> None:
    for bad in ("../evil.pkl", "/etc/x", "a/../../b"):
        data = S.rezip({bad: b"x"})
        assert "zip.name.unsafe" in _rules(_scan(data)), bad


def test_duplicate_names() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a.txt", b"1")
        with pytest.warns(UserWarning):
            z.writestr("a.txt", b"2")
    assert "zip.name.duplicate" in _rules(_scan(buf.getvalue()))


def test_truncated_zip_is_unsafe() -> None:
    data = S.rezip({"a.txt": b"hello" * 100})
    assert _scan(data[: len(data) - 30]).verdict is Verdict.UNSAFE


def test_tar_gz_and_tar_payloads() -> None:
    name, data = S.ORDINARY["tar_gz_of_files"]()
    scan = _scan(data, name)
    assert scan.format == "gzip" and scan.verdict is Verdict.SAFE
    assert any(f.rule_id == "container.member" and "tar" in f.message for f in scan.findings)
    name, data, _ = S.MALICIOUS["tar_with_pickle_pt"]()
    scan = _scan(data, name)
    assert scan.format == "tar" and scan.verdict is Verdict.UNSAFE
    assert any(f.location.startswith("model.pkl: ") for f in scan.findings)


def test_compressed_pickles_are_unwrapped() -> None:
    for sample, fmt in (("gzip_pickle_joblib", "gzip"), ("bz2_pickle", "bz2")):
        name, data, _ = S.MALICIOUS[sample]()
        scan = _scan(data, name)
        assert scan.format == fmt and scan.verdict is Verdict.UNSAFE


def test_xz_and_corrupt_gzip() -> None:
    import gzip
    import lzma

    payload = S.reduce_pickle()
    assert _scan(lzma.compress(payload), "m.xz").verdict is Verdict.UNSAFE
    broken = gzip.compress(payload)[:-6]
    scan = _scan(broken, "m.gz")
    assert "container.corrupt" in _rules(scan) and scan.verdict is Verdict.UNSAFE


def test_sevenz_is_suspicious_whatever_its_name() -> None:
    name, data, _ = S.MALICIOUS["sevenz_signature_pt"]()
    scan = _scan(data, name)
    assert scan.format == "7z" and scan.verdict is Verdict.SUSPICIOUS


def test_ordinary_zip_is_safe() -> None:
    name, data = S.ORDINARY["ordinary_zip"]()
    findings = scan_zip(io.BytesIO(data), len(data), ScanBudget(ScanLimits()), lambda n, r, s: [])
    assert findings == []
    assert _scan(data, name).verdict is Verdict.SAFE
