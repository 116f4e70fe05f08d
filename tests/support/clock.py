"""A clock the test moves by hand; the job queue takes any callable returning an aware datetime."""

from __future__ import annotations

import datetime as dt


class ManualClock:
    def __init__(self, start: dt.datetime | None = None) -> None:
        self.now = start or dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        self.now += dt.timedelta(**kw)
