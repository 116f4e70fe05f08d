"""One watcher per API process: learns of new audit events and wakes the long-polls waiting for them.

A long-poll (``GET .../manifest?wait=``, ``GET /v1/events?wait=``) registers an asyncio future under the
*keys* it cares about and holds no thread and no connection while it waits. The :class:`EventWatcher`
finds new audit rows and resolves the futures of exactly the keys those rows name:

- the row's subject (``acme/llm@prod`` for an alias move, ``acme/llm@3`` for a version's state change,
  revocation or deletion): :func:`subject_key`;
- ``tenant:acme`` (or ``global`` for a row of no tenant) and ``any``: for event-stream readers;
- ``trust_root`` for a trust root published or rotated: every release waiter holds it.

How it learns of them: on PostgreSQL, ``registry.audit.append`` (and ``append_many``, once a batch) sends
``pg_notify('modelreg_events', id)`` with the newest id it appended, in the appending transaction (delivered on
commit only), and the watcher LISTENs on one dedicated connection and reads every event past its head; it
also reads past its head every ``safety_poll_seconds`` in case a notification is lost (a connection dropped,
an event written without one). On SQLite it reads past its head every
``poll_seconds``: one cheap query per interval per process, whatever the number of waiters.

A waiter passes ``since``, the watcher's :attr:`~EventWatcher.head` taken *before* it read the state it
waits on: every event it could have missed has a larger id (ids are given in commit order,
:mod:`registry.services.events`), and the watcher keeps the keys of recent events, so one that arrived
between the read and the registration wakes it at once.

Usage (a sketch, not run as a doctest)::

    watcher = EventWatcher(engine)
    await watcher.start()
    since = watcher.head
    ...  # read the state
    await watcher.wait({subject_key("acme", "llm", "prod"), TRUST_ROOT}, since, timeout=30)  # 'news'
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Iterable
from typing import Literal

from sqlalchemy import text
from sqlalchemy.engine import Engine

from registry.audit import NOTIFY_CHANNEL as CHANNEL

log = logging.getLogger(__name__)

ANY = "any"
GLOBAL = "global"
TRUST_ROOT = "trust_root"
RECENT_EVENTS = 4096
"""How many recent events' keys the watcher keeps for waiters that registered a moment late."""
READ_BATCH = 1000

Outcome = Literal["news", "timeout", "shutdown"]

_READ_AFTER = ("SELECT id, action, subject, tenant FROM audit_events WHERE id > {head} "
               "ORDER BY id LIMIT " + str(READ_BATCH))


def subject_key(tenant: str, model: str, at: str | int) -> str:
    """The key of an alias (``at`` a name) or a version (``at`` a number): an audit event's subject."""
    return f"{tenant}/{model}@{at}"


def tenant_key(tenant: str | None) -> str:
    """The key every event of ``tenant`` wakes (``global``: events of no tenant, trust roots)."""
    return f"tenant:{tenant}" if tenant else GLOBAL


def keys_of(action: str, subject: str, tenant: str | None) -> frozenset[str]:
    """The keys one audit event wakes."""
    keys = {subject, tenant_key(tenant), ANY}
    if action.startswith("trust_root."):
        keys.add(TRUST_ROOT)
    return frozenset(keys)


