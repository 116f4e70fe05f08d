"""The repository's Python sources read and parsed once per test process, for the structure tests.

Six structure tests (names, layering, authorization, docs paths, doctests, the lifecycle table) each
walk the tree; parsing it once per worker instead of once per test saves most of their time. Only files of
this repository are cached (a tree a test builds under ``tmp_path`` is read afresh every time), keyed by
path, size and modification time.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def text(path: Path) -> str:
    """The file's text."""
    if not _in_repository(path):
        return path.read_text()
    stat = path.stat()
    return _read(str(path), stat.st_size, stat.st_mtime_ns)


def tree(path: Path) -> ast.Module:
    """The file's syntax tree. Callers must not change the tree they get (it is shared)."""
    if not _in_repository(path):
        return ast.parse(path.read_text(), str(path))
    stat = path.stat()
    return _parse(str(path), stat.st_size, stat.st_mtime_ns)


def python_files(package: str, root: Path = ROOT) -> list[Path]:
    """Every ``.py`` file under ``root / package``, sorted."""
    if root != ROOT:
        return sorted((root / package).rglob("*.py"))
    return list(_repository_files(package))


def _in_repository(path: Path) -> bool:
    return path.resolve().is_relative_to(ROOT)


@functools.lru_cache(maxsize=None)
def _repository_files(package: str) -> tuple[Path, ...]:
    return tuple(sorted((ROOT / package).rglob("*.py")))


@functools.lru_cache(maxsize=4096)
def _read(path: str, size: int, mtime_ns: int) -> str:
    return Path(path).read_text()


@functools.lru_cache(maxsize=4096)
def _parse(path: str, size: int, mtime_ns: int) -> ast.Module:
    return ast.parse(_read(path, size, mtime_ns), path)
