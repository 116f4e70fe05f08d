"""Bounded parse of GGUF files and a check of their chat templates.

GGUF (llama.cpp) is ``magic, version, tensor count, KV count``, the metadata KVs, the tensor infos,
padding to ``general.alignment`` and the tensor data. Every count is checked against the bytes left
before anything is allocated or looped over (a count that cannot fit is the classic overflow in
GGUF readers), every tensor must lie aligned inside the file, and no two may overlap.

The metadata may carry ``tokenizer.chat_template`` (and named variants ``tokenizer.chat_template.*``):
Jinja that servers render. It is checked by :mod:`registry.scanning.jinja_check`; an SSTI gadget
(CVE-2024-34359) is ``unsafe``.

Large arrays (the vocabulary) are walked but not kept; tensor data is never read.

Example:
    >>> import io
    >>> blob = b"GGUF" + (3).to_bytes(4, "little") + bytes(16)
    >>> scan(io.BytesIO(blob), len(blob), ScanContext("m.gguf"))
    []
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable

from registry.scanning import jinja_check
from registry.scanning._formatio import BoundedReader, FindingSink, TruncatedError
from registry.scanning.model import Finding, ScanContext, Severity

MAX_COUNT = 1 << 24
"""More tensors or KVs than this is no model we know of; refuse rather than loop for minutes."""
MAX_KEY_BYTES = 1 << 16
MAX_STRING_BYTES = 64 << 20
MAX_ARRAY_DEPTH = 8
MAX_DIMS = 4
"""GGML_MAX_DIMS: llama.cpp refuses tensors with more dimensions."""
DEFAULT_ALIGNMENT = 32

# Value types of the GGUF spec: id -> (name, fixed size or 0 for string/array).
VALUE_TYPES: dict[int, tuple[str, int]] = {
    0: ("UINT8", 1),
    1: ("INT8", 1),
    2: ("UINT16", 2),
    3: ("INT16", 2),
    4: ("UINT32", 4),
    5: ("INT32", 4),
    6: ("FLOAT32", 4),
    7: ("BOOL", 1),
    8: ("STRING", 0),
    9: ("ARRAY", 0),
    10: ("UINT64", 8),
    11: ("INT64", 8),
    12: ("FLOAT64", 8),
}
_STRING, _ARRAY, _UINT32 = 8, 9, 4

# ggml_type id -> (name, block size in elements, bytes per block). Ids missing here were removed
# from ggml (Q4_2, Q4_3, the Q4_0_4_4 family) and are refused.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66),
    17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82),
    23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54),
    35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17),
    40: ("NVFP4", 64, 36),
    41: ("Q1_0", 128, 18),
}
_INT64_MAX = (1 << 63) - 1


class _MalformedError(Exception):
    def __init__(self, rule: str, offset: int, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.offset = offset


@dataclass(slots=True)
class GgufTensor:
    name: str
    offset: int
    nbytes: int
    at: int
    dims: tuple[int, ...] = ()
    ggml_type: str = ""

    @property
    def elements(self) -> int:
        count = 1
        for d in self.dims:
            count *= d
        return count


@dataclass(slots=True)
class GgufHeader:
    """What :func:`read_header` parsed: the metadata values asked for, every array's length, the tensors."""

    version: int
    metadata: dict[str, Any] = field(default_factory=dict)
    array_lengths: dict[str, int] = field(default_factory=dict)
    tensors: list[GgufTensor] = field(default_factory=list)


def _is_template_key(key: str) -> bool:
    # llama-cpp-python reads keys through C strings (``llama_model_meta_key_by_index``): a key is cut
    # at its first NUL, so ``tokenizer.chat_template\0x`` becomes the chat template. Readers may
    # also strip whitespace; any key that reads as a chat template is checked as one.
    key = key.split("\0", 1)[0].strip()
    return key == "tokenizer.chat_template" or key.startswith("tokenizer.chat_template.")


