"""Revocations reach a node cache: ``cache warm``'s reader of the registry's event stream.

One :class:`RevocationFollower` per ``cache warm`` process reads ``version.revoked`` events from
``GET /v1/events`` by cursor, long-polling (``wait=``) where the server can, and never asking more
than about once a second when answers come back empty at once (a server that ignores ``wait``). For
each revoked version the cache holds it calls :meth:`NodeCache.remove_revoked` (blobs another live
version lists stay) and tells ``on_revoked``. The cursor is saved in the cache's index after the
events before it were applied, so a revocation made while the warmer was down is applied at its
restart, and an event applied twice (a crash between the two) does nothing the second time.

Revocation follows an adapter's binding (ADR 0018): a revoked base's ``version.revoked`` names the adapter
versions of its tenant bound to it (``adapters``), and every bound adapter version gets an
``adapter.unservable`` event (``reason`` ``base-revoked``) in its own tenant; the follower reads both and
drops those adapters as it drops the base (:func:`revocations_of`). An ``adapter.unservable`` for a base
alias that moved names an alias, not a version, and is no revocation: the registry refuses that release.

A cache with no cursor yet reads the revocations from the start of the stream: reading to the head is
what a first start must do anyway, and applying every past revocation is what keeps a version revoked
before the warmer first ran (but cached by a ``fetch``) out of the cache.

Example:
    >>> revocation_of({"type": "dev.modelreg.version.revoked",
    ...                "data": {"tenant": "acme", "model": "tiny", "version": 3}})
    ('acme', 'tiny', 3)
    >>> revocation_of({"type": "dev.modelreg.version.revoked", "data": {"tenant": "../x", "version": 3}})
    >>> revocations_of({"type": "dev.modelreg.version.revoked",
    ...                 "data": {"tenant": "acme", "model": "llm", "version": 1, "adapters": ["acme/llm-support@2"]}})
    [('acme', 'llm', 1), ('acme', 'llm-support', 2)]
    >>> revocations_of({"type": "dev.modelreg.adapter.unservable",
    ...                 "data": {"tenant": "acme", "model": "llm-support", "version": 2, "reason": "base-revoked"}})
    [('acme', 'llm-support', 2)]
"""

from __future__ import annotations

import re
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
UNSERVABLE = "adapter.unservable"
"""An adapter left unservable by its base: a revocation of the adapter version when its base was revoked."""
PAGE = 1000
"""Events asked for per read (the server's most)."""
MAX_LISTED = 1000
"""Adapters read from one event's list at most (the registry lists 100)."""
WAIT_SECONDS = 25
"""The long poll asked of the server; well under any proxy's idle timeout."""
MIN_INTERVAL = 1.0
"""Seconds between two reads that found nothing, when the server answered at once."""
MAX_BACKOFF = 30.0
REFUSED_BACKOFF = 60.0
"""Seconds between tries while the registry refuses the node's token (401, 403)."""

_VERSION_REF = re.compile(r"\A([^/@]+)/([^/@]+)@([1-9][0-9]{0,8})\Z")


def _named(tenant: Any, model: Any, version: Any) -> tuple[str, str, int] | None:
    if (isinstance(tenant, str) and NAME_RE.match(tenant) and isinstance(model, str) and NAME_RE.match(model)
            and type(version) is int and version >= 1):
        return tenant, model, version
    return None


def revocation_of(event: Any) -> tuple[str, str, int] | None:
    """The ``(tenant, model, version)`` a ``version.revoked`` CloudEvent names; None for anything else."""
    if not isinstance(event, dict) or event.get("type") != TYPE_PREFIX + REVOKED:
        return None
    data = event.get("data")
    if not isinstance(data, dict):
        return None
    return _named(data.get("tenant"), data.get("model"), data.get("version"))


def revocations_of(event: Any) -> list[tuple[str, str, int]]:
    """Every ``(tenant, model, version)`` an event revokes: a ``version.revoked``'s version and the adapters it
    lists (of its own tenant), or the adapter version of an ``adapter.unservable`` whose base was revoked.
    Anything malformed is passed over."""
    if not isinstance(event, dict) or not isinstance(event.get("data"), dict):
        return []
    data = event["data"]
    if event.get("type") == TYPE_PREFIX + UNSERVABLE:
        named = _named(data.get("tenant"), data.get("model"), data.get("version"))
        return [named] if named is not None and data.get("reason") == "base-revoked" else []
    revoked = revocation_of(event)
    if revoked is None:
        return []
    found = [revoked]
    listed = data.get("adapters")
    for ref in (listed if isinstance(listed, list) else [])[:MAX_LISTED]:
        match = _VERSION_REF.match(ref) if isinstance(ref, str) else None
        # Only the revoked base's own tenant: another tenant's adapters come in that tenant's own events.
        named = _named(match[1], match[2], int(match[3])) if match else None
        if named is not None and named[0] == revoked[0]:
            found.append(named)
    return found


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
        self.types: tuple[str, ...] = (REVOKED, UNSERVABLE)
        """The event types read (``version.revoked`` alone from a registry that knows no other)."""
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
        try:
            page = self.api.events(after, types=self.types, limit=PAGE, wait=self.wait)
        except RemoteError as exc:
            if exc.status != 422 or UNSERVABLE not in str(exc) or UNSERVABLE not in self.types:
                raise
            # A registry from before adapters were bound refuses the type it does not know: follow the rest.
            self.on_problem(f"the registry does not know {UNSERVABLE} events: following {REVOKED} alone")
            self.types = (REVOKED,)
            page = self.api.events(after, types=self.types, limit=PAGE, wait=self.wait)
        for event in page.events:
            for named in revocations_of(event):
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
