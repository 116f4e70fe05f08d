"""Revocations reach a node cache: ``cache warm``'s reader of the registry's event stream.

One :class:`RevocationFollower` per ``cache warm`` process reads ``version.revoked`` events from
``GET /v1/events`` by cursor, long-polling (``wait=``) where the server can, and never asking more
than about once a second when answers come back empty at once (a server that ignores ``wait``). For
each revoked version the cache holds it calls :meth:`NodeCache.remove_revoked` (blobs another live
version lists stay) and tells ``on_revoked``. The cursor is saved in the cache's index after the
events before it were applied, so a revocation made while the warmer was down is applied at its
restart, and an event applied twice (a crash between the two) does nothing the second time.

A cache with no cursor yet reads the revocations from the start of the stream: reading to the head is
what a first start must do anyway, and applying every past revocation is what keeps a version revoked
before the warmer first ran (but cached by a ``fetch``) out of the cache.

Example:
    >>> revocation_of({"type": "dev.modelreg.version.revoked",
    ...                "data": {"tenant": "acme", "model": "tiny", "version": 3}})
    ('acme', 'tiny', 3)
    >>> revocation_of({"type": "dev.modelreg.version.revoked", "data": {"tenant": "../x", "version": 3}})
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from registry.client.api import RegistryApi
from registry.client.http import RemoteError
from registry.domain.errors import RegistryError
from registry.domain.events import TYPE_PREFIX
from registry.domain.refs import NAME_RE
from registry.node.cache import NodeCache, RevocationReport

REVOKED = "version.revoked"
PAGE = 1000
"""Events asked for per read (the server's most)."""
WAIT_SECONDS = 25
"""The long poll asked of the server; well under any proxy's idle timeout."""
MIN_INTERVAL = 1.0
"""Seconds between two reads that found nothing, when the server answered at once."""
MAX_BACKOFF = 30.0
REFUSED_BACKOFF = 60.0
"""Seconds between tries while the registry refuses the node's token (401, 403)."""


def revocation_of(event: Any) -> tuple[str, str, int] | None:
    """The ``(tenant, model, version)`` a ``version.revoked`` CloudEvent names; None for anything else."""
    if not isinstance(event, dict) or event.get("type") != TYPE_PREFIX + REVOKED:
        return None
    data = event.get("data")
    if not isinstance(data, dict):
        return None
    tenant, model, version = data.get("tenant"), data.get("model"), data.get("version")
    if not (isinstance(tenant, str) and NAME_RE.match(tenant) and isinstance(model, str) and NAME_RE.match(model)
            and type(version) is int and version >= 1):
        return None
    return tenant, model, version


class RevocationFollower:
    """Applies the registry's revocations to one node cache (see the module docstring).

    Args:
        api: The registry, with the node's token.
        cache: The node cache; its index keeps the cursor, per registry URL.
        on_revoked: Told of each revoked version the cache held (what was removed).
        on_problem: Told a line about each failure before the retry (a refused token, a lost cursor).
        on_cursor: Told the cursor each time a read moved it (after it was saved), and at the first read
            that succeeds after a failure (``failing`` is None again).
        wait: Seconds of long poll asked of the server (None: ask for none).
    """

    def __init__(self, api: RegistryApi, cache: NodeCache, *, on_revoked: Callable[[RevocationReport], None],
                 on_problem: Callable[[str], None], on_cursor: Callable[[int], None] = lambda cursor: None,
                 wait: float | None = WAIT_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.cache = api, cache
        self.on_revoked, self.on_problem, self.on_cursor = on_revoked, on_problem, on_cursor
        self.wait = wait
        self.clock = clock
        self.key = f"events.cursor {api.client.url}"
        self.failing: str | None = None
        """Why the last read failed (a refused token: the registry's answer), None once a read succeeded."""

    @property
    def cursor(self) -> int:
        saved = self.cache.state(self.key)
        return int(saved) if saved and saved.isdigit() else 0

    def step(self) -> tuple[int, bool]:
        """One read of the stream, its revocations applied and the cursor saved.

        Returns:
            The number of events read, and whether the page was full (more are waiting).

        Raises:
            RemoteError, NetworkError, RegistryError: the read failed (nothing was applied or saved).
        """
        after = self.cursor
        page = self.api.events(after, types=(REVOKED,), limit=PAGE, wait=self.wait)
        for event in page.events:
            named = revocation_of(event)
            if named is None:
                continue
            report = self.cache.remove_revoked(*named)
            if report.held and (report.newly_revoked or report.removed):
                self.on_revoked(report)
        recovered, self.failing = self.failing is not None, None
        if page.cursor != after or not self.cache.state(self.key) or recovered:
            self.cache.set_state(self.key, str(page.cursor))
            self.on_cursor(page.cursor)
        return len(page.events), len(page.events) >= PAGE

    def _failed(self, line: str) -> None:
        self.failing = line
        self.on_problem(line)

    def catch_up(self) -> None:
        """Read until the stream has nothing more at once (``cache warm --once``); failures are raised."""
        wait, self.wait = self.wait, None
        try:
            while self.step()[1]:
                pass
        except (RegistryError, OSError) as exc:
            self.failing = " ".join(str(exc).split())
            raise
        finally:
            self.wait = wait

    def run(self, stop: threading.Event) -> None:
        """Follow the stream until ``stop`` is set; every failure is told and retried with backoff."""
        backoff = 1.0
        while not stop.is_set():
            started = self.clock()
            try:
                found, full = self.step()
            except RemoteError as exc:
                stop.wait(self._refused(exc, backoff))
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            except (RegistryError, OSError) as exc:
                self._failed(f"the event stream failed, retrying in {backoff:.0f}s: {' '.join(str(exc).split())}")
                stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            backoff = 1.0
            elapsed = self.clock() - started
            if not found and not full and elapsed < MIN_INTERVAL:
                stop.wait(MIN_INTERVAL - elapsed)

    def _refused(self, exc: RemoteError, backoff: float) -> float:
        """Tell what the registry's refusal means; the seconds to wait before the next try."""
        detail = " ".join(str(exc).split())
        if exc.status in (401, 403):
            self._failed(f"the registry refuses the node's token for the event stream (HTTP {exc.status}): "
                            f"revocations are not applied until it is fixed; retrying in {REFUSED_BACKOFF:.0f}s: "
                            f"{detail}")
            return REFUSED_BACKOFF
        if exc.status == 410:
            # The registry no longer keeps events after our cursor: read every revocation it still has.
            self._failed(f"the event stream no longer has cursor {self.cursor} (HTTP 410): reading the "
                            f"revocations again from the start: {detail}")
            self.cache.set_state(self.key, "0")
            return 0.0
        if exc.status == 422 and self.wait is not None and "wait" in str(exc.details):
            self.on_problem(f"the registry refuses wait={self.wait:.0f} on the event stream: polling without it")
            self.wait = None
            return 0.0
        self._failed(f"the event stream failed (HTTP {exc.status}), retrying in {backoff:.0f}s: {detail}")
        return backoff
