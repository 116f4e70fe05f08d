"""safetensors: only the header is read, and every byte of the data section must belong to a tensor."""

from __future__ import annotations

import json
import struct

import pytest
from safetensors import safe_open

from registry.scanning import safetensors
from registry.scanning.model import ScanContext, Severity
from tests.support.format_samples import (
    CountingReader,
    mutations,
    rules,
    safetensors_ordinary,
    safetensors_raw,
    scan_bytes,
    verdict,
)

PICKLE_PAYLOAD = b"\x80\x04\x95\x1c\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x8c\x06system\x93\x8c\x02id\x85R."


def _scan(data: bytes) -> list:
    return scan_bytes(safetensors.scan, data, "model.safetensors")


def test_ordinary_file_written_by_the_reference_library_is_safe(tmp_path):
    data = safetensors_ordinary()
    assert _scan(data) == []
    # The reference loader agrees this is a valid file (our sample is not accidentally odd).
    path = tmp_path / "m.safetensors"
    path.write_bytes(data)
    with safe_open(str(path), "np") as f:
        assert "model.embed.weight" in f.keys()


def test_only_the_header_is_read():
    big = 1 << 20
    data = safetensors_raw({"w": {"dtype": "U8", "shape": [big], "data_offsets": [0, big]}}, bytes(big))
    header_len = struct.unpack("<Q", data[:8])[0]
    reader = CountingReader(data)
    assert safetensors.scan(reader, len(data), ScanContext("m.safetensors")) == []
    assert reader.bytes_read == 8 + header_len


def test_sparse_two_gigabyte_file_is_safe_and_scanned_from_its_header(tmp_path):
    size = 2 << 30
    header = safetensors_raw({"big": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}, b"")
    path = tmp_path / "big.safetensors"
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(len(header) + size)
    with open(path, "rb") as f:
        assert safetensors.scan(f, len(header) + size, ScanContext("big.safetensors")) == []


def test_space_padding_after_the_header_is_allowed():
    data = safetensors_raw({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(8), pad_to=64)
    assert _scan(data) == []


def test_safetensors_header_hole_hides_payload():
    header = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [8 + len(PICKLE_PAYLOAD), 16 + len(PICKLE_PAYLOAD)]},
    }
    data = safetensors_raw(header, bytes(8) + PICKLE_PAYLOAD + bytes(8))
    findings = _scan(data)
    hole = [f for f in findings if f.rule_id == "safetensors.header.hole"]
    assert hole and hole[0].severity is Severity.UNSAFE
    # The location names the hole's absolute byte range.
    start = len(data) - len(PICKLE_PAYLOAD) - 8
    assert hole[0].location == f"data@{start}..{start + len(PICKLE_PAYLOAD)}"


def test_safetensors_hole_before_first_tensor():
    data = safetensors_raw({"a": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}}, b"EVIL" + bytes(4))
    assert "safetensors.header.hole" in rules(_scan(data))


def test_safetensors_trailing_bytes_after_last_tensor_appended_payload():
    data = safetensors_ordinary() + PICKLE_PAYLOAD
    findings = _scan(data)
    assert rules(findings) == {"safetensors.header.trailing-bytes"}
    assert verdict(findings) == "unsafe"


def test_safetensors_overlapping_tensors():
    header = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
    }
    assert "safetensors.tensor.overlap" in rules(_scan(safetensors_raw(header, bytes(12))))


def test_safetensors_duplicate_tensor_name_parser_differential():
    raw = (
        b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
        b'"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
    )
    assert rules(_scan(safetensors_raw(raw, bytes(8)))) == {"safetensors.header.duplicate-key"}


def test_safetensors_duplicate_key_nested_in_entry():
    raw = b'{"w":{"dtype":"F32","dtype":"U8","shape":[4],"data_offsets":[0,4]}}'
    assert rules(_scan(safetensors_raw(raw, bytes(4)))) == {"safetensors.header.duplicate-key"}