class EventWatcher:
    """Wakes waiters keyed by what changed (see the module docstring). One per process and event loop.

    Args:
        engine: the process's engine; on PostgreSQL the watcher opens one more connection of its own.
        poll_seconds: SQLite: how often the head is read.
        safety_poll_seconds: PostgreSQL: how often the head is read beside LISTEN.
    """

    def __init__(self, engine: Engine, *, poll_seconds: float = 0.25, safety_poll_seconds: float = 5.0) -> None:
        self.engine = engine
        self.poll_seconds = poll_seconds
        self.safety_poll_seconds = safety_poll_seconds
        self.head = 0
        self.closed = False
        self.reads = 0
        """Reads of the audit log since start."""
        self.woken = 0
        """Waits woken by news since start (tests count them: only the waiters concerned wake)."""
        self._waiters: dict[str, set[asyncio.Future]] = collections.defaultdict(set)
        self._recent: collections.deque[tuple[int, frozenset[str]]] = collections.deque(maxlen=RECENT_EVENTS)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._started: asyncio.Future | None = None

    @property
    def waiting(self) -> int:
        """How many waits are registered and not yet answered (woken ones leave as their request resumes).

        Read by other threads too (the ``/metrics`` scrape, tests) while the loop registers waits.
        """
        # list() copies a dict's values or a set in one step under the GIL: no "changed size during iteration".
        return len({id(f) for futures in list(self._waiters.values()) for f in list(futures) if not f.done()})

    async def start(self) -> None:
        """Start watching in the running loop (idempotent; a new loop gets a new watch) and learn the head."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._task is None or self._task.done():
            if self.closed:
                return
            self._loop = loop
            self._waiters.clear()
            self._started = loop.create_future()
            self._task = loop.create_task(self._run(), name="event-watcher")
        await asyncio.shield(self._started)

    async def wait(self, keys: Iterable[str], since: int, timeout: float) -> Outcome:
        """Wait until an event past ``since`` wakes one of ``keys``, ``timeout`` passes, or the process stops.

        Returns:
            ``news`` (something of interest changed: read it again), ``timeout`` or ``shutdown``.
        """
        if self.closed:
            return "shutdown"
        keys = frozenset(keys)
        future = asyncio.get_running_loop().create_future()
        for key in keys:
            self._waiters[key].add(future)
        try:
            if self._missed(keys, since):
                return "news"
            done, _ = await asyncio.wait({future}, timeout=max(timeout, 0))
            return future.result() if done else "timeout"
        finally:
            for key in keys:
                futures = self._waiters.get(key)
                if futures is not None:
                    futures.discard(future)
                    if not futures:
                        del self._waiters[key]

    def release_all(self) -> None:
        """Stop: every waiter answers now (``shutdown``), and later waits return at once."""
        self.closed = True
        self._wake_futures({f for futures in self._waiters.values() for f in futures}, "shutdown")
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def release_all_threadsafe(self) -> None:
        """:meth:`release_all` from another thread or a signal handler."""
        self.closed = True
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.release_all)

    async def stop(self) -> None:
        self.release_all()
        if self._task is not None:
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

    # --- inside ---------------------------------------------------------------------------------

    def _missed(self, keys: frozenset[str], since: int) -> bool:
        """Whether an event past ``since`` that wakes ``keys`` was seen already (or may have been)."""
        if since >= self.head:
            return False
        if not self._recent or self._recent[0][0] > since + 1:
            return True  # older than what is kept: say so, the waiter reads once more
        return any(event_id > since and not event_keys.isdisjoint(keys) for event_id, event_keys in self._recent)

    def _wake_futures(self, futures: Iterable[asyncio.Future], outcome: Outcome) -> None:
        for future in futures:
            if not future.done():
                future.set_result(outcome)

    def _apply(self, rows: list[tuple[int, str, str, str | None]]) -> None:
        woken: set[asyncio.Future] = set()
        for event_id, action, subject, tenant in rows:
            keys = keys_of(action, subject, tenant)
            self._recent.append((event_id, keys))
            for key in keys:
                woken.update(self._waiters.get(key, ()))
            self.head = max(self.head, event_id)
        self.woken += sum(1 for f in woken if not f.done())
        self._wake_futures(woken, "news")

    def _signal_started(self) -> None:
        if self._started is not None and not self._started.done():
            self._started.set_result(None)

    async def _run(self) -> None:
        try:
            if self.engine.dialect.name == "postgresql":
                await self._run_postgres()
            else:
                await self._run_polling()
        finally:
            # A watch that ends (stopped, or an unexpected error) must not leave start() waiting.
            self._signal_started()

    async def _run_polling(self) -> None:
        self.head = await asyncio.to_thread(self._read_head)
        self._signal_started()
        while not self.closed:
            await asyncio.sleep(self.poll_seconds)
            try:
                await self._catch_up_sync()
            except Exception:  # noqa: BLE001 - the database may be briefly away; waiters keep their deadline
                log.exception("event watcher: reading the audit log failed; retrying")

    def _read_head(self) -> int:
        with self.engine.connect() as connection:
            return int(connection.execute(text("SELECT COALESCE(MAX(id), 0) FROM audit_events")).scalar() or 0)

    def _read_after(self, head: int) -> list[tuple[int, str, str, str | None]]:
        with self.engine.connect() as connection:
            return [tuple(r) for r in connection.execute(text(_READ_AFTER.format(head=int(head))))]

    async def _catch_up_sync(self) -> None:
        while True:
            self.reads += 1
            rows = await asyncio.to_thread(self._read_after, self.head)
            self._apply(rows)
            if len(rows) < READ_BATCH:
                return

    async def _run_postgres(self) -> None:
        import psycopg

        dsn = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        first = True
        while not self.closed:
            try:
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
                    await connection.execute(f"LISTEN {CHANNEL}")
                    if first:
                        cursor = await connection.execute("SELECT COALESCE(MAX(id), 0) FROM audit_events")
                        self.head = int((await cursor.fetchone())[0])
                        first = False
                        self._signal_started()
                    # After (re)connecting: whatever was committed while no one listened.
                    await self._catch_up(connection)
                    while not self.closed:
                        news = None
                        async for notice in connection.notifies(timeout=self.safety_poll_seconds, stop_after=1):
                            news = notice.payload
                        if news is not None and news.isdigit() and int(news) <= self.head:
                            continue  # read already, with an earlier notification's batch
                        # A notification, or the safety-net poll when none came in time.
                        await self._catch_up(connection)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - reconnect; waiters keep their deadline meanwhile
                log.exception("event watcher: the LISTEN connection failed; reconnecting")
                if first:
                    self._signal_started()
                await asyncio.sleep(1.0)

    async def _catch_up(self, connection) -> None:
        while True:
            self.reads += 1
            cursor = await connection.execute(_READ_AFTER.format(head=int(self.head)))
            rows = [tuple(r) for r in await cursor.fetchall()]
            self._apply(rows)
            if len(rows) < READ_BATCH:
                return
