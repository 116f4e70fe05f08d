"""NumPy .npy/.npz: bounded headers, numeric arrays safe, object arrays scanned as pickles."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

from registry.scanning import Severity, Verdict, scan_stream
from registry.scanning.numpy_scan import scan_npy
from tests.support import scan_samples as S


def _scan(data: bytes, name: str = "a.npy"):
    return scan_stream(name, io.BytesIO(data), len(data))


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(10, dtype=np.float32),
        np.zeros((2, 3), dtype=np.float16),
        np.ones(4, dtype=bool),
        np.array(["ab", "c"]),
        np.zeros(0, dtype=np.int64),
        np.asfortranarray(np.arange(6, dtype=">i4").reshape(2, 3)),
        np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8", (2,))]),
    ],
)
def test_numeric_arrays_are_safe(arr: np.ndarray) -> None:
    data = S.npy(arr)
    assert scan_npy(io.BytesIO(data), len(data)) == []
    assert _scan(data).format == "npy"


def test_object_array_with_payload_is_unsafe_and_located() -> None:
    scan = _scan(S.numpy_object_array_payload())
    assert scan.verdict is Verdict.UNSAFE
    assert {"numpy.object-dtype", "pickle.global.dangerous"} <= {f.rule_id for f in scan.findings}
    assert any("getcwd" in f.location for f in scan.findings)


def test_plain_object_array_is_judged_by_its_pickle() -> None:
    # Issue 7: an object array is a pickle, interpreted with the same allow-list as any pickle,
    # not flagged wholesale; the object dtype is recorded.
    scan = _scan(S.numpy_object_array_plain())
    assert scan.verdict is Verdict.SAFE, scan.as_dict()
    assert [(f.rule_id, f.severity) for f in scan.findings] == [("numpy.object-dtype", Severity.INFO)]


def test_object_array_with_unknown_class_is_suspicious_not_unsafe() -> None:
    data = S.npy_object_pickle(S.unknown_class_pickle())
    scan = _scan(data)
    assert scan.verdict is Verdict.SUSPICIOUS, scan.as_dict()
    assert "pickle.global.not-allowed" in {f.rule_id for f in scan.findings}


def test_structured_dtype_with_object_field_is_a_pickle() -> None:
    arr = np.zeros(2, dtype=[("x", "<f4"), ("o", "O")])
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    assert any(f.rule_id == "numpy.object-dtype" for f in _scan(buf.getvalue()).findings)


def _handmade(header: bytes, body: bytes = b"") -> bytes:
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + body


@pytest.mark.parametrize(
    ("data", "rule"),
    [
        (_handmade(b"{'descr': '<f4', 'fortran_order': False, 'shape': (4,)}\n", b"\x00" * 8), "numpy.data.truncated"),
        (_handmade(b"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}\n", b"\x00" * 4 + S.reduce_pickle()),
         "numpy.data.trailing"),
        (_handmade(b"__import__('os').getcwd()\n"), "numpy.header.invalid"),
        (_handmade(b"{'descr': '<f4', 'shape': (1,)}\n"), "numpy.header.invalid"),
        (b"\x93NUMPY\x01\x00\xff\xff{", "numpy.header.invalid"),
        (_handmade(b"{'descr': 'object', 'fortran_order': False, 'shape': (1,)}\n", S.reduce_pickle()),
         "pickle.global.dangerous"),
    ],
)
def test_malformed_or_disguised_npy(data: bytes, rule: str) -> None:
    scan = _scan(data)
    assert rule in {f.rule_id for f in scan.findings}
    assert scan.verdict is not Verdict.SAFE


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_is_safe(compressed: bool) -> None:
    scan = _scan(S.npz(compressed), "arrays.npz")
    assert scan.format == "npz" and scan.verdict is Verdict.SAFE
    assert sum(f.rule_id == "container.member" for f in scan.findings) == 3


def test_npz_with_object_member_payload() -> None:
    data = S.rezip({"w.npy": S.npy(np.arange(3)), "evil.npy": S.numpy_object_array_payload()})
    scan = _scan(data, "weights.npz")
    assert scan.verdict is Verdict.UNSAFE
    assert any(f.location.startswith("evil.npy: ") and f.severity is Severity.UNSAFE for f in scan.findings)
