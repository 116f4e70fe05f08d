"""The scanning engine: sniff, dispatch, recurse into containers, under bounds.

One :class:`Engine` scans one top-level file. It decides the format from the bytes
(:mod:`registry.scanning.sniff`), hands the stream to the scanner for that format, and opens
containers (zip, tar, gzip, bz2, xz, zlib, legacy lzma) to scan their members with the same rules, up to
:class:`ScanLimits`. The file's name never decides its format, but it does decide which loader opens it
(:mod:`registry.scanning.loaders`): bytes that loader would not accept are a finding, and bytes it would
hand to ``pickle.load`` are interpreted as a pickle. Validators (``safetensors``, ``gguf``, ``onnx``,
``keras``, ``savedmodel``, ``msgpack``, ``remote_code``) are imported lazily; one that fails to import or
raises makes the file's verdict ``error``, never an empty list of findings.

Every finding of a nested stream is located by its member chain (``outer.zip!inner.pkl: offset
12 opcode GLOBAL global os.system``), so each verdict explains itself.
"""

from __future__ import annotations

import importlib
import io
import posixpath
import struct
from collections.abc import Callable
from types import ModuleType
from typing import BinaryIO

from registry.scanning import numpy_scan, pickle_scan
from registry.scanning.containers import (
    ScanBudget,
    ScanLimits,
    SliceReader,
    ZipEntry,
    decompress_stream,
    list_zip,
    scan_tar,
    visit_zip_entries,
)
from registry.scanning.loaders import PICKLES, LoaderRule, rule_for
from registry.scanning.model import FileScan, Finding, ScanContext, Severity
from registry.scanning.sniff import HEAD_BYTES, UNINSPECTABLE, is_tar, sniff

SCANNER_NAME = "modelreg"
SCANNER_VERSION = "1.5.0"
"""Bump whenever a rule changes: results are cached by (blob sha256, scanner name, version)."""

REMOTE_CODE_NAMES = frozenset({"config.json", "tokenizer_config.json"})

# What pickle.load does with bytes that are no pickle: fail before anything it resolves could run.
_INERT_PICKLE_RULES = frozenset(
    {
        "pickle.parse.error", "pickle.stream.truncated", "pickle.opcode.unknown", "pickle.stream.no-stop",
        "pickle.stream.trailing-data", "pickle.global.extension", "pickle.global.malformed", "pickle.global.unresolved",
        "pickle.buffer.out-of-band",
    }
)
_EXTERNAL = {"safetensors": "safetensors", "gguf": "gguf", "onnx": "onnx", "hdf5": "keras", "keras": "keras"}


def _validator(name: str) -> ModuleType:
    """Import ``registry.scanning.<name>`` (cached by Python's import system).

    Raises:
        Exception: whatever the import raised; callers turn it into an ``error`` finding.
    """
    return importlib.import_module(f"registry.scanning.{name}")


def _hdf5_user_block_offset(reader: BinaryIO, size: int, head_len: int) -> int | None:
    """The offset (512, 1024, ...) of an HDF5 signature behind a user block, or None."""
    from registry.scanning.sniff import HDF5_MAGIC

    offset = 512
    while offset + len(HDF5_MAGIC) <= size:
        reader.seek(offset)
        if reader.read(len(HDF5_MAGIC)) == HDF5_MAGIC:
            reader.seek(0)
            return offset
        offset *= 2
    reader.seek(0)
    return None


def _remote_code_applies(name: str) -> bool:
    """Whether the remote-code checks (code files, auto_map, chat templates) apply to this name."""
    try:
        return bool(_validator("remote_code").handles(name))
    except Exception:  # noqa: BLE001 - the scan itself reports the broken module
        base = posixpath.basename(name)
        return base in REMOTE_CODE_NAMES or base.endswith(".py")


PATH_DEPENDENT_FORMATS = frozenset({"onnx"})
"""Formats whose check reads the file's directory and siblings (ONNX external data is relative to the model),
whatever the file is called: a scan of such bytes holds for its own path only."""


