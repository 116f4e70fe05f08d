"""Containers: strict zip, tar, and gzip/bz2/xz streams, opened under bounds.

Nothing here trusts a lenient reader. The zip reader parses the central directory itself and
refuses what a strict reader must refuse (CRC errors, local names that differ from the central
directory, encryption and unknown flag bits, overlapping entries, bytes hidden before, between or
after entries), because *some* loader will open such a file and read what a lenient scanner
skipped. Decompression streams with caps into spooled temporary files, so a bomb is a finding and
never an out-of-memory.

Members are handed to a ``visit(name, reader, size)`` callback (the engine), which scans them.

Example:
    >>> import io, zipfile
    >>> buf = io.BytesIO()
    >>> with zipfile.ZipFile(buf, "w") as z:
    ...     z.writestr("a.txt", "hello")
    >>> findings = scan_zip(buf, len(buf.getvalue()), ScanBudget(ScanLimits()), lambda n, r, s: [])
    >>> [f.rule_id for f in findings]
    []
"""

from __future__ import annotations

import bz2
import io
import lzma
import struct
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from registry.scanning.model import Finding, Severity

_CHUNK = 1 << 20
_SPOOL_IN_MEMORY = 32 << 20

Visit = Callable[[str, BinaryIO, int], list[Finding]]


@dataclass(frozen=True, slots=True)
class ScanLimits:
    """Bounds for one scan of one file (containers included).

    Attributes:
        max_depth: containers nested deeper than this are not opened (a finding).
        max_members: total members across every container of the file.
        max_expanded_bytes: total bytes produced by decompression across the file.
        max_ratio: a member expanding more than this many times its compressed size...
        ratio_min_bytes: ...and to more than this many bytes is suspicious (a stream stops there).
            Below it everything is expanded and scanned: a sparse array of 100 MB compresses a
            thousandfold in an ordinary joblib or npz file, and the expansion budget still bounds
            what a bomb costs.
        max_header_bytes: bound for headers parsed in memory (npy, central directory).
    """

    max_depth: int = 4
    max_members: int = 10_000
    max_expanded_bytes: int = 8 << 30
    max_ratio: int = 200
    ratio_min_bytes: int = 1 << 30
    max_header_bytes: int = 64 << 20


@dataclass(slots=True)
class ScanBudget:
    """What one top-level scan has used so far of its :class:`ScanLimits`."""

    limits: ScanLimits
    members: int = 0
    expanded: int = 0
    exhausted: set[str] = field(default_factory=set)

    def take_member(self) -> bool:
        self.members += 1
        return self.members <= self.limits.max_members

    @property
    def expand_left(self) -> int:
        return max(0, self.limits.max_expanded_bytes - self.expanded)


class SliceReader(io.RawIOBase):
    """A seekable read-only window ``[offset, offset + size)`` over a shared seekable stream.

    Every read seeks the underlying stream first, so several windows over one file can be used
    in turn without copying a stored member anywhere.
    """

    def __init__(self, inner: BinaryIO, offset: int, size: int) -> None:
        super().__init__()
        self._inner = inner
        self._offset = offset
        self._size = max(0, size)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        if whence == 1:
            pos += self._pos
        elif whence == 2:
            pos += self._size
        self._pos = min(max(0, pos), self._size)
        return self._pos

    def read(self, n: int | None = -1) -> bytes:  # type: ignore[override]
        left = self._size - self._pos
        if n is None or n < 0 or n > left:
            n = left
        if n <= 0:
            return b""
        self._inner.seek(self._offset + self._pos)
        data = self._inner.read(n)
        self._pos += len(data)
        return data

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def readline(self, limit: int | None = -1) -> bytes:  # type: ignore[override]
        cap = self._size - self._pos if limit is None or limit < 0 else min(limit, self._size - self._pos)
        out = bytearray()
        while len(out) < cap:
            block = self.read(min(8192, cap - len(out)))
            if not block:
                break
            nl = block.find(b"\n")
            if nl >= 0:
                out += block[: nl + 1]
                self._pos -= len(block) - nl - 1
                break
            out += block
        return bytes(out)


