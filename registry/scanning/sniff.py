"""Format detection from bytes only: a file's name never decides how it is scanned.

A pickle saved as ``.bin``, a gzip stream saved as ``.joblib`` or a 7z archive saved as ``.pt``
are found by their first bytes. Protocol 0 and 1 pickles have no magic number (they are text), so
they are recognized by interpreting a prefix (:func:`registry.scanning.pickle_scan.probe_pickle`).

Example:
    >>> sniff(b"\\x80\\x04\\x95\\x05\\x00\\x00\\x00\\x00\\x00\\x00\\x00K\\x01.", 14)
    'pickle'
    >>> sniff(b'{"a": 1}', 8)
    'json'
"""

from __future__ import annotations

import lzma
import struct
import tarfile
import zlib
from typing import BinaryIO

from registry.scanning.pickle_scan import probe_pickle

HEAD_BYTES = 65536
"""How many leading bytes :func:`sniff` wants to see."""

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"

LZMA_MEMLIMIT = 1 << 30
"""Memory a legacy lzma stream may ask for while it is decompressed here."""

UNINSPECTABLE = {
    b"7z\xbc\xaf\x27\x1c": "7z",
    b"Rar!\x1a\x07": "rar",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"\x04\x22\x4d\x18": "lz4",
    b"MSCF\x00\x00\x00\x00": "cab",
}
"""Archive formats recognized but not opened: their content cannot be inspected here."""

GGML_MAGICS = frozenset({b"lmgg", b"fmgg", b"tjgg", b"algg"})
"""The legacy ggml/ggmf/ggjt/ggla magic numbers (little-endian) of llama.cpp and whisper.cpp before GGUF."""

CODE_BEARING = frozenset({"pickle", "pytorch-legacy", "pytorch-zip", "npy", "npz", "keras", "hdf5", "zip", "tar"})

# ModelProto field number -> protobuf wire type (0 varint, 2 length-delimited).
_ONNX_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}


def sniff(head: bytes, size: int, reader: BinaryIO | None = None) -> str:
    """Decide a stream's format from its first bytes.

    Args:
        head: the first :data:`HEAD_BYTES` bytes (or the whole stream when shorter).
        size: the stream's full size.
        reader: the whole stream, when available: a pickle whose first opcodes outrun ``head``
            (a long string, a long run of no-ops) is only recognized by reading further.

    Returns:
        One of ``empty``, ``npy``, ``zip``, ``gzip``, ``bz2``, ``xz``, ``zlib``, ``lzma``, ``7z``, ``rar``, ``zstd``,
        ``lz4``, ``cab``, ``gguf``, ``ggml``, ``tflite``, ``executable``, ``hdf5``, ``tar``, ``safetensors``,
        ``pickle``, ``onnx``,
        ``json``, ``text`` or ``unknown``. Zips are refined later (``pytorch-zip``, ``keras``,
        ``npz``) from their member list.
    """
    if size == 0 or not head:
        return "empty"
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08"):
        return "zip"
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith(b"BZh") and len(head) > 3 and head[3:4] in b"123456789":
        return "bz2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if _is_zlib(head):
        return "zlib"
    if _is_lzma_alone(head):
        return "lzma"
    for magic, kind in UNINSPECTABLE.items():
        if head.startswith(magic):
            return kind
    if head.startswith(b"GGUF"):
        return "gguf"
    binary = _as_text(head) is None
    if binary and head[:4] in GGML_MAGICS:
        return "ggml"
    if binary and head[4:8] == b"TFL3":
        return "tflite"
    if binary and _is_executable(head):
        return "executable"
    if _hdf5_offset(head) is not None:
        return "hdf5"
    if is_tar(head):
        return "tar"
    if _is_safetensors(head, size):
        return "safetensors"
    if probe_pickle(head, reader, size):
        return "pickle"
    if _is_onnx(head, size, reader):
        return "onnx"
    text = _as_text(head)
    if text is not None:
        stripped = text.lstrip("\ufeff \t\r\n")
        return "json" if stripped[:1] in ("{", "[") else "text"
    return "unknown"


def _is_executable(head: bytes) -> bool:
    """A native program: ELF, Mach-O, a PE whose header pointer lands on ``PE``, or an Actually Portable Executable."""
    if head.startswith((b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe", b"\xfe\xed\xfa\xce",
                        b"\xfe\xed\xfa\xcf")):
        return True
    if head.startswith((b"MZqFpD", b"jartsr")):
        return True
    if head.startswith(b"MZ") and len(head) >= 0x40:
        (pe,) = struct.unpack_from("<I", head, 0x3C)
        return head[pe:pe + 4] == b"PE\x00\x00"
    return False