@pytest.mark.parametrize(
    ("entry", "data_len", "rule"),
    [
        ({"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}, 4, "safetensors.tensor.dtype-unknown"),
        ({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}, 4, "safetensors.tensor.shape-invalid"),
        ({"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}, 4, "safetensors.tensor.shape-invalid"),
        ({"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}, 4, "safetensors.tensor.shape-invalid"),
        ({"dtype": "F32", "shape": 4, "data_offsets": [0, 4]}, 4, "safetensors.tensor.shape-invalid"),
        ({"dtype": "F32", "shape": [3], "data_offsets": [0, 4]}, 4, "safetensors.tensor.size-mismatch"),
        ({"dtype": "F32", "shape": [1 << 40, 1 << 40], "data_offsets": [0, 4]}, 4, "safetensors.tensor.size-mismatch"),
        ({"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}, 2, "safetensors.tensor.size-mismatch"),
        ({"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}, 8, "safetensors.tensor.offsets-invalid"),
        ({"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}, 8, "safetensors.tensor.offsets-invalid"),
        ({"dtype": "F32", "shape": [1], "data_offsets": [0, 4000]}, 4, "safetensors.tensor.offsets-invalid"),
        ({"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": 1}, 4, "safetensors.tensor.invalid-entry"),
        ({"dtype": "F32", "shape": [1]}, 4, "safetensors.tensor.invalid-entry"),
        ("F32", 4, "safetensors.tensor.invalid-entry"),
    ],
)
def test_invalid_tensor_entries_are_unsafe(entry, data_len, rule):
    findings = _scan(safetensors_raw({"t": entry}, bytes(data_len)))
    assert rule in rules(findings)
    assert verdict(findings) == "unsafe"


def test_sub_byte_dtype_with_whole_bytes_is_safe():
    entries = {
        "fp4": {"dtype": "F4", "shape": [4], "data_offsets": [0, 2]},
        "fp6": {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [2, 5]},
        "e8m0": {"dtype": "F8_E8M0", "shape": [3], "data_offsets": [5, 8]},
    }
    assert _scan(safetensors_raw(entries, bytes(8))) == []


@pytest.mark.parametrize(
    "metadata",
    [{"format": 1}, {"format": {"nested": "x"}}, ["format", "pt"], "pt"],
)
def test_metadata_must_map_strings_to_strings(metadata):
    header = {"__metadata__": metadata, "w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}
    assert rules(_scan(safetensors_raw(header, b"\0"))) == {"safetensors.metadata.invalid"}


@pytest.mark.parametrize(
    ("data", "rule"),
    [
        (b"\x01\x00", "safetensors.file.too-small"),
        (struct.pack("<Q", 200_000_000) + b"{}", "safetensors.header.too-large"),
        (struct.pack("<Q", 64) + b"{}", "safetensors.header.out-of-bounds"),
        (struct.pack("<Q", 4) + b"{\xff\xfe}", "safetensors.header.encoding"),
        (struct.pack("<Q", 4) + b" {} ", "safetensors.header.start"),
        (struct.pack("<Q", 4) + b"[1] ", "safetensors.header.start"),
        (safetensors_raw(b'{"w": NaN}', b""), "safetensors.header.json"),
        (safetensors_raw(b'{"w": 1} trailing', b""), "safetensors.header.json"),
        (safetensors_raw(b"{" * 100_000, b""), "safetensors.header.json"),
    ],
)
def test_malformed_headers_are_unsafe(data, rule):
    findings = _scan(data)
    assert rule in rules(findings)
    assert verdict(findings) == "unsafe"


def test_non_space_padding_is_suspicious():
    raw = json.dumps({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}).encode() + b"\n\t"
    findings = _scan(safetensors_raw(raw, b"\0", pad_to=0))
    assert rules(findings) == {"safetensors.header.padding"}
    assert verdict(findings) == "suspicious"


def test_empty_file_with_no_tensors_is_safe_but_data_without_tensors_is_not():
    assert _scan(safetensors_raw({}, b"")) == []
    assert rules(_scan(safetensors_raw({}, PICKLE_PAYLOAD))) == {"safetensors.header.trailing-bytes"}


def test_fuzzed_ordinary_file_never_raises_and_truncation_is_never_safe():
    data = safetensors_ordinary()
    for label, mutated in mutations(data, seed=1, count=400):
        findings = _scan(mutated)
        if label.startswith("truncate"):
            assert verdict(findings) == "unsafe", label
    for cut in range(len(data)):
        assert verdict(_scan(data[:cut])) == "unsafe", cut