def scan_key(path: str) -> str:
    """What a scan reads of a file's path: the same bytes under paths with equal keys get the same scan.

    The engine reads a name for the loader it selects (:func:`registry.scanning.loaders.rule_for`), by its
    extension and, once a compressed stream is opened, by the inner ones (``model.pkl.gz``): most files
    are keyed by those loaders, so ``a.pt`` and ``b/c.pth`` share a key and ``d.bin`` does not. Names a
    check reads further keep more: a validator's (``saved_model.pb``) its base name; configuration, code
    and ONNX files, whose checks resolve references against the file's directory and siblings, the
    whole path. The scan of bytes in :data:`PATH_DEPENDENT_FORMATS` holds for its own path only,
    whatever the key.

    Example:
        >>> scan_key("a/model-00001-of-00002.safetensors") == scan_key("b/model.sft")
        True
        >>> scan_key("config.json")
        'path:config.json'
    """
    base = posixpath.basename(path).lower()
    rules, stem = [rule_for(base)], base
    while True:
        stem, ext = posixpath.splitext(stem)
        if not ext:
            break
        rules.append(rule_for(stem))
    if _remote_code_applies(path) or any(r is not None and r.accepts & PATH_DEPENDENT_FORMATS for r in rules):
        return f"path:{path}"
    if any(r is not None and r.validator is not None for r in rules):
        return f"name:{base}"
    return "loaders:" + "|".join(_rule_id(r) for r in rules)


def _rule_id(rule: LoaderRule | None) -> str:
    if rule is None:
        return "-"
    inner = f">{_rule_id(rule.inner)}" if rule.inner is not None else ""
    return f"{rule.loader}[{','.join(sorted(rule.accepts))}]{'+pickle' if rule.unpickles else ''}{inner}"


def _relocate(findings: list[Finding], prefix: str) -> list[Finding]:
    if not prefix:
        return findings
    out = []
    for f in findings:
        if f.location.startswith((f"{prefix}: ", f"{prefix}!")) or f.location == prefix:
            out.append(f)
        else:
            loc = f"{prefix}: {f.location}" if f.location else prefix
            out.append(Finding(f.rule_id, f.severity, loc, f.message))
    return out


