"""Waiting on an event instead of on time: poll a condition often, give up only after a long deadline.

A loaded two-core machine running a second suite must still pass, so the deadline is generous; the
poll interval is short, so a test waits only as long as the event takes.

Example:
    >>> wait_until(lambda: True, "nothing at all")
    True
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

POLL_SECONDS = 0.02
DEADLINE_SECONDS = 60.0


def wait_until(condition: Callable[[], T], what: str, *, timeout: float = DEADLINE_SECONDS,
               interval: float = POLL_SECONDS, process: subprocess.Popen | None = None) -> T:
    """Return ``condition()``'s first truthy value, polling every ``interval`` seconds.

    Args:
        condition: Asked until it returns something truthy.
        what: The event, for the failure message.
        timeout: Seconds before giving up (a deadline, not an expectation).
        interval: Seconds between two asks.
        process: A process the event depends on: its exit fails the wait at once.

    Raises:
        AssertionError: the deadline passed, or ``process`` exited first.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the process exited with {process.returncode} before {what}")
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
