"""The API's download routes parse ``Range`` with the registry's one parser (:mod:`registry.domain.ranges`).

``serve-s3`` uses the same one; a refusal is a ``RangeNotSatisfiableError``, which api/problems.py answers
with 416.
"""

from __future__ import annotations

from registry.domain.ranges import byte_range, content_range

__all__ = ["byte_range", "content_range"]