def spool() -> tempfile.SpooledTemporaryFile[bytes]:
    """A temporary file kept in memory while small, for nested members that must be seekable."""
    return tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY, mode="w+b")


def _f(rule: str, sev: Severity, loc: str, msg: str) -> Finding:
    return Finding(rule, sev, loc, msg)


# --- zip --------------------------------------------------------------------------------------

_EOCD = b"PK\x05\x06"
_EOCD64 = b"PK\x06\x06"
_EOCD64_LOC = b"PK\x06\x07"
_CDH = b"PK\x01\x02"
_LFH = b"PK\x03\x04"
_DD = b"PK\x07\x08"
# bit 1-2: deflate options; bit 3: sizes in a data descriptor; bit 11: UTF-8 names.
_ALLOWED_FLAGS = 0x0002 | 0x0004 | 0x0008 | 0x0800
_METHODS = {0: "stored", 8: "deflate", 12: "bzip2"}
# bit 0: traditional encryption; bit 6: strong encryption; bit 13: masked central directory.
_ENCRYPTED = 0x0001 | 0x0040 | 0x2000
# What a reader finds reading ciphertext as if it were clear: expected for an encrypted member.
_CIPHERTEXT_RULES = frozenset({"zip.crc", "zip.size-mismatch", "zip.corrupt"})


@dataclass(slots=True)
class ZipEntry:
    """One central directory entry, checked against its local header."""

    name: str
    raw_name: bytes
    flags: int
    method: int
    crc: int
    csize: int
    usize: int
    header_offset: int
    data_offset: int = 0
    end: int = 0


