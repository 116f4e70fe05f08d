"""Bounded, buffered reading and finding collection for the format validators.

The format scanners (``safetensors``, ``gguf``, ``onnx``, ``keras``, ``remote_code``) read files that may
sit behind a ranged S3 reader, so they never read a whole file: :class:`BoundedReader` serves small
reads from a chunk buffer, skips large fields with a seek, and refuses to go past the declared size.
:class:`FindingSink` caps how many findings of one rule a hostile file can produce.

Example:
    >>> import io
    >>> r = BoundedReader(io.BytesIO(b"\\x01\\x00\\x00\\x00rest"), 8)
    >>> r.u32(), r.read(4), r.pos
    (1, b'rest', 8)
"""

from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO

from registry.scanning.model import Finding, Severity


class TruncatedError(Exception):
    """A read or skip would go past the end of the file (or the reader returned short)."""

    def __init__(self, offset: int, wanted: int, size: int) -> None:
        super().__init__(f"need {wanted} bytes at offset {offset}, file has {size}")
        self.offset = offset
        self.wanted = wanted
        self.size = size


class BoundedReader:
    """Sequential little/big-endian reader over ``reader[0:size]`` with a chunk buffer.

    Args:
        reader: A seekable binary stream; only ``seek`` and ``read`` are used.
        size: The byte size of the file; nothing past it is ever read.
        chunk: How much to read ahead on a buffer miss (one ranged request per chunk).
    """

    def __init__(self, reader: BinaryIO, size: int, chunk: int = 1 << 16) -> None:
        self._reader = reader
        self.size = size
        self._chunk = chunk
        self._buf = b""
        self._buf_start = 0
        self.pos = 0
        self.endian = "<"

    def remaining(self) -> int:
        return self.size - self.pos

    def seek(self, pos: int) -> None:
        if pos < 0 or pos > self.size:
            raise TruncatedError(pos, 0, self.size)
        self.pos = pos

    def skip(self, n: int) -> None:
        """Advance ``n`` bytes without reading them (a large field is never fetched)."""
        if n < 0 or self.pos + n > self.size:
            raise TruncatedError(self.pos, n, self.size)
        self.pos += n

    def _fetch(self, pos: int, n: int) -> bytes:
        self._reader.seek(pos)
        parts: list[bytes] = []
        got = 0
        while got < n:
            part = self._reader.read(n - got)
            if not part:
                break
            parts.append(part)
            got += len(part)
        return b"".join(parts)

    def read(self, n: int) -> bytes:
        """Read exactly ``n`` bytes at the current position.

        Raises:
            TruncatedError: the file (declared size or actual stream) ends first.
        """
        if n < 0 or self.pos + n > self.size:
            raise TruncatedError(self.pos, n, self.size)
        start = self.pos - self._buf_start
        if 0 <= start and start + n <= len(self._buf):
            data = self._buf[start : start + n]
        elif n >= self._chunk:
            data = self._fetch(self.pos, n)
        else:
            self._buf_start = self.pos
            self._buf = self._fetch(self.pos, min(self._chunk, self.size - self.pos))
            data = self._buf[:n]
        if len(data) != n:
            # The stream is shorter than the size we were told: treat as truncation, never as EOF.
            raise TruncatedError(self.pos, n, self.pos + len(data))
        self.pos += n
        return data

    def _unpack(self, fmt: str, n: int) -> Any:
        return struct.unpack(self.endian + fmt, self.read(n))[0]

    def u8(self) -> int:
        return self.read(1)[0]

    def u16(self) -> int:
        return int(self._unpack("H", 2))

    def u32(self) -> int:
        return int(self._unpack("I", 4))

    def u64(self) -> int:
        return int(self._unpack("Q", 8))

    def i64(self) -> int:
        return int(self._unpack("q", 8))


class FindingSink:
    """Collects findings, keeping at most ``per_rule`` of each rule id (then one summary).

    A hostile file can repeat a flaw a million times; the verdict needs one, the reader a few.
    """

    def __init__(self, per_rule: int = 20) -> None:
        self.findings: list[Finding] = []
        self._counts: dict[str, int] = {}
        self._per_rule = per_rule

    def add(self, rule_id: str, severity: Severity, location: str, message: str) -> None:
        count = self._counts.get(rule_id, 0) + 1
        self._counts[rule_id] = count
        if count <= self._per_rule:
            self.findings.append(Finding(rule_id, severity, location, message))
        elif count == self._per_rule + 1:
            self.findings.append(
                Finding(rule_id, severity, location, f"more findings of {rule_id} omitted")
            )

    def extend(self, findings: list[Finding]) -> None:
        self.findings.extend(findings)

    def worst_is_safe(self) -> bool:
        return all(f.severity is Severity.INFO for f in self.findings)


class DuplicateKeyError(ValueError):
    """A JSON object repeats a key (``path`` names where)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key = key


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def strict_json_loads(text: str | bytes, duplicates: list[str] | None = None) -> Any:
    """Parse JSON strictly: no NaN/Infinity, and duplicate keys recorded or refused.

    Args:
        text: The JSON text.
        duplicates: If given, duplicate keys are appended to it (the last value wins, as in
            ``json.loads``); if ``None``, the first duplicate raises :class:`DuplicateKeyError`.

    Raises:
        ValueError: not JSON (including :class:`DuplicateKeyError`).
        RecursionError: nested too deep.
    """

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                if duplicates is None:
                    raise DuplicateKeyError(key)
                duplicates.append(key)
            out[key] = value
        return out

    return json.loads(text, object_pairs_hook=hook, parse_constant=_reject_constant)


def read_limited(reader: BinaryIO, size: int, limit: int) -> bytes | None:
    """Read a whole small file, or return ``None`` when it is larger than ``limit``."""
    if size > limit:
        return None
    return BoundedReader(reader, size, chunk=max(size, 1)).read(size)


def json_path(parent: str, key: str | int) -> str:
    """Extend a ``$.a[0].b`` style location."""
    if isinstance(key, int):
        return f"{parent}[{key}]"
    if key.isidentifier():
        return f"{parent}.{key}"
    return f"{parent}[{json.dumps(key)}]"
