"""Strict validation of safetensors files, reading only the header.

A safetensors file is ``u64 N`` (little-endian), ``N`` bytes of UTF-8 JSON, then the data section.
The format holds no code, so what matters is that every byte is accounted for: a strict reader
(the Rust ``safetensors``) refuses holes, overlaps and trailing bytes, but lenient readers do not,
and a hole is where a payload for a second-stage loader hides. So any deviation is ``unsafe``.

Only ``8 + N`` bytes are read: a multi-gigabyte file scans in milliseconds.

Example:
    >>> import io, json, struct
    >>> hdr = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    >>> blob = struct.pack("<Q", len(hdr)) + hdr + bytes(4)
    >>> scan(io.BytesIO(blob), len(blob), ScanContext("m.safetensors"))
    []
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, BinaryIO

from registry.scanning._formatio import (
    BoundedReader,
    DuplicateKeyError,
    FindingSink,
    TruncatedError,
    strict_json_loads,
)
from registry.scanning.model import Finding, ScanContext, Severity

MAX_HEADER_SIZE = 100_000_000
"""The Rust reference refuses larger headers; so do we."""

# Bits per element, from the Dtype enum of the reference implementation (sub-byte types included).
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}
_U64_MAX = (1 << 64) - 1
_ENTRY_KEYS = frozenset({"dtype", "shape", "data_offsets"})


def _is_uint(value: Any) -> bool:
    # bool is an int subclass in Python but not a JSON number.
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _U64_MAX


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor as the header declares it (checked against the data section)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def elements(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True, slots=True)
class SafetensorsHeader:
    header_size: int
    tensors: tuple[TensorInfo, ...]
    metadata: dict[str, str]


def scan(reader: BinaryIO, size: int, ctx: ScanContext) -> list[Finding]:
    """Validate a safetensors file's header against its size.

    Args:
        reader: Seekable stream positioned anywhere; only the header is read.
        size: Byte size of the file.
        ctx: Where the file is (used for locations only).

    Returns:
        Findings; empty for a well-formed file. Every structural flaw is ``unsafe``.
    """
    return read_header(reader, size)[1]


def read_header(
    reader: BinaryIO, size: int, *, max_header_size: int = MAX_HEADER_SIZE
) -> tuple[SafetensorsHeader | None, list[Finding]]:
    """Read and validate a safetensors header: the one parser of the scanner and the facts readers.

    Args:
        reader: Seekable stream; only ``8 + N`` bytes are read, never the data section.
        size: Byte size of the file.
        max_header_size: Refuse a larger declared header (``safetensors.header.too-large``).

    Returns:
        The header (``None`` when any structural flaw was found) and the findings.
    """
    sink = FindingSink()
    # chunk=8: the length, then the header in one read; the data section is never touched.
    r = BoundedReader(reader, size, chunk=8)
    U = Severity.UNSAFE
    if size < 8:
        sink.add("safetensors.file.too-small", U, "@0", f"{size} bytes: no room for the header length")
        return None, sink.findings
    n = r.u64()
    if n > max_header_size:
        sink.add("safetensors.header.too-large", U, "@0", f"header length {n} exceeds {max_header_size}")
        return None, sink.findings
    if 8 + n > size:
        sink.add("safetensors.header.out-of-bounds", U, "@0", f"header length {n} runs past the file end ({size})")
        return None, sink.findings
    try:
        raw = r.read(n)
    except TruncatedError as exc:
        sink.add("safetensors.header.out-of-bounds", U, f"@{exc.offset}", str(exc))
        return None, sink.findings
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        sink.add("safetensors.header.encoding", U, f"header@{8 + exc.start}", "header is not valid UTF-8")
        return None, sink.findings
    if not text.startswith("{"):
        sink.add("safetensors.header.start", U, "header@8", "header does not start with '{'")
        return None, sink.findings
    stripped = text.rstrip(" ")
    if stripped != text.rstrip():
        # The spec pads with spaces only; other trailing whitespace means a non-reference writer.
        sink.add("safetensors.header.padding", Severity.SUSPICIOUS, "header", "header padded with non-space whitespace")
    try:
        header = strict_json_loads(stripped)
    except DuplicateKeyError as exc:
        sink.add("safetensors.header.duplicate-key", U, "header", f"{exc}: parsers disagree on which wins")
        return None, sink.findings
    except (ValueError, RecursionError) as exc:
        sink.add("safetensors.header.json", U, "header", f"header is not valid JSON: {exc}"[:300])
        return None, sink.findings
    if not isinstance(header, dict):
        sink.add("safetensors.header.not-object", U, "header", "header JSON is not an object")
        return None, sink.findings

    bad = _first_surrogate(header)
    if bad is not None:
        # JSON escapes can spell lone surrogates that Python accepts and the Rust reference refuses.
        sink.add("safetensors.header.encoding", U, "header",
                 f"string {bad!r} holds a lone surrogate escape: readers disagree")
        return None, sink.findings

    data_len = size - 8 - n
    ranges: list[tuple[int, int, str]] = []
    spans: dict[str, tuple[int, int]] = {}
    for name, entry in header.items():
        loc = f"header.tensors[{name!r}]"
        if name == "__metadata__":
            _check_metadata(entry, sink)
            continue
        span = _check_entry(name, entry, data_len, loc, sink)
        if span is not None:
            ranges.append((span[0], span[1], name))
            spans[name] = span
    _check_coverage(ranges, data_len, 8 + n, sink)
    if any(f.severity is U for f in sink.findings):
        return None, sink.findings
    # Only now is every entry known to be well-typed.
    tensors = tuple(TensorInfo(name, header[name]["dtype"], tuple(header[name]["shape"]), end - begin)
                    for name, (begin, end) in spans.items())
    return SafetensorsHeader(n, tensors, dict(header.get("__metadata__") or {})), sink.findings


def _first_surrogate(node: Any, depth: int = 0) -> str | None:
    """The first key or string value that is not encodable as UTF-8 (a lone surrogate), if any."""
    if depth > 4:
        return None
    items = node.items() if isinstance(node, dict) else ((None, v) for v in node) if isinstance(node, list) else ()
    for key, value in items:
        for text in (key, value):
            if isinstance(text, str):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    return text.encode("utf-8", "backslashreplace").decode("ascii")[:80]
        if isinstance(value, (dict, list)):
            found = _first_surrogate(value, depth + 1)
            if found is not None:
                return found
    return None


def _check_metadata(entry: Any, sink: FindingSink) -> None:
    if entry is None:
        return
    if not isinstance(entry, dict):
        sink.add("safetensors.metadata.invalid", Severity.UNSAFE, "header.__metadata__",
                 "__metadata__ is not an object")
        return
    for key, value in entry.items():
        if not isinstance(value, str):
            sink.add(
                "safetensors.metadata.invalid",
                Severity.UNSAFE,
                f"header.__metadata__[{key!r}]",
                f"metadata value is {type(value).__name__}, not a string",
            )


def _check_entry(name: str, entry: Any, data_len: int, loc: str, sink: FindingSink) -> tuple[int, int] | None:
    U = Severity.UNSAFE
    if not isinstance(entry, dict):
        sink.add("safetensors.tensor.invalid-entry", U, loc, "tensor entry is not an object")
        return None
    keys = set(entry)
    if keys != _ENTRY_KEYS:
        missing = sorted(_ENTRY_KEYS - keys)
        extra = sorted(keys - _ENTRY_KEYS)
        sink.add("safetensors.tensor.invalid-entry", U, loc, f"missing keys {missing}, unexpected keys {extra}")
        return None
    if not name:
        sink.add("safetensors.tensor.invalid-entry", U, loc, "empty tensor name")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    ok = True
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        sink.add("safetensors.tensor.dtype-unknown", U, loc, f"unknown dtype {dtype!r}")
        ok = False
    if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
        sink.add("safetensors.tensor.shape-invalid", U, loc, f"shape {shape!r} is not a list of non-negative ints")
        ok = False
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_uint(o) for o in offsets)):
        sink.add("safetensors.tensor.offsets-invalid", U, loc, f"data_offsets {offsets!r} is not [begin, end]")
        return None
    begin, end = offsets
    if begin > end:
        sink.add("safetensors.tensor.offsets-invalid", U, loc, f"data_offsets begin {begin} > end {end}")
        return None
    if end > data_len:
        sink.add("safetensors.tensor.offsets-invalid", U, loc,
                 f"data_offsets end {end} beyond data section ({data_len} bytes)")
        return None
    if ok:
        count = 1
        for d in shape:
            count *= d
        bits = count * DTYPE_BITS[dtype]
        if count > _U64_MAX or bits > _U64_MAX * 8:
            sink.add("safetensors.tensor.size-mismatch", U, loc, f"shape {shape} overflows 64-bit element count")
        elif bits % 8:
            sink.add("safetensors.tensor.size-mismatch", U, loc, f"{count} x {dtype} is not a whole number of bytes")
        elif bits // 8 != end - begin:
            sink.add(
                "safetensors.tensor.size-mismatch",
                U,
                loc,
                f"shape {shape} x {dtype} = {bits // 8} bytes but data_offsets span {end - begin}",
            )
    return begin, end


def _check_coverage(ranges: list[tuple[int, int, str]], data_len: int, data_start: int, sink: FindingSink) -> None:
    """Sorted by begin, ranges must tile ``[0, data_len)`` exactly."""
    U = Severity.UNSAFE
    cursor = 0
    for begin, end, name in sorted(ranges):
        if begin > cursor:
            sink.add(
                "safetensors.header.hole",
                U,
                f"data@{data_start + cursor}..{data_start + begin}",
                f"{begin - cursor} bytes before tensor {name!r} belong to no tensor (can hide a payload)",
            )
        elif begin < cursor:
            sink.add(
                "safetensors.tensor.overlap",
                U,
                f"header.tensors[{name!r}]",
                f"tensor {name!r} starts at {begin}, inside the previous tensor (ends {cursor})",
            )
        cursor = max(cursor, end)
    if cursor < data_len:
        sink.add(
            "safetensors.header.trailing-bytes",
            U,
            f"data@{data_start + cursor}..{data_start + data_len}",
            f"{data_len - cursor} bytes after the last tensor belong to no tensor (can hide a payload)",
        )
