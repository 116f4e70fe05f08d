"""Fact cells, bounded ranged reading and strict JSON for the facts readers.

Every fact is a cell: ``{"value": v, "source": where}`` when read, or ``{"value": None, "unknown": why}``
when it could not be (never a guess). A value worked out from others says how in ``derived``.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from registry.scanning._formatio import DuplicateKeyError, strict_json_loads

ReadRange = Callable[[str, int, int], bytes]
"""``read_range(path, start, end) -> bytes``: the bytes ``[start, end)`` of a file of the version."""

MAX_JSON_BYTES = 8 << 20
"""config.json, tokenizer_config.json and the like are read whole only up to this size."""
MAX_INT = 1 << 53
"""Larger numbers are no layer, head or token count of any model (and lose precision in JSON readers)."""


def known(value: Any, source: str, **extra: Any) -> dict[str, Any]:
    return {"value": value, "source": source, **extra}


def unknown(reason: str) -> dict[str, Any]:
    return {"value": None, "unknown": reason}


class BudgetExhaustedError(Exception):
    """The facts readers read more bytes in all than their budget allows."""


class RangeFile:
    """A seekable, read-only view of one file over ``read_range`` (what the scanners' parsers read).

    Reads stop at ``limit`` bytes into the file (a short read, which the parsers treat as a truncated
    file; ``clamped`` tells the caller why), and every byte read is charged to ``budget``.
    """

    def __init__(self, read_range: ReadRange, path: str, size: int, budget: "ReadBudget", limit: int) -> None:
        self._read_range = read_range
        self._path = path
        self._size = size
        self._budget = budget
        self._limit = min(limit, size)
        self._pos = 0
        self.clamped = False

    def seek(self, pos: int, whence: int = 0) -> int:
        self._pos = pos if whence == 0 else self._pos + pos if whence == 1 else self._size + pos
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = self._size if n is None or n < 0 else self._pos + n
        if end > self._limit:
            self.clamped = True
            end = self._limit
        if end <= self._pos:
            return b""
        self._budget.charge(end - self._pos)
        data = self._read_range(self._path, self._pos, end)
        self._pos += len(data)
        return data


class ReadBudget:
    """How many bytes the readers of one version may still read (a hostile version cannot make them read GBs)."""

    def __init__(self, total: int) -> None:
        self.left = total

    def charge(self, n: int) -> None:
        if n > self.left:
            raise BudgetExhaustedError(f"the facts read budget is spent ({n} more bytes asked)")
        self.left -= n


def load_json(read_range: ReadRange, path: str, size: int, budget: ReadBudget) -> tuple[Any, str | None]:
    """Read and parse a small JSON file strictly; return ``(document, None)`` or ``(None, why not)``."""
    if size > MAX_JSON_BYTES:
        return None, f"{path} is {size} bytes, over the {MAX_JSON_BYTES} read for facts"
    try:
        raw = RangeFile(read_range, path, size, budget, size).read(size)
    except BudgetExhaustedError as exc:
        return None, str(exc)
    try:
        return strict_json_loads(raw.decode("utf-8")), None
    except DuplicateKeyError as exc:
        return None, f"{path} repeats key {exc.key!r}: readers disagree on which wins"
    except UnicodeDecodeError:
        return None, f"{path} is not UTF-8"
    except (ValueError, RecursionError) as exc:
        return None, f"{path} is not JSON: {exc}"[:300]


def positive_int(value: Any) -> int | None:
    """``value`` if it is a JSON integer in ``[1, MAX_INT]`` (not a bool, float or string)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_INT:
        return value
    return None


def describe(value: Any) -> str:
    """A short, safe rendering of a bad value for a reason."""
    text = repr(value)
    return f"{text[:60]}... ({type(value).__name__})" if len(text) > 60 else f"{text} ({type(value).__name__})"


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` if it is small, finite JSON (what a fact may hold), else raise ``ValueError``."""
    if depth > 4:
        raise ValueError("nested too deep")
    if value is None or isinstance(value, (bool, str, int)):
        if isinstance(value, str) and len(value) > 256:
            raise ValueError("a string over 256 characters")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise ValueError(f"the number {describe(value)} is out of range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"the number {value} is not finite")
        return value
    if isinstance(value, list):
        if len(value) > 256:
            raise ValueError("a list of over 256 items")
        return [plain(v, depth + 1) for v in value]
    if isinstance(value, dict):
        if len(value) > 64:
            raise ValueError("an object of over 64 keys")
        return {str(k)[:64]: plain(v, depth + 1) for k, v in value.items()}
    raise ValueError(f"a {type(value).__name__}")
