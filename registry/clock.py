"""Where time comes from: services, leases and expiry read a :class:`Clock`, never the system time.

The container (``registry/bootstrap.py``) builds one :class:`SystemClock` and hands it to the job queue
and to every service that records or compares a time; tests pass a :class:`ManualClock` and move it.

Example:
    >>> clock = ManualClock(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    >>> clock.advance(minutes=5)
    >>> clock.now().isoformat()
    '2026-01-01T00:05:00+00:00'
"""

from __future__ import annotations

import datetime as dt
from typing import Protocol


class Clock(Protocol):
    """The time source. ``now()`` returns an aware datetime in UTC."""

    def now(self) -> dt.datetime: ...


class SystemClock:
    """The machine's time, in UTC."""

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.timezone.utc)


class ManualClock:
    """A clock that stands still until moved: what tests of leases, retention and expiry use."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self._now = start or dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        if self._now.tzinfo is None:
            raise ValueError("a clock's time must be timezone-aware")

    def now(self) -> dt.datetime:
        return self._now

    def advance(self, **delta: float) -> None:
        """Move forward by ``datetime.timedelta(**delta)`` (e.g. ``advance(seconds=31)``)."""
        self._now += dt.timedelta(**delta)
