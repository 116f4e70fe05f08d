"""What a fetch tells the person or the program watching it: readable lines, or JSON lines with ``--json``.

Three modes. ``human`` (the CLI's default): one line per phase on stdout and, when stderr is a terminal,
a progress bar there (rich); nothing on stdout is JSON. ``json`` (``--json``): one JSON object a line on
stdout (``{"event": "phase"}``, ``{"event": "progress"}``), for a log pipeline. ``quiet`` (library
callers): nothing printed. Every phase (manifest, verify, download, assemble) is timed in each mode, and a
phase's seconds leave out the phases run inside it, so they add up to the whole.

Example:
    >>> import io
    >>> out = io.StringIO()
    >>> reporter = Reporter("json", out=out)
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
from typing import Any, Literal, TextIO

PHASES = ("manifest", "verify", "download", "assemble")
Mode = Literal["human", "json", "quiet"]


class Reporter:
    """Phase timings and byte progress; thread-safe (download streams report from their threads).

    Args:
        mode: ``human``, ``json`` or ``quiet`` (see the module docstring).
        out: Where lines go (stdout).
        bar: The stream of the progress bar (stderr); drawn in ``human`` mode only when it is a terminal.
        interval: Seconds between two JSON progress lines.
    """

    def __init__(self, mode: Mode = "quiet", *, out: TextIO | None = None, bar: TextIO | None = None,
                 interval: float = 1.0) -> None:
        self.mode = mode
        self.out = out or sys.stdout
        self.bar = bar or sys.stderr
        self.draws_bar = mode == "human" and self.bar.isatty()
        self.timings: dict[str, float] = {}
        self.total = 0
        self.done = 0
        self.interval = interval
        self._last = 0.0
        self._lock = threading.Lock()
        self._nested: list[float] = []  # per open phase: seconds spent in phases inside it
        self._progress: Any = None
        self._task: Any = None

    def line(self, text: str) -> None:
        """A readable line (``human`` mode only)."""
        if self.mode == "human":
            with self._lock:
                self.out.write(text + "\n")
                self.out.flush()

    def event(self, event: str, **fields: Any) -> None:
        """A JSON line (``json`` mode only)."""
        if self.mode == "json":
            with self._lock:
                self.out.write(json.dumps({"event": event, **fields}, sort_keys=True, default=str) + "\n")
                self.out.flush()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        self._nested.append(0.0)
        try:
            yield
        finally:
            elapsed = time.monotonic() - start
            inner = self._nested.pop()
            if self._nested:
                self._nested[-1] += elapsed
            self.timings[name] = round(self.timings.get(name, 0.0) + elapsed - inner, 4)
            self._stop_bar()
            self.event("phase", phase=name, seconds=self.timings[name])
            self.line(f"{name}: {self.timings[name]:.2f} s")

    def expect(self, total: int) -> None:
        with self._lock:
            self.total += total
            if self.draws_bar:
                self._start_bar()
                self._progress.update(self._task, total=self.total)

    def advance(self, n: int) -> None:
        now = time.monotonic()
        with self._lock:
            self.done += n
            if self._progress is not None:
                self._progress.update(self._task, completed=self.done)
                return
            due = now - self._last >= self.interval or self.done >= self.total
            if due:
                self._last = now
            done, total = self.done, self.total
        if due:
            self.event("progress", bytes=done, total=total)

    def _start_bar(self) -> None:
        if self._progress is not None:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._progress = Progress("download", BarColumn(), DownloadColumn(binary_units=True),
                                  TransferSpeedColumn(), TimeRemainingColumn(),
                                  console=Console(file=self.bar, force_terminal=True))
        self._task = self._progress.add_task("download", total=self.total)
        self._progress.start()

    def _stop_bar(self) -> None:
        with self._lock:
            progress, self._progress = self._progress, None
        if progress is not None:
            progress.stop()
