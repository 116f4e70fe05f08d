"""NumPy ``.npy`` files: a bounded header parse, and object arrays scanned as the pickles they are.

``np.load(..., allow_pickle=True)`` unpickles an object array's data, so an ``object`` dtype (or a
structured dtype with an object field) makes the rest of the file a pickle: it is scanned with
the pickle interpreter, with the same allow-list as any pickle: an array of plain data (strings,
numbers, dicts, lists) is safe, an array whose pickle resolves anything else is judged by it.

Example:
    >>> import io, numpy as np
    >>> buf = io.BytesIO(); np.save(buf, np.arange(3))
    >>> [f.rule_id for f in scan_npy(buf, len(buf.getvalue()))]
    []
"""

from __future__ import annotations

import ast
import math
import struct
from typing import Any, BinaryIO

from registry.scanning.model import Finding, Severity
from registry.scanning.pickle_scan import NestedScanner, scan_pickle_file

_MAX_HEADER = 1 << 20


def _dtype_info(descr: Any) -> tuple[bool, int | None]:
    """Whether ``descr`` holds objects, and its item size when known."""
    try:
        import numpy as np  # numpy parses dtype descriptors without running code

        dt = np.lib.format.descr_to_dtype(descr)
        return bool(dt.hasobject), int(dt.itemsize)
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 - an unparsable descriptor is judged below, conservatively
        return _fallback_has_object(descr), None
    return _fallback_has_object(descr), None


def _fallback_has_object(descr: Any) -> bool:
    if isinstance(descr, str):
        tokens = [t.strip().lstrip("<>|=") for t in descr.split(",")]
        return any(t.startswith("O") or t.startswith("object") for t in tokens)
    if isinstance(descr, (list, tuple)):
        return any(_fallback_has_object(x) for x in descr)
    return True


def _parse_header(text: str, major: int) -> Any:
    """The header dict as ``np.load`` reads it.

    NumPy retries a version 1.0/2.0 header that is not a Python 3 literal after rewriting Python 2
    forms (``3L`` longs): a file written that way still loads, so it is read that way here.
    """
    try:
        return ast.literal_eval(text)
    except SyntaxError:
        if major > 2:
            raise
        try:
            from numpy.lib import _format_impl as fmt
        except ImportError:  # numpy 1.x
            from numpy.lib import format as fmt  # type: ignore[no-redef]
        return ast.literal_eval(fmt._filter_header(text))


def scan_npy(
    reader: BinaryIO,
    size: int,
    *,
    loc: str = "",
    nested: NestedScanner | None = None,
    start: int = 0,
) -> list[Finding]:
    """Scan one ``.npy`` stream.

    Args:
        reader: seekable stream, the ``.npy`` starting at ``start``.
        size: the stream's size.
        loc: location prefix for findings.
        nested: callback for serialized blobs nested in an object array's pickle.
        start: offset of the magic string.

    Returns:
        The findings.
    """
    reader.seek(start)
    pre = reader.read(12)
    if len(pre) < 10 or not pre.startswith(b"\x93NUMPY"):
        return [Finding("numpy.header.invalid", Severity.ERROR, f"{loc}offset 0", "truncated .npy preamble")]
    major, minor = pre[6], pre[7]
    if major == 1:
        (hlen,) = struct.unpack_from("<H", pre, 8)
        hstart = 10
    elif major in (2, 3) and len(pre) >= 12:
        (hlen,) = struct.unpack_from("<I", pre, 8)
        hstart = 12
    else:
        return [Finding("numpy.header.invalid", Severity.ERROR, f"{loc}offset 6",
                        f"unknown .npy version {major}.{minor}")]
    if start + hstart + hlen > size:
        return [Finding("numpy.header.invalid", Severity.ERROR, f"{loc}offset 8",
                        f"header length {hlen} out of bounds")]
    if hlen > _MAX_HEADER:
        # np.load(allow_pickle=True) lifts its own header size limit: it would read this one.
        return [Finding("numpy.header.too-large", Severity.UNSAFE, f"{loc}offset 8",
                        f"header of {hlen} bytes is too large to inspect")]
    reader.seek(start + hstart)
    raw = reader.read(hlen)
    try:
        header = _parse_header(raw.decode("utf-8" if major == 3 else "latin-1"), major)
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError) as exc:
        return [Finding("numpy.header.invalid", Severity.ERROR, f"{loc}offset {hstart}",
                        f"header is not a literal: {exc}")]
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        return [Finding("numpy.header.invalid", Severity.ERROR, f"{loc}offset {hstart}",
                        "header keys are not descr/fortran_order/shape")]
    shape = header["shape"]
    if (
        not isinstance(shape, tuple)
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        or not isinstance(header["fortran_order"], bool)
    ):
        return [Finding("numpy.header.invalid", Severity.ERROR, f"{loc}offset {hstart}", "bad shape or fortran_order")]
    data_at = start + hstart + hlen
    has_object, itemsize = _dtype_info(header["descr"])
    if has_object:
        findings = [
            Finding(
                "numpy.object-dtype", Severity.INFO, f"{loc}offset {data_at}",
                f"object dtype {header['descr']!r}: the data is a pickle, run by np.load(allow_pickle=True)",
            )
        ]
        result = scan_pickle_file(reader, size, loc=loc, nested=nested, start=data_at)
        return findings + result.findings
    if itemsize is None:
        return [Finding("numpy.dtype.unknown", Severity.SUSPICIOUS, f"{loc}offset {hstart}",
                        f"dtype {header['descr']!r} not understood")]
    expected = math.prod(shape) * itemsize
    have = size - data_at
    if have < expected:
        return [Finding("numpy.data.truncated", Severity.ERROR, f"{loc}offset {data_at}",
                        f"{have} data bytes, {expected} expected")]
    if have > expected:
        return [
            Finding(
                "numpy.data.trailing", Severity.SUSPICIOUS, f"{loc}offset {data_at + expected}",
                f"{have - expected} bytes after the array data",
            )
        ]
    return []