def list_zip(reader: BinaryIO, size: int, budget: ScanBudget) -> tuple[list[ZipEntry], list[Finding]]:
    """Parse and cross-check a zip's structure without reading member data.

    Args:
        reader: seekable stream holding the whole zip.
        size: its size.
        budget: shared bounds (members are counted).

    Returns:
        The entries (empty if the structure is unusable) and structural findings.
    """
    findings: list[Finding] = []
    tail_len = min(size, 22 + 65535)
    reader.seek(size - tail_len)
    tail = reader.read(tail_len)
    eocd_at = -1
    pos = len(tail)
    # The last record whose comment ends exactly at the end of the file: anything else is a
    # signature inside a comment or member data.
    while (pos := tail.rfind(_EOCD, 0, pos)) >= 0:
        if pos + 22 <= len(tail):
            (clen,) = struct.unpack_from("<H", tail, pos + 20)
            if pos + 22 + clen == len(tail):
                eocd_at = pos
                break
    if eocd_at < 0:
        return [], [_f("zip.eocd.missing", Severity.UNSAFE, "end of central directory",
                       "no well-formed end of central directory record")]
    eocd_abs = size - tail_len + eocd_at
    disk, cd_disk, n_disk, n_total, cd_size, cd_off, clen = struct.unpack_from("<HHHHIIH", tail, eocd_at + 4)
    comment = tail[eocd_at + 22 : eocd_at + 22 + clen]
    if any(sig in comment for sig in (_LFH, _CDH, _EOCD, _EOCD64)):
        findings.append(_f("zip.comment.hidden-archive", Severity.UNSAFE, "archive comment",
                           "the comment holds zip records"))
    elif comment:
        findings.append(_f("zip.comment", Severity.INFO, "archive comment", f"archive comment of {clen} bytes"))
    cd_end = eocd_abs
    needs64 = 0xFFFF in (n_disk, n_total) or 0xFFFFFFFF in (cd_size, cd_off)
    loc = b""
    if eocd_abs >= 20:
        reader.seek(eocd_abs - 20)
        loc = reader.read(20)
    if needs64 and loc[:4] != _EOCD64_LOC:
        return [], [_f("zip.zip64.missing", Severity.UNSAFE, "end of central directory", "zip64 locator missing")]
    # Writers such as torch.save emit zip64 end records even for small archives.
    if loc[:4] == _EOCD64_LOC:
        (rec_off,) = struct.unpack_from("<Q", loc, 8)
        reader.seek(rec_off)
        rec = reader.read(56)
        if len(rec) < 56 or rec[:4] != _EOCD64 or rec_off + 56 > eocd_abs - 20:
            return [], [_f("zip.zip64.corrupt", Severity.UNSAFE, f"offset {rec_off}", "zip64 end record is corrupt")]
        (rec_size,) = struct.unpack_from("<Q", rec, 4)
        _, _, disk, cd_disk, n_disk, n_total, cd_size, cd_off = struct.unpack_from("<HHIIQQQQ", rec, 12)
        if rec_off + 12 + rec_size != eocd_abs - 20:
            findings.append(_f("zip.gap", Severity.UNSAFE, f"offset {rec_off}", "bytes between the zip64 end records"))
        cd_end = rec_off
    if disk or cd_disk or n_disk != n_total:
        return [], [_f("zip.multi-disk", Severity.UNSAFE, "end of central directory",
                       "multi-disk archives are refused")]
    if cd_off + cd_size != cd_end:
        findings.append(
            _f("zip.gap", Severity.UNSAFE, f"offset {cd_off}",
               "central directory does not end where the end record starts")
        )
    if cd_off + cd_size > size or cd_size > budget.limits.max_header_bytes:
        return [], findings + [_f("zip.cd.bounds", Severity.UNSAFE, f"offset {cd_off}",
                                  "central directory out of bounds")]
    if n_total > budget.limits.max_members:
        return [], findings + [
            _f("container.too-many-members", Severity.UNSAFE, "central directory",
               f"{n_total} members exceed the limit")
        ]
    reader.seek(cd_off)
    cd = reader.read(cd_size)
    entries: list[ZipEntry] = []
    p = 0
    for i in range(n_total):
        if p + 46 > len(cd) or cd[p : p + 4] != _CDH:
            return [], findings + [_f("zip.cd.corrupt", Severity.UNSAFE, f"central directory entry {i}",
                                      "bad central directory record")]
        (_, _, _, flags, method, _, _, crc, csize, usize, nlen, elen, klen, _, _, _, hoff) = struct.unpack_from(
            "<IHHHHHHIIIHHHHHII", cd, p
        )
        raw = cd[p + 46 : p + 46 + nlen]
        extra = cd[p + 46 + nlen : p + 46 + nlen + elen]
        p += 46 + nlen + elen + klen
        if p > len(cd):
            return [], findings + [_f("zip.cd.corrupt", Severity.UNSAFE, f"central directory entry {i}",
                                      "record overruns the directory")]
        usize, csize, hoff = _zip64_extra(extra, usize, csize, hoff)
        name = raw.decode("utf-8" if flags & 0x0800 else "cp437", "replace")
        entries.append(ZipEntry(name, raw, flags, method, crc, csize, usize, hoff))
    if p != len(cd):
        findings.append(_f("zip.gap", Severity.UNSAFE, "central directory",
                           "bytes after the last central directory record"))
    budget.members += len(entries)
    if budget.members > budget.limits.max_members:
        return [], findings + [_f("container.too-many-members", Severity.UNSAFE, "central directory",
                                  "member limit exceeded")]

    seen: set[str] = set()
    for e in entries:
        where = f"member {e.name!r}"
        # Flag bits alone run nothing: the member is still read as a loader that ignores them
        # reads it (see open_zip_member), and what it holds decides.
        if e.flags & _ENCRYPTED:
            findings.append(
                _f("zip.encrypted", Severity.SUSPICIOUS, where,
                   "flagged as encrypted: read as stored, in case it is not")
            )
        elif e.flags & ~_ALLOWED_FLAGS:
            findings.append(_f("zip.flags", Severity.SUSPICIOUS, where,
                               f"unexpected general purpose flag bits {e.flags:#06x}"))
        if e.method not in _METHODS:
            findings.append(_f("zip.compression.unsupported", Severity.SUSPICIOUS, where,
                               f"compression method {e.method}: not inspected"))
        if _unsafe_name(e.name):
            findings.append(_f("zip.name.unsafe", Severity.UNSAFE, where,
                               "absolute, parent-relative or control-character name"))
        if e.name in seen:
            findings.append(_f("zip.name.duplicate", Severity.UNSAFE, where, "two members share a name"))
        seen.add(e.name)
        reader.seek(e.header_offset)
        lh = reader.read(30)
        if len(lh) < 30 or lh[:4] != _LFH:
            findings.append(_f("zip.local.corrupt", Severity.UNSAFE, f"{where} offset {e.header_offset}",
                               "no local header"))
            e.data_offset = e.end = -1
            continue
        _, _, lflags, lmethod, _, _, lcrc, lcs, lus, lnlen, lelen = struct.unpack_from("<IHHHHHIIIHH", lh)
        lname = reader.read(lnlen)
        if 0xFFFFFFFF in (lcs, lus):
            # A streaming reader takes the sizes from the local zip64 extra, not the central
            # directory: they must say the same thing.
            lus, lcs, _ = _zip64_extra(reader.read(lelen), lus, lcs, 0)
        if lname != e.raw_name:
            findings.append(
                _f("zip.name.mismatch", Severity.UNSAFE, f"{where} offset {e.header_offset}",
                   f"local header names {lname!r}")
            )
        if lflags != e.flags or lmethod != e.method:
            findings.append(_f("zip.local.mismatch", Severity.UNSAFE, where, "local header flags or method differ"))
        if not lflags & 0x0008 and (lcrc != e.crc or lcs != e.csize or lus != e.usize):
            findings.append(_f("zip.local.mismatch", Severity.UNSAFE, where, "local header CRC or sizes differ"))
        e.data_offset = e.header_offset + 30 + lnlen + lelen
        e.end = e.data_offset + e.csize
        if e.end > size:
            findings.append(_f("zip.bounds", Severity.UNSAFE, where, "member data runs past the end of the file"))
            e.end = -1
            continue
        if e.flags & 0x0008:
            e.end += _descriptor_len(reader, e)
    findings.extend(_check_layout(entries, cd_off))
    return entries, findings