def scan(reader: BinaryIO, size: int, ctx: ScanContext) -> list[Finding]:
    """Parse a GGUF file under bounds and check its metadata and tensor layout.

    Args:
        reader: Seekable stream; the header, metadata and tensor infos are read, never tensor data.
        size: Byte size of the file.
        ctx: Where the file is.

    Returns:
        Findings; a malformed file is ``unsafe`` (lenient readers open it), a chat template gadget
        is ``unsafe``.
    """
    return read_header(reader, size)[1]


def read_header(
    reader: BinaryIO, size: int, keep: Callable[[str], bool] = lambda key: False
) -> tuple[GgufHeader | None, list[Finding]]:
    """Parse a GGUF file under bounds: the one parser of the scanner and the facts readers.

    Args:
        reader: Seekable stream; the header, metadata and tensor infos are read, never tensor data.
        size: Byte size of the file.
        keep: Which metadata keys to decode and return (numbers, strings, arrays of strings);
            the others are walked over. ``general.alignment`` and chat templates are always read.

    Returns:
        The header (``None`` when the file could not be parsed) and the findings.
    """
    sink = FindingSink()
    r = BoundedReader(reader, size, chunk=1 << 20)
    try:
        header: GgufHeader | None = _parse(r, sink, keep)
    except TruncatedError as exc:
        header = None
        sink.add("gguf.truncated", Severity.UNSAFE, f"@{exc.offset}", f"file ends inside a field: {exc}")
    except _MalformedError as exc:
        header = None
        sink.add(exc.rule, Severity.UNSAFE, f"@{exc.offset}", str(exc))
    return header, sink.findings


