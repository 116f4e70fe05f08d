"""MessagePack files (``flax_model.msgpack``): one well-formed object, ending where the file ends.

``flax.serialization.msgpack_restore`` unpacks the whole file as one MessagePack object (extension types
carry array bytes and dtype names, which it decodes as data: nothing is called by name). So the only
question is whether the bytes are MessagePack at all; a file named ``.msgpack`` that is not is something
else in disguise. The walk is iterative, skips binary payloads with a seek, and is bounded.

Example:
    >>> import io
    >>> scan(io.BytesIO(b"\\x81\\xa1a\\x01"), 4, ScanContext("flax_model.msgpack"))
    []
"""

from __future__ import annotations

from typing import BinaryIO

from registry.scanning._formatio import BoundedReader, TruncatedError
from registry.scanning.model import Finding, ScanContext, Severity

MAX_ITEMS = 20_000_000

# Types with a fixed-size payload: first byte -> payload bytes (extensions include their type byte).
_FIXED = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2,
          0xD2: 4, 0xD3: 8, 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}
# Types with a length prefix: first byte -> (length bytes, extra bytes after the length: ext's type byte).
_SIZED = {0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0), 0xC7: (1, 1), 0xC8: (2, 1), 0xC9: (4, 1), 0xD9: (1, 0),
          0xDA: (2, 0), 0xDB: (4, 0)}
# Containers: first byte -> (count bytes, items per count).
_CONTAINERS = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}


class _MalformedError(Exception):
    pass


def scan(reader: BinaryIO, size: int, ctx: ScanContext) -> list[Finding]:
    """Check that the file is exactly one MessagePack object.

    Args:
        reader: Seekable stream over the file.
        size: Its byte size.
        ctx: ``ctx.path`` locates findings.

    Returns:
        ``msgpack.malformed`` (suspicious) when it is not (or holds more than :data:`MAX_ITEMS`
        objects, not walked to the end); otherwise nothing.
    """
    r = BoundedReader(reader, size)
    try:
        _walk(r)
    except (TruncatedError, _MalformedError) as exc:
        return [Finding("msgpack.malformed", Severity.SUSPICIOUS, f"{ctx.path}@{r.pos}",
                        f"not a MessagePack object, which the msgpack loader needs: {exc}")]
    if r.pos != size:
        return [Finding("msgpack.malformed", Severity.SUSPICIOUS, f"{ctx.path}@{r.pos}",
                        f"{size - r.pos} bytes after the object (msgpack refuses extra data)")]
    return []


def _walk(r: BoundedReader) -> None:
    pending = 1  # objects still to read
    items = 0
    while pending:
        pending -= 1
        items += 1
        if items > MAX_ITEMS:
            raise _MalformedError(f"more than {MAX_ITEMS} objects")
        b = r.u8()
        if b <= 0x7F or b >= 0xE0:
            continue
        if b <= 0x8F:
            pending += 2 * (b & 0x0F)
        elif b <= 0x9F:
            pending += b & 0x0F
        elif b <= 0xBF:
            r.skip(b & 0x1F)
        elif b in _FIXED:
            r.skip(_FIXED[b])
        elif b in _SIZED:
            width, extra = _SIZED[b]
            n = int.from_bytes(r.read(width), "big")
            r.skip(n + extra)
        elif b in _CONTAINERS:
            width, per = _CONTAINERS[b]
            pending += per * int.from_bytes(r.read(width), "big")
        else:
            raise _MalformedError(f"byte 0x{b:02x} is no MessagePack type")
        if pending > r.remaining():
            # Every object takes at least one byte: the counts promise more than the file holds.
            raise _MalformedError(f"{pending} more objects announced, {r.remaining()} bytes left")
