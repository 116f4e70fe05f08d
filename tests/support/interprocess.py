"""One-time installs shared by parallel test processes (pytest-xdist workers): an flock on a file beside them.

A thread lock is not enough once ``make test`` runs several pytest workers: two ``npm ci`` into one
``node_modules``, or two ``apt-get install`` at once, would break each other.
"""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_threads = threading.Lock()


@contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Hold ``lock_file`` exclusively against every other thread and process on this machine."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with _threads, open(lock_file, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