def _is_zlib(head: bytes) -> bool:
    """A raw zlib stream (joblib's default compression): header checksum, then data that inflates.

    The two-byte header alone is too weak (text starting with ``x`` can pass it), so the first
    bytes must also inflate without error.
    """
    if len(head) < 3 or head[0] & 0x0F != 8 or head[0] >> 4 > 7 or (head[0] << 8 | head[1]) % 31 or head[1] & 0x20:
        return False
    if _as_text(head) is not None:
        # Compressed bytes are not UTF-8 text; a note starting "x^2" is.
        return False
    try:
        out = zlib.decompressobj().decompress(head[:4096], 256)
    except zlib.error:
        return False
    return bool(out) or len(head) < 4096


def _is_lzma_alone(head: bytes) -> bool:
    """A legacy ``.lzma`` stream (joblib's ``lzma`` compression): properties, then data that decodes."""
    # joblib recognizes exactly this prefix: the usual properties byte and a dictionary size
    # whose low byte is zero.
    if len(head) < 14 or head[:2] != b"\x5d\x00" or _as_text(head) is not None:
        return False
    try:
        out = lzma.LZMADecompressor(format=lzma.FORMAT_ALONE, memlimit=LZMA_MEMLIMIT).decompress(head[:4096], 256)
    except lzma.LZMAError as exc:
        # A dictionary too large to try here is still one joblib would allocate: lzma, undecodable.
        return "memory" in str(exc).lower()
    return bool(out)


def _hdf5_offset(head: bytes) -> int | None:
    """Where the HDF5 superblock signature is: at 0, or after a user block (512, 1024, 2048, ...).

    h5py and the HDF5 library search those offsets, so a file with a user block is HDF5 to them.
    Only offsets inside the prefix are seen here; the engine checks further ones.
    """
    offset = 0
    while offset + len(HDF5_MAGIC) <= len(head):
        if head[offset:offset + len(HDF5_MAGIC)] == HDF5_MAGIC:
            return offset
        offset = 512 if offset == 0 else offset * 2
    return None


def is_tar(head: bytes) -> bool:
    """Whether the first 512 bytes are a tar header Python's tarfile accepts."""
    if len(head) < 512:
        return False
    if head[257:262] == b"ustar":
        return True
    # Old (v7) tar headers have no magic: check the header checksum instead, read exactly as
    # Python's tarfile reads it (torch.load's legacy tar loader uses it): the field may be octal
    # or base-256, and the sum may be taken over unsigned or signed bytes.
    try:
        recorded = tarfile.nti(head[148:156])
    except (tarfile.InvalidHeaderError, ValueError):
        return False
    return recorded > 256 and recorded in tarfile.calc_chksums(head[:512]) and head[0] != 0


def _is_safetensors(head: bytes, size: int) -> bool:
    if size < 10 or len(head) < 9:
        return False
    (n,) = struct.unpack_from("<Q", head)
    return 2 <= n <= size - 8 and head[8:9] == b"{"


def _varint(buf: bytes, p: int) -> tuple[int, int]:
    value = shift = 0
    while p < len(buf) and shift < 64:
        b = buf[p]
        p += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, p
        shift += 7
    raise ValueError("truncated varint")


class _Window:
    """Bytes of a stream by absolute offset: the prefix first, then reads from the stream, cached."""

    _BLOCK = 1 << 12

    def __init__(self, head: bytes, size: int, reader: BinaryIO | None) -> None:
        self.head = head
        self.size = size
        self.reader = reader
        self.block_at = -1
        self.block = b""

    def get(self, p: int, n: int) -> bytes:
        if p + n <= len(self.head) or self.reader is None:
            return self.head[p:p + n]
        if not (self.block_at <= p and p + n <= self.block_at + len(self.block)):
            at = self.reader.tell()
            self.reader.seek(p)
            self.block = self.reader.read(max(n, self._BLOCK))
            self.reader.seek(at)
            self.block_at = p
        return self.block[p - self.block_at:p - self.block_at + n]


_MAX_TOP_FIELDS = 100_000
_MAX_GROUP_DEPTH = 32