def _zip64_extra(extra: bytes, usize: int, csize: int, hoff: int) -> tuple[int, int, int]:
    p = 0
    while p + 4 <= len(extra):
        tag, ln = struct.unpack_from("<HH", extra, p)
        body = extra[p + 4 : p + 4 + ln]
        if tag == 0x0001:
            q = 0
            if usize == 0xFFFFFFFF and q + 8 <= len(body):
                (usize,) = struct.unpack_from("<Q", body, q)
                q += 8
            if csize == 0xFFFFFFFF and q + 8 <= len(body):
                (csize,) = struct.unpack_from("<Q", body, q)
                q += 8
            if hoff == 0xFFFFFFFF and q + 8 <= len(body):
                (hoff,) = struct.unpack_from("<Q", body, q)
        p += 4 + ln
    return usize, csize, hoff


def _descriptor_len(reader: BinaryIO, e: ZipEntry) -> int:
    reader.seek(e.end)
    d = reader.read(24)
    for sig, wide in ((True, False), (True, True), (False, False), (False, True)):
        q = 4 if sig else 0
        if sig and d[:4] != _DD:
            continue
        fmt = "<IQQ" if wide else "<III"
        n = struct.calcsize(fmt)
        if len(d) < q + n:
            continue
        crc, cs, us = struct.unpack_from(fmt, d, q)
        if crc == e.crc and cs == e.csize and us == e.usize:
            return q + n
    return 0


