"""Entry points the ``modelreg`` command loads (``modelreg.components``): worker threads and processes."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from registry.bootstrap import Container
from registry.evals import workdirs
from workers.checkpoints import start_checkpoints
from workers.handlers import build_handlers
from workers.loop import run_worker_process as _run_process
from workers.loop import run_workers
from workers.rejudging import start_rejudging
from workers.webhooks import pipeline_handlers, start_webhooks

log = logging.getLogger(__name__)


def start_workers(container: Container, count: int, stop: threading.Event) -> list[threading.Thread]:
    """Start ``count`` worker threads in this process (``modelreg serve``), and the audit checkpoints."""
    if count:
        _sweep_eval_copies(container.settings.eval_work_dir)
        start_checkpoints(container, stop)
        start_rejudging(container, stop)
        start_webhooks(container, stop)
        return run_workers(container, pipeline_handlers(), count, stop)
    return run_workers(container, build_handlers(), count, stop)


def run_worker_process(container: Container, concurrency: int) -> int:
    """Run workers in the foreground until SIGTERM/SIGINT (``modelreg worker``), and the audit checkpoints."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    _sweep_eval_copies(container.settings.eval_work_dir)
    start_checkpoints(container, stop)
    start_rejudging(container, stop)
    start_webhooks(container, stop)
    return _run_process(container, pipeline_handlers(), threads=concurrency, stop=stop)


def _sweep_eval_copies(root: Path | None) -> None:
    """Remove the model copies of evals whose worker was killed (``registry.evals.workdirs``)."""
    swept = workdirs.sweep(root)
    if swept:
        log.info("removed %d eval work directories left by killed workers", swept)
