"""Webhook delivery in the worker processes: the threads that notice new events and the ones that deliver.

Every worker process (``modelreg serve`` with workers, ``modelreg worker``) runs

- one thread that every ``webhook_poll_seconds`` queues the ``deliver_webhook`` job of each subscription
  with events to read (:func:`registry.services.webhooks.arm_due`: one query a tick), and
- ``webhook_delivery_threads`` worker threads that claim only ``deliver_webhook`` jobs, one subscription
  each at a time, so a receiver that is slow (each exchange is cut at ``webhook_timeout_seconds``) holds
  one of them and never another subscription's delivery, nor the pipeline's workers, which do not claim
  webhook jobs where these threads run.
"""

from __future__ import annotations

import logging
import threading

from registry.bootstrap import Container
from registry.services import webhooks
from workers.handler_registry import HandlerRegistry
from workers.handlers import WEBHOOK_HANDLER, build_handlers
from workers.loop import Worker, default_worker_id

log = logging.getLogger(__name__)


def pipeline_handlers() -> HandlerRegistry:
    """Every handler but the webhooks' (which :func:`start_webhooks`'s own threads run)."""
    every = build_handlers()
    return HandlerRegistry([every.get(kind) for kind in every.kinds() if kind != WEBHOOK_HANDLER.kind])


def run_arming(container: Container, stop: threading.Event) -> None:
    """Queue due webhook jobs every ``webhook_poll_seconds`` until ``stop`` is set."""
    while not stop.is_set():
        try:
            with container.session_factory() as session:
                webhooks.arm_due(session, clock=container.clock)
        except Exception:
            log.warning("looking for webhooks to deliver failed", exc_info=True)
        stop.wait(container.settings.webhook_poll_seconds)


def start_webhooks(container: Container, stop: threading.Event, *, threads: int | None = None,
                   poll_interval: float = 0.2) -> list[threading.Thread]:
    """Start the arming thread and the delivery threads; they end when ``stop`` is set."""
    count = threads or container.settings.webhook_delivery_threads
    started = [threading.Thread(target=run_arming, args=(container, stop), name="webhook-arming", daemon=True)]
    prefix = default_worker_id()
    for index in range(count):
        worker = Worker(container, HandlerRegistry([WEBHOOK_HANDLER]), f"{prefix}-webhooks-{index}", poll_interval)
        started.append(threading.Thread(target=worker.run, args=(stop,), name=f"webhooks-{index}", daemon=True))
    for thread in started:
        thread.start()
    return started
