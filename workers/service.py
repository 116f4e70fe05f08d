"""Entry points the ``modelreg`` command loads (``modelreg.components``): worker threads and processes."""

from __future__ import annotations

import logging
import threading

from registry.bootstrap import Container
from workers.checkpoints import start_checkpoints
from workers.handlers import build_handlers
from workers.loop import run_worker_process as _run_process
from workers.loop import run_workers
from workers.rejudging import start_rejudging


def start_workers(container: Container, count: int, stop: threading.Event) -> list[threading.Thread]:
    """Start ``count`` worker threads in this process (``modelreg serve``), and the audit checkpoints."""
    if count:
        start_checkpoints(container, stop)
        start_rejudging(container, stop)
    return run_workers(container, build_handlers(), count, stop)


def run_worker_process(container: Container, concurrency: int) -> int:
    """Run workers in the foreground until SIGTERM/SIGINT (``modelreg worker``), and the audit checkpoints."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    start_checkpoints(container, stop)
    start_rejudging(container, stop)
    return _run_process(container, build_handlers(), threads=concurrency, stop=stop)