def _check_layout(entries: list[ZipEntry], cd_off: int) -> list[Finding]:
    findings: list[Finding] = []
    spans = sorted((e.header_offset, e.end, e.name) for e in entries if e.end >= 0)
    cursor = 0
    for start, end, name in spans:
        if start < cursor:
            findings.append(_f("zip.overlap", Severity.UNSAFE, f"member {name!r} offset {start}",
                               "member overlaps the previous one"))
        elif start > cursor:
            rule = "zip.prefix-data" if cursor == 0 else "zip.gap"
            findings.append(
                _f(rule, Severity.UNSAFE, f"offset {cursor}",
                   f"{start - cursor} bytes not covered by any member (polyglot)")
            )
        cursor = max(cursor, end)
    if spans and cursor < cd_off:
        findings.append(_f("zip.gap", Severity.UNSAFE, f"offset {cursor}",
                           f"{cd_off - cursor} bytes before the central directory"))
    if spans and cursor > cd_off:
        findings.append(_f("zip.overlap", Severity.UNSAFE, f"offset {cd_off}",
                           "member data overlaps the central directory"))
    if not spans and cd_off:
        findings.append(_f("zip.prefix-data", Severity.UNSAFE, "offset 0", f"{cd_off} bytes before an empty directory"))
    return findings


def _unsafe_name(name: str) -> bool:
    if not name or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return True
    if any(ord(c) < 32 for c in name):
        return True
    return any(part == ".." for part in name.replace("\\", "/").split("/"))


def open_zip_member(
    reader: BinaryIO, e: ZipEntry, budget: ScanBudget, where: str
) -> tuple[BinaryIO | None, int, list[Finding]]:
    """Read one member, checking CRC and size while streaming; decompression is capped.

    Stored members are returned as a window over the original stream (no copy); compressed ones
    are spooled.

    Args:
        reader: the zip stream.
        e: the entry (from :func:`list_zip`).
        budget: shared bounds; decompressed bytes are charged to it.
        where: location prefix for findings.

    Returns:
        A seekable reader over the member's bytes (None when unusable), its size, and findings.
    """
    if e.end < 0 or e.method not in _METHODS:
        return None, 0, []
    member, size, findings = _read_member(reader, e, budget, where)
    if e.flags & _ENCRYPTED:
        # torch.load ignores the flag and reads the bytes as stored: they are scanned as such.
        # Ciphertext fails the CRC and size checks, which then say nothing zip.encrypted did not.
        findings = [f for f in findings if f.rule_id not in _CIPHERTEXT_RULES]
    return member, size, findings


