"""Signed audit checkpoints at an interval, from the worker processes.

One thread per worker process (``modelreg serve`` and ``modelreg worker`` alike) asks every few
seconds whether a checkpoint is due (``audit_checkpoint_every_events`` new events, or
``audit_checkpoint_every_seconds`` since the last one with new events) and signs it. Workers do it,
not ``audit.append``: they hold the signing key already (they sign version manifests), a timer
needs a process that runs when nobody appends, and the service transactions that append stay
short and key-free. Several processes may race for the same head; the checkpoint is written once.

The same tick queues the verifiable log's ``integrate_audit_log`` job when the chain has events the
log has not integrated, a log checkpoint may be due, or the newest checkpoint still lacks its witnesses'
quorum, due after a back-off (``registry.services.tlog.arm_integration``).
"""

from __future__ import annotations

import logging
import threading

from registry import audit
from registry.bootstrap import Container
from registry.services import tlog

log = logging.getLogger(__name__)

# The longest a due checkpoint waits for the thread to look.
MAX_POLL_SECONDS = 5.0


def run_checkpoints(container: Container, stop: threading.Event) -> None:
    """Write checkpoints when due until ``stop`` is set."""
    settings = container.settings
    poll = min(settings.audit_checkpoint_every_seconds, MAX_POLL_SECONDS)
    while not stop.wait(poll):
        try:
            with container.session_factory() as session:
                audit.checkpoint_if_due(
                    session, container.signing_key, every_events=settings.audit_checkpoint_every_events,
                    every_seconds=settings.audit_checkpoint_every_seconds, now=container.clock.now(),
                )
        except Exception:
            # A database blip or a broken chain: say so and try again at the next tick.
            log.warning("audit checkpoint failed", exc_info=True)
        try:
            with container.session_factory() as session:
                tlog.arm_integration(session, now=container.clock.now(), witnesses=settings.log_witnesses,
                                     quorum=settings.log_witness_quorum)
        except Exception:
            log.warning("queueing the audit log's integration failed", exc_info=True)


def start_checkpoints(container: Container, stop: threading.Event) -> threading.Thread:
    """Start the checkpoint thread; it ends when ``stop`` is set (a daemon: each checkpoint is atomic)."""
    thread = threading.Thread(target=run_checkpoints, args=(container, stop), name="audit-checkpoints",
                              daemon=True)
    thread.start()
    return thread
