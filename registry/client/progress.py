"""What a fetch tells the person or the log watching it: a progress bar on a terminal, JSON lines otherwise.

Every phase (manifest, verify, download, assemble) is timed, so a slow cold start shows where it went.

Example:
    >>> import io
    >>> out = io.StringIO()
    >>> reporter = Reporter(out, tty=False)
    >>> with reporter.phase("verify"):
    ...     pass
    >>> import json; json.loads(out.getvalue())["event"]
    'phase'
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

PHASES = ("manifest", "verify", "download", "assemble")


class Reporter:
    """Phase timings and byte progress; thread-safe (download streams report from their threads).

    Args:
        out: Where JSON lines go (stdout) when not on a terminal.
        tty: Draw a progress bar on ``bar`` instead of JSON progress lines.
        bar: The terminal stream of the bar (stderr).
    """

    def __init__(self, out: TextIO | None = None, *, tty: bool | None = None, bar: TextIO | None = None,
                 interval: float = 1.0) -> None:
        self.out = out or sys.stdout
        self.bar = bar or sys.stderr
        self.tty = self.bar.isatty() if tty is None else tty
        self.timings: dict[str, float] = {}
        self.total = 0
        self.done = 0
        self.interval = 0.1 if self.tty else interval
        self._last = 0.0
        self._lock = threading.Lock()

    def event(self, event: str, **fields: Any) -> None:
        if not self.tty:
            with self._lock:
                self.out.write(json.dumps({"event": event, **fields}, sort_keys=True, default=str) + "\n")
                self.out.flush()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.timings[name] = round(self.timings.get(name, 0.0) + time.monotonic() - start, 4)
            self.event("phase", phase=name, seconds=self.timings[name])

    def expect(self, total: int) -> None:
        with self._lock:
            self.total += total

    def advance(self, n: int) -> None:
        now = time.monotonic()
        with self._lock:
            self.done += n
            due = now - self._last >= self.interval or self.done >= self.total
            if due:
                self._last = now
            done, total = self.done, self.total
        if due:
            self._draw(done, total)

    def _draw(self, done: int, total: int) -> None:
        if self.tty:
            width = 30
            filled = int(width * done / total) if total else width
            self.bar.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done / 2**20:9.1f} / {total / 2**20:.1f} MiB")
            if done >= total:
                self.bar.write("\n")
            self.bar.flush()
        else:
            self.event("progress", bytes=done, total=total)