def _read_member(reader: BinaryIO, e: ZipEntry, budget: ScanBudget, where: str) -> tuple[BinaryIO, int, list[Finding]]:
    findings: list[Finding] = []
    lim = budget.limits
    if e.method != 0 and e.usize > lim.ratio_min_bytes and e.usize > lim.max_ratio * max(e.csize, 1):
        findings.append(
            _f("container.compression-ratio", Severity.SUSPICIOUS, where, f"expands {e.usize} / {e.csize} bytes")
        )
    src = SliceReader(reader, e.data_offset, e.csize)
    crc = 0
    if e.method == 0:
        if e.csize != e.usize:
            findings.append(_f("zip.size-mismatch", Severity.UNSAFE, where, "stored member sizes differ"))
        while block := src.read(_CHUNK):
            crc = zlib.crc32(block, crc)
        findings.extend(_check_crc(crc, e, where))
        return SliceReader(reader, e.data_offset, e.csize), e.csize, findings
    is_deflate = e.method == 8
    dec = zlib.decompressobj(-15) if is_deflate else bz2.BZ2Decompressor()
    out = spool()
    total = 0
    cap = min(e.usize, budget.expand_left)
    broken = False
    try:
        pending = b""
        while True:
            if not pending:
                pending = src.read(_CHUNK)
                if not pending:
                    break
            if is_deflate:
                chunk = dec.decompress(pending, _CHUNK)
                pending = dec.unconsumed_tail  # type: ignore[union-attr]
            else:
                chunk = dec.decompress(pending, _CHUNK)
                pending = b""
                while not dec.needs_input and not dec.eof and total + len(chunk) <= cap:
                    more = dec.decompress(b"", _CHUNK)
                    if not more:
                        break
                    chunk += more
            total += len(chunk)
            if total > cap:
                break
            crc = zlib.crc32(chunk, crc)
            out.write(chunk)
            if getattr(dec, "eof", False):
                break
    except (zlib.error, OSError, EOFError, ValueError) as exc:
        broken = True
        findings.append(_f("zip.corrupt", Severity.UNSAFE, where, f"member does not decompress: {exc}"))
    budget.expanded += min(total, cap)
    if total > cap:
        if total > e.usize:
            findings.append(_f("zip.size-mismatch", Severity.UNSAFE, where,
                               f"expands past its recorded size {e.usize}"))
        else:
            budget.exhausted.add("expanded")
            findings.append(
                _f("container.bomb", Severity.UNSAFE, where,
                   f"expansion limit of {lim.max_expanded_bytes} bytes reached")
            )
        return out, out.tell(), findings
    if not broken and total != e.usize:
        findings.append(_f("zip.size-mismatch", Severity.UNSAFE, where, f"expands to {total}, recorded {e.usize}"))
    elif not broken:
        findings.extend(_check_crc(crc, e, where))
    size = out.tell()
    out.seek(0)
    return out, size, findings


def _check_crc(crc: int, e: ZipEntry, where: str) -> list[Finding]:
    if crc == e.crc:
        return []
    if e.crc == 0:
        # torch.save with config.save.compute_crc32 = False records 0 for every member. The bytes
        # scanned are the bytes every reader reads, so a CRC left out hides nothing.
        return [_f("zip.crc.not-recorded", Severity.INFO, where, "no CRC-32 recorded (0)")]
    return [_f("zip.crc", Severity.UNSAFE, where, f"CRC-32 {crc:#010x} != recorded {e.crc:#010x}")]


def scan_zip(
    reader: BinaryIO,
    size: int,
    budget: ScanBudget,
    visit: Visit,
    *,
    raw_member: Callable[[str], bool] = lambda name: False,
) -> list[Finding]:
    """Check a zip strictly and visit each member.

    Args:
        reader: seekable stream holding the zip.
        size: its size.
        budget: shared bounds.
        visit: called with ``(member name, reader, size)`` for each member whose bytes should be
            scanned; returns that member's findings (already located).
        raw_member: names whose bytes are checked (CRC) but not scanned (PyTorch ``data/*``).

    Returns:
        Structural findings plus the members' findings.
    """
    entries, findings = list_zip(reader, size, budget)
    return findings + visit_zip_entries(reader, entries, budget, visit, raw_member=raw_member)


def visit_zip_entries(
    reader: BinaryIO,
    entries: list[ZipEntry],
    budget: ScanBudget,
    visit: Visit,
    *,
    raw_member: Callable[[str], bool] = lambda name: False,
) -> list[Finding]:
    """Stream each listed member (CRC and size checked) and visit it.

    Args:
        reader: the zip stream.
        entries: from :func:`list_zip`.
        budget: shared bounds.
        visit: member callback, as for :func:`scan_zip`.
        raw_member: names whose bytes are checked but not scanned.

    Returns:
        Findings from reading and visiting the members.
    """
    findings: list[Finding] = []
    for e in entries:
        if e.name.endswith("/") and e.usize == 0:
            continue
        member, msize, more = open_zip_member(reader, e, budget, e.name)
        findings.extend(more)
        if member is None:
            continue
        try:
            if not raw_member(e.name):
                member.seek(0)
                findings.extend(visit(e.name, member, msize))
        finally:
            member.close()
    return findings


# --- compressed streams -------------------------------------------------------------------------


