"""Serialization safety scanning: decide from the bytes whether a model file can run code.

The engine sniffs each file's format, interprets pickles opcode by opcode against an allow-list,
opens containers strictly and under bounds, and hands the "safe" formats to their validators.
Every file gets a :class:`FileScan` with a verdict and located findings with stable rule ids.
Results may be cached by ``(blob sha256, SCANNER_NAME, SCANNER_VERSION)``.

Example:
    >>> import io, pickle
    >>> data = pickle.dumps({"layers": [1, 2]})
    >>> scan_stream("weights.bin", io.BytesIO(data), len(data)).verdict.value
    'safe'
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from registry.scanning.containers import ScanLimits
from registry.scanning.engine import PATH_DEPENDENT_FORMATS, SCANNER_NAME, SCANNER_VERSION, Engine, scan_key
from registry.scanning.model import FileScan, Finding, ScanContext, Severity, Verdict

__all__ = [
    "PATH_DEPENDENT_FORMATS",
    "SCANNER_NAME",
    "SCANNER_VERSION",
    "FileScan",
    "Finding",
    "ScanContext",
    "ScanLimits",
    "Severity",
    "Verdict",
    "scan_directory",
    "scan_file",
    "scan_key",
    "scan_stream",
]


def scan_stream(
    path: str,
    reader: BinaryIO,
    size: int,
    *,
    siblings: frozenset[str] = frozenset(),
    limits: ScanLimits = ScanLimits(),
) -> FileScan:
    """Scan one file given as a seekable stream.

    Args:
        path: the file's path within its version (used for locations and remote-code rules,
            never to decide the format).
        reader: seekable binary stream holding the file.
        size: the file's size in bytes.
        siblings: paths of the other files of the same version.
        limits: bounds on nesting, members and decompressed bytes.

    Returns:
        The scan: format, verdict and findings.
    """
    return Engine(limits, siblings).scan(path, reader, size)


def scan_file(path: Path, name: str | None = None, *, limits: ScanLimits = ScanLimits()) -> FileScan:
    """Scan one file on disk.

    Args:
        path: the file.
        name: the path to report (defaults to the file's name).
        limits: bounds on nesting, members and decompressed bytes.

    Returns:
        The scan.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        return scan_stream(name or path.name, f, size, limits=limits)


def scan_directory(root: Path, *, limits: ScanLimits = ScanLimits()) -> list[FileScan]:
    """Scan every file under ``root``, named by relative POSIX path, each knowing its siblings.

    Symbolic links are not followed: a link is reported instead, since a version holds files only.

    Args:
        root: the directory.
        limits: bounds applied to each file.

    Returns:
        One scan per file, sorted by name.
    """
    entries: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for fn in filenames:
            p = Path(dirpath) / fn
            entries.append((p.relative_to(root).as_posix(), p))
    entries.sort()
    names = frozenset(n for n, _ in entries)
    scans: list[FileScan] = []
    for name, p in entries:
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode):
            scans.append(
                FileScan(
                    name, "link",
                    [Finding("file.not-regular", Severity.SUSPICIOUS, name,
                             "symbolic link or special file: not followed")],
                    SCANNER_NAME, SCANNER_VERSION,
                )
            )
            continue
        with open(p, "rb") as f:
            scans.append(scan_stream(name, f, st.st_size, siblings=names - {name}, limits=limits))
    return scans