def _parse(r: BoundedReader, sink: FindingSink, wanted: Callable[[str], bool]) -> GgufHeader:
    magic = r.read(4)
    if magic != b"GGUF":
        raise _MalformedError("gguf.header.magic", 0, f"magic {magic!r} is not GGUF")
    version = r.u32()
    if not 1 <= version <= 3:
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        if 1 <= swapped <= 3:
            # A big-endian GGUF (s390x builds of llama.cpp write them): every field is big-endian.
            r.endian, version = ">", swapped
        else:
            raise _MalformedError("gguf.header.version", 4, f"unsupported GGUF version {version}")
    count = r.u32 if version == 1 else r.u64
    n_tensors, n_kv = count(), count()
    # Smallest possible encodings: a KV is key length + type + 1 byte; a tensor info is name length
    # + n_dims + type + offset. Counts that cannot fit in the file are lies meant to overflow readers.
    len_size = 4 if version == 1 else 8
    if n_kv > MAX_COUNT or n_kv * (len_size + 5) > r.remaining():
        raise _MalformedError("gguf.header.count-overflow", 16, f"{n_kv} metadata entries cannot fit in the file")
    if n_tensors > MAX_COUNT or n_tensors * (len_size + 16) > r.remaining():
        raise _MalformedError("gguf.header.count-overflow", 8, f"{n_tensors} tensor infos cannot fit in the file")

    header = GgufHeader(version)
    alignment = DEFAULT_ALIGNMENT
    keys: set[str] = set()
    for _ in range(n_kv):
        at = r.pos
        key = _read_key(r, version, "gguf.metadata.key-invalid")
        if "\0" in key:
            # C readers see a shorter key than this parser does: two views of one file.
            sink.add("gguf.metadata.key-nul", Severity.UNSAFE, f"metadata@{at}",
                     f"metadata key {key!r} contains a NUL byte")
        if key in keys:
            raise _MalformedError("gguf.metadata.duplicate-key", at, f"metadata key {key!r} repeated: readers disagree")
        keys.add(key)
        vtype = r.u32()
        keep = key == "general.alignment" or _is_template_key(key) or wanted(key)
        if vtype == _ARRAY:
            header.array_lengths[key] = _peek_array_length(r, version)
        value = _read_value(r, version, vtype, keep, 0)
        if keep:
            header.metadata[key] = value
        if key == "general.alignment":
            if vtype != _UINT32 or not isinstance(value, int) or value <= 0 or value & (value - 1):
                raise _MalformedError("gguf.alignment.invalid", at,
                                      f"general.alignment {value!r} is not a power-of-two uint32")
            alignment = value
        elif _is_template_key(key):
            _check_template(key, value, at, sink)

    tensors = header.tensors
    names: set[str] = set()
    for _ in range(n_tensors):
        at = r.pos
        name = _read_key(r, version, "gguf.tensor.name-invalid")
        if name in names:
            raise _MalformedError("gguf.tensor.duplicate-name", at, f"tensor {name!r} repeated")
        names.add(name)
        n_dims = r.u32()
        if n_dims > MAX_DIMS:
            raise _MalformedError("gguf.tensor.dims-invalid", at,
                                  f"tensor {name!r} has {n_dims} dimensions (max {MAX_DIMS})")
        dims = [(r.u32() if version == 1 else r.u64()) for _ in range(n_dims)]
        gtype = r.u32()
        offset = r.u64()
        if gtype not in GGML_TYPES:
            raise _MalformedError("gguf.tensor.type-unknown", at, f"tensor {name!r} has unknown ggml type {gtype}")
        tname, block, block_bytes = GGML_TYPES[gtype]
        elements = 1
        for d in dims:
            elements *= d
        if any(d > _INT64_MAX for d in dims) or elements > _INT64_MAX:
            raise _MalformedError("gguf.tensor.size-invalid", at, f"tensor {name!r} dims {dims} overflow int64")
        if dims and dims[0] % block:
            raise _MalformedError(
                "gguf.tensor.size-invalid", at,
                f"tensor {name!r}: first dim {dims[0]} not a multiple of {tname} block {block}"
            )
        tensors.append(GgufTensor(name, offset, elements // block * block_bytes, at, tuple(dims), tname))

    data_start = _align(r.pos, alignment)
    if tensors and data_start > r.size:
        raise _MalformedError("gguf.truncated", r.pos, "file ends before the tensor data section")
    data_len = max(r.size - data_start, 0)
    _check_padding(r, min(data_start, r.size), sink)
    _check_layout(tensors, data_start, data_len, alignment, sink)
    return header


def _peek_array_length(r: BoundedReader, version: int) -> int:
    """The element count of the array value at the reader's position (the position is kept)."""
    at = r.pos
    r.u32()
    n = _read_len(r, version)
    r.seek(at)
    return n


MAX_PADDING_READ = 1 << 20


def _check_padding(r: BoundedReader, end: int, sink: FindingSink) -> None:
    """The bytes between the tensor infos and the data section are alignment padding: zeros only."""
    start = r.pos
    n = end - start
    if n <= 0:
        return
    if n > MAX_PADDING_READ:
        sink.add("gguf.padding.invalid", Severity.SUSPICIOUS, f"@{start}", f"{n} bytes of alignment padding")
        return
    if r.read(n).strip(b"\0"):
        sink.add("gguf.padding.invalid", Severity.SUSPICIOUS, f"@{start}..{end}",
                 "alignment padding holds non-zero bytes")


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _check_layout(tensors: list[GgufTensor], data_start: int, data_len: int, alignment: int, sink: FindingSink) -> None:
    cursor = 0
    for t in sorted(tensors, key=lambda t: (t.offset, t.nbytes)):
        loc = f"tensor_info[{t.name!r}]@{t.at}"
        if t.offset % alignment:
            raise _MalformedError("gguf.tensor.misaligned", t.at,
                                  f"tensor {t.name!r} offset {t.offset} not aligned to {alignment}")
        if t.offset + t.nbytes > data_len:
            raise _MalformedError(
                "gguf.tensor.out-of-bounds", t.at, f"tensor {t.name!r} [{t.offset}, +{t.nbytes}) runs past the file end"
            )
        if t.offset < cursor:
            sink.add("gguf.tensor.overlap", Severity.UNSAFE, loc, f"tensor {t.name!r} overlaps the previous tensor")
        elif t.offset > _align(cursor, alignment):
            sink.add(
                "gguf.tensor.gap",
                Severity.SUSPICIOUS,
                f"data@{data_start + cursor}..{data_start + t.offset}",
                f"{t.offset - cursor} unreferenced bytes before tensor {t.name!r}",
            )
        cursor = max(cursor, t.offset + t.nbytes)
    # Without tensors there is no data section at all (vocab-only files end after the metadata
    # padding): any byte after it is unreferenced too.
    if data_len > _align(cursor, alignment):
        sink.add(
            "gguf.data.trailing-bytes",
            Severity.SUSPICIOUS,
            f"data@{data_start + cursor}..{data_start + data_len}",
            f"{data_len - cursor} bytes after the last tensor belong to no tensor",
        )


def _read_len(r: BoundedReader, version: int) -> int:
    return r.u32() if version == 1 else r.u64()


def _read_key(r: BoundedReader, version: int, rule: str) -> str:
    at = r.pos
    n = _read_len(r, version)
    if n > MAX_KEY_BYTES or n > r.remaining():
        raise _MalformedError(rule, at, f"name length {n} is out of bounds")
    try:
        return r.read(n).decode("utf-8")
    except UnicodeDecodeError:
        raise _MalformedError(rule, at, "name is not valid UTF-8") from None


def _read_value(r: BoundedReader, version: int, vtype: int, keep: bool, depth: int) -> Any:
    at = r.pos
    if vtype not in VALUE_TYPES:
        raise _MalformedError("gguf.metadata.type-unknown", at, f"unknown value type {vtype}")
    name, fixed = VALUE_TYPES[vtype]
    if fixed:
        raw = r.read(fixed)
        if not keep:
            return None
        if name == "FLOAT32" or name == "FLOAT64":
            return struct.unpack(r.endian + ("f" if fixed == 4 else "d"), raw)[0]
        if name == "BOOL":
            return raw != b"\0"
        return int.from_bytes(raw, "little" if r.endian == "<" else "big", signed=name.startswith("INT"))
    if vtype == _STRING:
        n = _read_len(r, version)
        if n > MAX_STRING_BYTES or n > r.remaining():
            raise _MalformedError("gguf.metadata.string-overflow", at, f"string length {n} is out of bounds")
        if not keep:
            r.skip(n)
            return None
        raw = r.read(n)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw
    # An array: element type, count, elements. Nested arrays are legal but never deep in practice.
    if depth >= MAX_ARRAY_DEPTH:
        raise _MalformedError("gguf.metadata.array-too-deep", at, f"arrays nested deeper than {MAX_ARRAY_DEPTH}")
    etype = r.u32()
    n = _read_len(r, version)
    if etype not in VALUE_TYPES:
        raise _MalformedError("gguf.metadata.type-unknown", at, f"unknown array element type {etype}")
    efixed = VALUE_TYPES[etype][1]
    min_size = efixed or (4 if version == 1 else 8) + (4 if etype == _ARRAY else 0)
    if n > r.remaining() // min_size:
        raise _MalformedError("gguf.metadata.count-overflow", at, f"array of {n} elements cannot fit in the file")
    if efixed:
        r.skip(n * efixed)
        return None
    values = []
    for _ in range(n):
        value = _read_value(r, version, etype, keep, depth + 1)
        if keep:
            values.append(value)
    return values if keep else None


def _check_template(key: str, value: Any, at: int, sink: FindingSink) -> None:
    loc = f"metadata[{key!r}]@{at}"
    templates = value if isinstance(value, list) else [value]
    for i, template in enumerate(templates):
        where = loc if not isinstance(value, list) else f"{loc}[{i}]"
        if isinstance(template, bytes):
            # Not UTF-8: we cannot be sure the server's decoder sees what we check.
            sink.add("gguf.chat-template.encoding", Severity.UNSAFE, where, "chat template is not valid UTF-8")
            template = template.decode("utf-8", "replace")
        if not isinstance(template, str):
            sink.add("gguf.chat-template.type", Severity.SUSPICIOUS, where, "chat template is not a string")
            continue
        for issue in jinja_check.check_template(template):
            sink.add(f"gguf.chat-template.{issue.kind}", issue.severity, where, issue.detail)