def decompress_stream(kind: str, reader: BinaryIO, budget: ScanBudget) -> tuple[BinaryIO, int, list[Finding]]:
    """Decompress a gzip, bz2, xz, zlib or legacy lzma stream into a spooled file, under the expansion budget.

    What decompressed before an error is kept and returned: a loader would have consumed it.

    Args:
        kind: ``gzip``, ``bz2``, ``xz``, ``zlib`` or ``lzma``.
        reader: the compressed stream, positioned at its start.
        budget: shared bounds; decompressed bytes are charged to it.

    Returns:
        The decompressed bytes (positioned at 0), their size, and findings.
    """
    findings: list[Finding] = []
    out = spool()
    lim = budget.limits
    cap = budget.expand_left
    total = 0
    src = _Streams(kind, reader)
    try:
        for block in src:
            total += len(block)
            if total > cap:
                out.write(block[: len(block) - (total - cap)])
                budget.exhausted.add("expanded")
                findings.append(
                    _f("container.bomb", Severity.UNSAFE, f"{kind} stream",
                       f"expansion limit of {lim.max_expanded_bytes} bytes reached")
                )
                total = cap
                break
            out.write(block)
            if total > lim.ratio_min_bytes and total > lim.max_ratio * max(src.consumed, 1):
                # A bomb is refused before it fills the disk; what was not expanded was not scanned.
                findings.append(
                    _f(
                        "container.compression-ratio", Severity.SUSPICIOUS, f"{kind} stream",
                        f"{src.consumed} bytes expand past {total}: not expanded further, the rest is not inspected",
                    )
                )
                break
        else:
            if src.trailing_at is not None:
                findings.append(
                    _f(
                        "container.trailing-data", Severity.SUSPICIOUS, f"{kind} stream offset {src.trailing_at}",
                        "bytes after the last compressed stream are neither a stream nor padding: hidden data",
                    )
                )
    except (OSError, EOFError, lzma.LZMAError, zlib.error, ValueError) as exc:
        findings.append(_f("container.corrupt", Severity.UNSAFE, f"{kind} stream offset {total}",
                           f"does not decompress: {exc}"))
    budget.expanded += total
    size = out.tell()
    out.seek(0)
    return out, size, findings


_STREAM_MAGIC = {"gzip": b"\x1f\x8b", "bz2": b"BZh", "xz": b"\xfd7zXZ\x00", "zlib": b"\x78", "lzma": b"\x5d"}


class _Streams:
    """Every concatenated stream of a gzip, bz2 or xz file, decompressed block by block.

    Readers differ on what follows a stream: gzip readers go on to the next member and skip zero
    padding, bz2 and xz readers silently drop anything that is not a valid stream. So the next
    stream is followed here too, and bytes that are neither a stream nor zero padding are
    reported (``trailing_at``) instead of being dropped.
    """

    def __init__(self, kind: str, reader: BinaryIO) -> None:
        self.kind = kind
        self.reader = reader
        self.consumed = 0
        self.trailing_at: int | None = None

    def _read(self) -> bytes:
        data = self.reader.read(_CHUNK)
        self.consumed += len(data)
        return data

    def _new(self) -> Any:
        if self.kind == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        if self.kind == "bz2":
            return bz2.BZ2Decompressor()
        if self.kind == "zlib":
            return zlib.decompressobj()
        if self.kind == "lzma":
            # The header names the dictionary size: bounded, so a hostile one fails instead of allocating.
            return lzma.LZMADecompressor(format=lzma.FORMAT_ALONE, memlimit=1 << 30)
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ)

    def __iter__(self) -> Iterator[bytes]:
        buf = self._read()
        magic = _STREAM_MAGIC[self.kind]
        while True:
            dec = self._new()
            # zlib keeps unread input in unconsumed_tail; bz2 and lzma buffer it internally.
            while not dec.eof:
                if self.kind in ("gzip", "zlib"):
                    if not buf:
                        buf = self._read()
                        if not buf:
                            raise EOFError("compressed stream ends before its end marker")
                    block = dec.decompress(buf, _CHUNK)
                    buf = dec.unconsumed_tail
                else:
                    if dec.needs_input:
                        if not buf:
                            buf = self._read()
                            if not buf:
                                raise EOFError("compressed stream ends before its end marker")
                        block = dec.decompress(buf, _CHUNK)
                        buf = b""
                    else:
                        block = dec.decompress(b"", _CHUNK)
                if block:
                    yield block
            buf = dec.unused_data + buf
            # Zero padding between or after streams is what writers emit and readers skip.
            while True:
                stripped = buf.lstrip(b"\x00")
                if stripped:
                    buf = stripped
                    break
                buf = self._read()
                if not buf:
                    return
            if len(buf) < len(magic):
                buf += self._read()
            if not buf.startswith(magic):
                self.trailing_at = self.consumed - len(buf)
                return


