"""One ``Range: bytes=a-b`` header: the one parser of the API's download routes and of ``serve-s3``.

It does no I/O and imports no web framework, so the API (``api/ranges.py``) and the node's S3 endpoint
(``registry/node/serve_s3.py``) parse a range alike; each renders the refusal in its own protocol.

Example:
    >>> byte_range("bytes=0-99", 1000), byte_range("bytes=990-", 1000), byte_range("bytes=-10", 1000)
    ((0, 100), (990, 1000), (990, 1000))
    >>> byte_range(None, 1000) is None
    True
    >>> byte_range("bytes=" + "9" * 5000 + "-", 1000)
    Traceback (most recent call last):
    ...
    registry.domain.errors.RangeNotSatisfiableError: unsupported Range 'bytes=999...
"""

from __future__ import annotations

import re

from registry.domain.errors import RangeNotSatisfiableError

# ASCII digits only ("\d" takes any script's), and no more than a size can have: int() of thousands
# of digits raises, and such a range is not one this server supports (416).
RANGE_RE = re.compile(r"\Abytes=([0-9]{0,19})-([0-9]{0,19})\Z")


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The ``[start, end)`` a Range header asks of ``size`` bytes, or None without a header.

    A last byte past the end is clamped to it; a suffix range (``bytes=-N``) takes the last N bytes.

    Args:
        header: the header's value as received (None or empty: no range, the whole object).
        size: the length of the object the range is of.

    Raises:
        RangeNotSatisfiableError: not one ``bytes=`` range, or one that starts at or past the end.
    """
    if not header:
        return None
    match = RANGE_RE.match(header.strip())
    if match is None or match.groups() == ("", ""):
        raise RangeNotSatisfiableError(f"unsupported Range {header!r}", range=header)
    first, last = match.groups()
    if first == "":
        start, end = max(0, size - int(last)), size
    else:
        start, end = int(first), min(size, int(last) + 1) if last else size
    if start >= size or start >= end:
        raise RangeNotSatisfiableError(f"Range {header!r} is outside the {size} bytes", range=header, size=size)
    return start, end


def content_range(start: int, end: int, size: int) -> str:
    """The ``Content-Range`` of the answer to :func:`byte_range`'s ``(start, end)``."""
    return f"bytes {start}-{end - 1}/{size}"
