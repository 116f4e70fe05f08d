"""Versions awaiting approval judged again under a changed policy bundle, from the worker processes.

One thread per worker process, beside the audit checkpoints: when the process starts (the usual way a
new policy bundle arrives) and then every :data:`EVERY_SECONDS`, it judges again each version awaiting
approval whose latest judgement used another bundle (:func:`registry.services.approvals.rejudge_awaiting`).
"""

from __future__ import annotations

import logging
import threading

from registry.bootstrap import Container
from registry.services import approvals

log = logging.getLogger(__name__)

EVERY_SECONDS = 60.0


def run_rejudging(container: Container, stop: threading.Event) -> None:
    """Judge stale waiting versions now and then every :data:`EVERY_SECONDS` until ``stop`` is set."""
    while not stop.is_set():
        try:
            with container.session_factory() as session:
                judged = approvals.rejudge_awaiting(session, ports=container.ports)
            if judged:
                log.info("judged again under policy bundle %s: %s", container.policy.bundle_digest[:12],
                         ", ".join(judged[:20]))
        except Exception:
            log.warning("judging waiting versions again failed", exc_info=True)
        stop.wait(EVERY_SECONDS)


def start_rejudging(container: Container, stop: threading.Event) -> threading.Thread:
    """Start the thread; it ends when ``stop`` is set (a daemon: each judgement is its own transaction)."""
    thread = threading.Thread(target=run_rejudging, args=(container, stop), name="policy-rejudging", daemon=True)
    thread.start()
    return thread