def _skip_field(w: _Window, p: int, end: int, wire: int, fieldno: int, depth: int = 0) -> int:
    """Offset after one field's value (wire type known, tag consumed); ValueError when malformed."""
    if wire == 0:
        _, q = _varint(w.get(p, 10), 0)
        return p + q
    if wire == 1:
        return p + 8
    if wire == 5:
        return p + 4
    if wire == 2:
        length, q = _varint(w.get(p, 10), 0)
        return p + q + length
    if wire == 3 and depth < _MAX_GROUP_DEPTH:
        # Groups are obsolete but every protobuf parser still skips them as unknown fields.
        while p < end:
            key, q = _varint(w.get(p, 10), 0)
            p += q
            if key >> 3 == 0:
                break
            if key & 7 == 4:
                if key >> 3 != fieldno:
                    break
                return p
            p = _skip_field(w, p, end, key & 7, key >> 3, depth + 1)
    raise ValueError("malformed field")


def _is_onnx(head: bytes, size: int, reader: BinaryIO | None = None) -> bool:
    """Whether the stream parses as a ModelProto carrying a graph.

    Protobuf fixes no field order, readers skip unknown fields (groups included) and treat a known
    field with another wire type as unknown, so none of that is held against a stream here (an
    attacker reorders or pads fields to dodge a sniffer that wants ``ir_version`` first, or pushes
    the graph past a fixed prefix behind a long ``doc_string``). What is required: every top-level
    field parses, a ``graph`` field is present, and the graph's own first fields parse with at
    least one GraphProto field among them; random bytes pass all of that with negligible
    probability. With ``reader``, fields are followed past the prefix (by offsets, not reads of
    their bodies).
    """
    w = _Window(head, size, reader)
    limit = size if reader is not None else len(head)
    p = 0
    fields = 0
    seen: set[int] = set()
    graph_ok = False
    try:
        while p < limit and fields < _MAX_TOP_FIELDS:
            key, q = _varint(w.get(p, 10), 0)
            fieldno, wire = key >> 3, key & 7
            if fieldno == 0 or wire not in (0, 1, 2, 3, 5):
                return False
            after = _skip_field(w, p + q, limit, wire, fieldno)
            if after > size:
                return False
            if fieldno == 7 and wire == 2:
                length, lq = _varint(w.get(p + q, 10), 0)
                body = w.get(p + q + lq, min(length, 4096))
                graph_ok = _graph_prefix_ok(body, length)
                if not graph_ok:
                    return False
            if fieldno in _ONNX_FIELDS and _ONNX_FIELDS[fieldno] == wire:
                seen.add(fieldno)
            p = after
            fields += 1
            if graph_ok and seen & {1, 8}:
                return True
    except ValueError:
        return False
    if fields >= _MAX_TOP_FIELDS and p < limit:
        # That many well-formed fields are no accident: padding in front of a graph. The validator
        # walks the rest (and fails closed if it is no model).
        return True
    if not graph_ok:
        return False
    # A graph that runs past what was read hides the fields after it; otherwise an opset or version is due.
    return p >= limit or bool(seen & {1, 8})


# GraphProto fields that hold messages or strings: node, name, initializer, doc_string, input,
# output, value_info, quantization_annotation, sparse_initializer, metadata_props.
_GRAPH_FIELDS = frozenset({1, 2, 5, 10, 11, 12, 13, 14, 15, 16})


def _graph_prefix_ok(data: bytes, length: int) -> bool:
    """Whether a graph's first bytes parse as protobuf fields, at least one of them a GraphProto one."""
    w = _Window(data, length, None)
    p = fields = known = 0
    try:
        while p < len(data) and fields < 64:
            key, q = _varint(data, p)
            fieldno, wire = key >> 3, key & 7
            if fieldno == 0 or wire not in (0, 1, 2, 3, 5):
                return False
            after = _skip_field(w, q, len(data), wire, fieldno)
            if after > length:
                return False
            if wire == 2 and fieldno in _GRAPH_FIELDS:
                known += 1
            p = after
            fields += 1
    except ValueError:
        # The prefix ended inside a field: what was read so far decides.
        pass
    return known >= 1 and (fields >= 3 or p >= length or known >= 2)


def _as_text(head: bytes) -> str | None:
    if b"\x00" in head:
        return None
    try:
        return head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the end of the prefix is still text.
        if exc.start >= len(head) - 3 and len(head) >= 4:
            return head[: exc.start].decode("utf-8", "replace")
        return None