# --- tar -----------------------------------------------------------------------------------------


def scan_tar(reader: BinaryIO, size: int, budget: ScanBudget, visit: Visit) -> list[Finding]:
    """Walk a tar archive (uncompressed: compression layers are peeled by the engine).

    Args:
        reader: seekable stream holding the tar.
        size: its size.
        budget: shared bounds.
        visit: member callback, as for :func:`scan_zip`.

    Returns:
        Findings for the archive and its members.
    """
    findings: list[Finding] = []
    reader.seek(0)
    try:
        tf = tarfile.open(fileobj=SliceReader(reader, 0, size), mode="r:")  # type: ignore[arg-type]
    except (tarfile.TarError, OSError, EOFError) as exc:
        return [_f("tar.corrupt", Severity.UNSAFE, "offset 0", f"not a readable tar: {exc}")]
    with tf:
        while True:
            try:
                m = tf.next()
            except (tarfile.TarError, OSError, EOFError, UnicodeError) as exc:
                findings.append(_f("tar.corrupt", Severity.UNSAFE, "archive", f"tar does not parse: {exc}"))
                break
            if m is None:
                break
            if not budget.take_member():
                findings.append(_f("container.too-many-members", Severity.UNSAFE, "archive", "member limit exceeded"))
                break
            where = f"member {m.name!r}"
            if _unsafe_name(m.name):
                findings.append(_f("tar.name.unsafe", Severity.UNSAFE, where, "absolute or parent-relative name"))
            if m.issym() or m.islnk():
                findings.append(_f("tar.member.link", Severity.SUSPICIOUS, where, f"link to {m.linkname!r}"))
                continue
            if m.isdir():
                continue
            if not m.isfile() or m.issparse():
                findings.append(_f("tar.member.special", Severity.SUSPICIOUS, where, "device, fifo or sparse member"))
                continue
            if m.offset_data + m.size > size:
                findings.append(_f("tar.bounds", Severity.UNSAFE, where, "member runs past the end of the archive"))
                continue
            findings.extend(visit(m.name, SliceReader(reader, m.offset_data, m.size), m.size))  # type: ignore[arg-type]
        end = tf.offset
    findings.extend(_tar_tail(reader, end, size))
    return findings


def _tar_tail(reader: BinaryIO, end: int, size: int) -> list[Finding]:
    """After the end-of-archive marker only zero blocks may follow.

    Python's tarfile stops at the first zero block, and also at the first bad header after
    the first member, while GNU tar skips bad headers (and, with ``-i``, zero blocks) and
    goes on extracting: members hidden there are extracted by one and never seen by the other.
    """
    reader.seek(end)
    pos = end
    while pos < size:
        block = reader.read(min(_CHUNK, size - pos))
        if not block:
            break
        stripped = block.lstrip(b"\x00")
        if stripped:
            at = pos + len(block) - len(stripped)
            return [
                _f("tar.trailing-data", Severity.UNSAFE, f"offset {at}",
                   f"{size - at} bytes after the end of the archive are not padding")
            ]
        pos += len(block)
    return []