class Engine:
    """Scans one top-level stream; holds the budget shared by everything nested in it.

    Args:
        limits: bounds for this scan.
        siblings: paths of the other files of the same directory/version.
    """

    def __init__(self, limits: ScanLimits | None = None, siblings: frozenset[str] = frozenset()) -> None:
        self.limits = limits or ScanLimits()
        self.budget = ScanBudget(self.limits)
        self.siblings = siblings

    def scan(self, path: str, reader: BinaryIO, size: int) -> FileScan:
        """Scan one top-level stream.

        Args:
            path: the file's path within its version or directory.
            reader: seekable stream positioned anywhere.
            size: its size in bytes.

        Returns:
            The file's scan, with this scanner's name and version.
        """
        fmt, findings = self._scan(path, path, "", reader, size, 0, rule_for(path))
        if fmt not in ("zip", "pytorch-zip", "keras", "npz", "empty"):
            try:
                findings.extend(self._zip_trailer(reader, size, path))
            except Exception as exc:  # noqa: BLE001 - a crashing check must fail closed, not pass
                findings.append(Finding("engine.scanner-error", Severity.ERROR, "",
                                        f"zip trailer check failed: {exc!r}"))
        return FileScan(path, fmt, findings, SCANNER_NAME, SCANNER_VERSION)

    # -- dispatch

    def _scan(
        self, name: str, ctx_path: str, chain: str, reader: BinaryIO, size: int, depth: int, rule: LoaderRule | None
    ) -> tuple[str, list[Finding]]:
        """Scan a stream at ``chain`` (member path inside the top-level file, "" at top level).

        ``rule`` says how the loader its name selects reads it (None: no loader opens it by name).
        """
        members: list[Finding] = []
        own: list[Finding] = []
        fmt = "unknown"
        try:
            fmt = self._scan_bytes(name, ctx_path, chain, reader, size, depth, rule, own, members)
        except Exception as exc:  # noqa: BLE001 - a crashing scanner must fail closed, not pass
            own.append(Finding("engine.scanner-error", Severity.ERROR, "",
                               f"{fmt} scanner failed: {type(exc).__name__}: {exc}"))
        return fmt, _relocate(own, chain) + members

    def _scan_bytes(
        self,
        name: str,
        ctx_path: str,
        chain: str,
        reader: BinaryIO,
        size: int,
        depth: int,
        rule: LoaderRule | None,
        own: list[Finding],
        members: list[Finding],
    ) -> str:
        reader.seek(0)
        head = reader.read(min(HEAD_BYTES, size))
        reader.seek(0)
        fmt = sniff(head, size, reader)
        try:
            fmt = self._dispatch(fmt, name, ctx_path, chain, reader, size, depth, own, members, rule)
        except Exception as exc:  # noqa: BLE001 - a crashing scanner must fail closed, not pass
            own.append(Finding("engine.scanner-error", Severity.ERROR, "",
                               f"{fmt} scanner failed: {type(exc).__name__}: {exc}"))
        unpickled = fmt in PICKLES
        if fmt not in ("pickle", "pytorch-legacy", "empty") and pickle_scan.probe_pickle(head, reader, size):
            # A polyglot: the bytes that make it a tar (or another format) are also a pickle that
            # pickle.load would run. The first magic found must not hide the second reading.
            own.append(Finding("polyglot.pickle", Severity.SUSPICIOUS, "offset 0",
                               f"a {fmt} whose first bytes are also a pickle"))
            res = pickle_scan.scan_pickle_file(reader, size, nested=self._nested_pickle(ctx_path, chain, depth))
            own.extend(f for f in res.findings if f.rule_id != "pickle.stream.trailing-data")
            unpickled = True
        if fmt != "tar" and is_tar(head):
            # A first block that is also a tar header: torch.load's legacy loader opens any such
            # file with tarfile and unpickles its members, whatever the magic at offset 0 says.
            own.append(Finding("polyglot.tar", Severity.SUSPICIOUS, "offset 0",
                               f"a {fmt} whose first block is also a tar header"))
            own.extend(scan_tar(reader, size, self.budget, self._visitor(ctx_path, chain, depth, members)))
            reader.seek(0)
        if fmt != "hdf5":
            offset = _hdf5_user_block_offset(reader, size, len(head))
            if offset is not None:
                # HDF5 readers search past a user block of any power-of-two size, so the bytes in
                # front (a pickle, JSON, anything) must not hide a Keras model behind them.
                own.append(Finding("polyglot.hdf5", Severity.SUSPICIOUS, f"offset {offset}",
                                   f"a {fmt} with an HDF5 file behind a {offset}-byte user block"))
                own.extend(self._external("keras", reader, size, ctx_path, chain, depth))
        if _remote_code_applies(name):
            own.extend(self._external("remote_code", reader, size, ctx_path, chain, depth))
        if rule is not None:
            fmt = self._as_named(rule, fmt, unpickled, ctx_path, chain, reader, size, depth, own)
        return fmt

    def _as_named(
        self, rule: LoaderRule, fmt: str, unpickled: bool, ctx_path: str, chain: str, reader: BinaryIO, size: int,
        depth: int, own: list[Finding],
    ) -> str:
        """Read the stream as the loader its name selects would (see :mod:`registry.scanning.loaders`)."""
        if rule.validator is not None:
            # That loader has its own parser (a protobuf, MessagePack): run it whatever the bytes sniff as.
            own.extend(self._external(rule.validator, reader, size, ctx_path, chain, depth))
            return rule.validator if fmt == "unknown" else fmt
        if fmt in rule.accepts:
            return fmt
        own.append(
            Finding(
                "name.format-mismatch", Severity.SUSPICIOUS, "offset 0",
                f"named for {rule.loader}, which reads {', '.join(sorted(rule.accepts))}; the bytes are {fmt}",
            )
        )
        if rule.unpickles and not unpickled:
            # The loader hands what it does not recognize to pickle.load: whatever our sniffer thought of
            # the bytes, the unpickler decides what runs. Bytes it refuses before doing anything that can
            # succeed (a parse error, an unregistered extension code, a global that is no identifier)
            # run nothing; anything more is reported as the pickle it is.
            res = pickle_scan.scan_pickle_file(reader, size, nested=self._nested_pickle(ctx_path, chain, depth))
            # Our own bounds ("refused") are no proof that pickle.load stops there.
            if any(f.severity is not Severity.INFO and (f.rule_id not in _INERT_PICKLE_RULES or "refused" in f.message)
                   for f in res.findings):
                own.extend(res.findings)
        return fmt

    def _dispatch(
        self,
        fmt: str,
        name: str,
        ctx_path: str,
        chain: str,
        reader: BinaryIO,
        size: int,
        depth: int,
        own: list[Finding],
        members: list[Finding],
        rule: LoaderRule | None,
    ) -> str:
        if fmt == "pickle":
            res = pickle_scan.scan_pickle_file(reader, size, nested=self._nested_pickle(ctx_path, chain, depth))
            own.extend(res.findings)
            return res.format
        if fmt == "npy":
            own.extend(numpy_scan.scan_npy(reader, size, nested=self._nested_pickle(ctx_path, chain, depth)))
            return fmt
        if fmt == "zip":
            return self._zip(ctx_path, chain, reader, size, depth, own, members)
        if fmt == "tar":
            own.extend(scan_tar(reader, size, self.budget, self._visitor(ctx_path, chain, depth, members)))
            return fmt
        if fmt in ("gzip", "bz2", "xz", "zlib", "lzma"):
            inner, inner_size, found = decompress_stream(fmt, reader, self.budget)
            own.extend(found)
            with inner:
                inner_name = posixpath.splitext(posixpath.basename(name))[0] or "data"
                # joblib.load decompresses, then unpickles; "model.pkl.gz" is opened by what its inner name says.
                unpacked_by_loader = rule is not None and rule.inner is not None and fmt in rule.accepts
                inner_rule = rule.inner if unpacked_by_loader else rule_for(inner_name)  # type: ignore[union-attr]
                visit = self._visitor(ctx_path, chain, depth, members, lambda _member: inner_rule)
                own.extend(visit(f"<{fmt}:{inner_name}>", inner, inner_size))
            return fmt
        if fmt in UNINSPECTABLE.values():
            own.append(
                Finding("container.uninspectable", Severity.SUSPICIOUS, "offset 0",
                        f"{fmt} archive: its content cannot be inspected")
            )
            return fmt
        if fmt in _EXTERNAL:
            own.extend(self._external(_EXTERNAL[fmt], reader, size, ctx_path, chain, depth))
            return fmt
        if fmt == "executable":
            own.append(Finding("format.executable", Severity.SUSPICIOUS, "offset 0",
                               "a native program: running it runs its code"))
            return fmt
        if fmt == "unknown":
            own.append(Finding("format.unknown", Severity.INFO, "offset 0",
                               "no known structure: treated as opaque data"))
        return fmt

    def _zip(
        self, ctx_path: str, chain: str, reader: BinaryIO, size: int, depth: int, own: list[Finding],
        members: list[Finding]
    ) -> str:
        entries, found = list_zip(reader, size, self.budget)
        own.extend(found)
        names = [e.name for e in entries]
        kind = _zip_kind(names)
        visit = self._visitor(ctx_path, chain, depth, members)
        if kind == "keras":
            # The Keras validator reads the archive itself (config, then members via scan_nested);
            # the member streams are still read here so CRCs and sizes are checked.
            own.extend(visit_zip_entries(reader, entries, self.budget, lambda n, r, s: [], raw_member=lambda n: True))
            own.extend(self._external("keras", reader, size, ctx_path, chain, depth))
            return kind
        if kind == "pytorch-zip":
            own.extend(self._pytorch_zip(entries, reader, visit, ctx_path, chain, depth, members))
            return kind
        own.extend(visit_zip_entries(reader, entries, self.budget, visit))
        return kind

    def _pytorch_zip(
        self,
        entries: list[ZipEntry],
        reader: BinaryIO,
        visit: Callable[[str, BinaryIO, int], list[Finding]],
        ctx_path: str,
        chain: str,
        depth: int,
        members: list[Finding],
    ) -> list[Finding]:
        names = [e.name for e in entries]
        # torch.jit.save archives: records and code/ that torch.jit.load compiles (reported as code).
        torchscript = any(n.endswith("/constants.pkl") for n in names) and any("/code/" in n for n in names)

        def visit_member(member: str, r: BinaryIO, s: int) -> list[Finding]:
            if not member.endswith(".pkl"):
                return visit(member, r, s)
            # torch.load unpickles every *.pkl record by name, whatever its bytes look like.
            sub = f"{chain}!{member}" if chain else member
            res = pickle_scan.scan_pickle_file(
                r, s, nested=self._nested_pickle(f"{ctx_path}!{member}", sub, depth + 1), torchscript=torchscript
            )
            members.extend(_relocate(res.findings, sub))
            return []

        def raw(member: str) -> bool:
            # Tensor storages: raw bytes torch maps into memory, never unpickled.
            parts = member.split("/")
            return len(parts) >= 3 and parts[-2] == "data" and parts[-1].isdigit()

        return visit_zip_entries(reader, entries, self.budget, visit_member, raw_member=raw)

    def _visitor(
        self, ctx_path: str, chain: str, depth: int, sink: list[Finding],
        rule_of: Callable[[str], LoaderRule | None] = rule_for,
    ) -> Callable[[str, BinaryIO, int], list[Finding]]:
        """A member callback: scans the member and puts its (located) findings in ``sink``.

        ``rule_of`` gives the loader rule of a member from its name (an extracted ``model.pt`` is opened
        by ``torch.load`` like any other).
        """

        def visit(member: str, r: BinaryIO, s: int) -> list[Finding]:
            sub = f"{chain}!{member}" if chain else member
            if depth + 1 > self.limits.max_depth:
                sink.append(Finding("container.too-deep", Severity.UNSAFE, sub,
                                    f"nested deeper than {self.limits.max_depth}: not inspected"))
                return []
            fmt, found = self._scan(member, f"{ctx_path}!{member}", sub, r, s, depth + 1, rule_of(member))
            sink.append(Finding("container.member", Severity.INFO, sub, f"{fmt}, {s} bytes"))
            sink.extend(found)
            return []

        return visit

    def _nested_pickle(self, ctx_path: str, chain: str, depth: int) -> pickle_scan.NestedScanner:
        """Bytes handed to a loader inside a pickle are scanned with the whole engine."""

        def nested(loc: str, data: bytes) -> list[Finding]:
            sub = f"{chain}!{loc.rstrip(': ')}" if chain else loc.rstrip(": ")
            if depth + 1 > self.limits.max_depth:
                return [Finding("container.too-deep", Severity.UNSAFE, sub, "nested pickle too deep: not inspected")]
            fmt, found = self._scan("<nested>", f"{ctx_path}!<nested>", sub, io.BytesIO(data), len(data),
                                    depth + 1, None)
            info = Finding("pickle.nested", Severity.INFO, sub, f"nested {fmt} of {len(data)} bytes")
            # The chain of nested findings already starts with the member chain; drop it so the
            # pickle scanner's own relocation does not repeat it.
            return [info, *_strip(found, chain)]

        return nested

    def _external(self, module: str, reader: BinaryIO, size: int, ctx_path: str, chain: str,
                  depth: int) -> list[Finding]:
        try:
            mod = _validator(module)
        except Exception as exc:  # noqa: BLE001 - a validator that cannot run decides nothing: fail closed
            why = f"cannot import: {type(exc).__name__}: {exc}"
            return [Finding(f"{module}.scanner-unavailable", Severity.ERROR, "", why)]
        nested_found: list[Finding] = []

        def scan_nested(member: str, r: BinaryIO, s: int) -> list[Finding]:
            sink: list[Finding] = []
            self._visitor(ctx_path, chain, depth, sink)(member, r, s)
            nested_found.extend(sink)
            return sink

        reader.seek(0)
        ctx = ScanContext(path=ctx_path, depth=depth, scan_nested=scan_nested, siblings=self.siblings)
        try:
            found = list(mod.scan(reader, size, ctx))
        except Exception as exc:  # noqa: BLE001 - a crashing validator must fail closed
            found = [Finding(f"{module}.scanner-error", Severity.ERROR, "", f"{type(exc).__name__}: {exc}")]
        # Findings a validator passes on from scan_nested are already located: keep each once.
        ids = {id(f) for f in nested_found}
        return [f for f in found if id(f) not in ids] + nested_found

    def _zip_trailer(self, reader: BinaryIO, size: int, path: str) -> list[Finding]:
        """A zip central directory at the end of a non-zip file: a polyglot zip readers will open.

        The zip that zip readers see (from the offset its directory implies to the end) is scanned
        like any other, so what it holds decides too: a Keras archive hidden in a tensor is read
        by ``keras.saving.load_model`` and must be judged as one.
        """
        if size < 22:
            return []
        tail_len = min(size, 22 + 65535)
        reader.seek(size - tail_len)
        tail = reader.read(tail_len)
        # Python's zipfile (keras.saving, zipfile.is_zipfile) takes the last end record in the final
        # 64 KiB whatever follows it, so bytes after the record (its comment length lying) do not
        # hide the zip from it and must not hide it from this check either.
        pos = tail.rfind(b"PK\x05\x06")
        if pos < 0 or pos + 22 > len(tail):
            return []
        _, _, _, n, cd_size, cd_off, clen = struct.unpack_from("<HHHHIIH", tail, pos + 4)
        eocd_abs = size - tail_len + pos
        end_of_cd = eocd_abs
        if eocd_abs >= 20:
            reader.seek(eocd_abs - 20)
            loc = reader.read(20)
            if loc[:4] == b"PK\x06\x07":
                # zip64: sizes and offsets come from the zip64 end record, which sits before its locator.
                (rec_off,) = struct.unpack_from("<Q", loc, 8)
                reader.seek(eocd_abs - 20 - 56)
                rec = reader.read(56)
                if len(rec) == 56 and rec[:4] == b"PK\x06\x06":
                    _, _, _, _, _, n, cd_size, cd_off = struct.unpack_from("<HHIIQQQQ", rec, 12)
                    end_of_cd = eocd_abs - 20 - 56
        # Zip readers accept a prefix of any length (they correct offsets by it), as here.
        shift = end_of_cd - (cd_off + cd_size)
        if shift < 0 or n == 0:
            return []
        cd_off += shift
        reader.seek(cd_off)
        if reader.read(4) != b"PK\x01\x02":
            return []
        if pos + 22 + clen != len(tail):
            reader.seek(0)
            hidden = SliceReader(reader, shift, size - shift)
            _fmt, inner = self._scan(path, path, f"zip@{shift}", hidden, size - shift, 1, None)
            reader.seek(0)
            return [
                Finding(
                    "polyglot.zip-trailer", Severity.UNSAFE, f"offset {eocd_abs}",
                    "a zip end record followed by bytes its comment length does not cover: "
                    "Python's zipfile opens it, strict readers do not",
                )
            ] + inner
        found = [
            Finding(
                "polyglot.zip-trailer", Severity.SUSPICIOUS, f"offset {cd_off}",
                "file ends with a zip central directory: zip readers see a different file",
            )
        ]
        hidden = SliceReader(reader, shift, size - shift)
        _fmt, inner = self._scan(path, path, f"zip@{shift}", hidden, size - shift, 1, None)
        reader.seek(0)
        return found + inner


def _strip(findings: list[Finding], chain: str) -> list[Finding]:
    if not chain:
        return findings
    p = f"{chain}: "
    out = []
    for f in findings:
        loc = f.location
        if loc.startswith(p):
            loc = loc[len(p):]
        elif loc.startswith(f"{chain}!"):
            loc = loc[len(chain) + 1 :]
        out.append(Finding(f.rule_id, f.severity, loc, f.message))
    return out


def _zip_kind(names: list[str]) -> str:
    if any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
        return "pytorch-zip"
    roots = {n for n in names if "/" not in n}
    if "config.json" in roots and ({"metadata.json", "model.weights.h5", "model.weights.npz"} & roots):
        return "keras"
    if names and all(n.endswith(".npy") for n in names):
        return "npz"
    return "zip"
