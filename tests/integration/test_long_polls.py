"""Long-polls ride on the event stream (registry.watch), on SQLite and PostgreSQL, through a real uvicorn.

Waiters are asyncio tasks of one httpx client; the server's watcher says how many it holds, so a test
acts only once every waiter is registered.
"""

from __future__ import annotations

import asyncio
import threading
import time

import anyio.to_thread
import httpx
import pytest
from sqlalchemy import text

from api.app import create_app
from registry import audit
from registry.services import trust_roots
from registry.signing.keys import write_new_key
from tests.support.live_app import serve_in_thread
from tests.support.release_world import BASE, T, _as, build_release_world, promote, revoke

pytestmark = pytest.mark.seeded(builder=build_release_world)

WAKE_WITHIN = 10
"""Seconds from a change's commit to its waiters' answers: SQLite polls every 0.25 s, PostgreSQL is told at
once. The waits last 30 s and ``live`` puts PostgreSQL's safety poll at 120 s, so a waiter never woken (or
woken only by the safety poll, its notification lost) answers after 30 s at the earliest: a bound this far
under that tells them apart with room for a loaded machine (where an answer has taken over 0.9 s)."""


@pytest.fixture
def live(release_world, container):
    """The release_world's registry behind a real uvicorn with the default watcher intervals."""
    container.settings.event_poll_seconds = 0.25
    # Past every wait: only a notification (or SQLite's poll) answers a waiter before its wait runs out.
    container.settings.event_safety_poll_seconds = 120
    app = create_app(container)
    with serve_in_thread(app) as url:
        yield url, app.state.event_watcher


def _limited_threadpool(app, tokens: int):
    async def wrapped(scope, receive, send):
        anyio.to_thread.current_default_thread_limiter().total_tokens = tokens
        await app(scope, receive, send)
    return wrapped


async def _registered(watcher, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while watcher.waiting < count:
        assert time.monotonic() < deadline, f"{watcher.waiting} of {count} waiters registered"
        await asyncio.sleep(0.02)


async def _settled(watcher, container, tasks, waiting: int, timeout: float = 60) -> None:
    """Until the watcher has applied every event committed so far and each waiter it woke has either
    answered (its task is done) or registered again: ``waiting`` waits held, or a task done."""
    def committed_head() -> int:
        with container.engine.connect() as connection:
            return int(connection.execute(text("SELECT COALESCE(MAX(id), 0) FROM audit_events")).scalar() or 0)

    head = await asyncio.to_thread(committed_head)
    deadline = time.monotonic() + timeout
    while watcher.head < head or (watcher.waiting != waiting and not any(t.done() for t in tasks)):
        assert time.monotonic() < deadline, f"head {watcher.head} of {head}, {watcher.waiting} waiting"
        await asyncio.sleep(0.02)


def _etag(url, tokens, ref) -> str:
    r = httpx.get(url + BASE, headers=_as(tokens), params={"ref": ref}, timeout=30)
    assert r.status_code == 200, r.text
    return r.headers["ETag"]


async def _wait(http, tokens, ref, etag, wait=30, who="node"):
    r = await http.get(BASE, headers={**_as(tokens, who), "If-None-Match": etag}, params={"ref": ref, "wait": wait})
    return r, time.monotonic()


def test_a_promote_wakes_its_alias_s_waiters_at_once_and_no_others_and_a_revocation_wakes_the_version_s(
        release_world, live, container):
    _, tokens, admin = release_world
    url, watcher = live
    with container.session_factory() as session:
        from registry.domain.aliases import make_target
        from registry.services import aliases
        aliases.promote(session, admin, T, "llm", "staging", make_target(1), policy=container.policy,
                        clock=container.clock)
    etags = {ref: _etag(url, tokens, ref) for ref in ("prod", "staging", "1")}

    async def scenario():
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            prod = [asyncio.create_task(_wait(http, tokens, "prod", etags["prod"])) for _ in range(3)]
            others = [asyncio.create_task(_wait(http, tokens, ref, etags[ref])) for ref in ("staging", "staging", "1")]
            await _registered(watcher, 6)
            woken = watcher.woken
            await asyncio.to_thread(promote, container, admin, 2)
            promoted = time.monotonic()
            for r, at in await asyncio.gather(*prod):
                assert r.status_code == 200, r.text
                assert r.headers["ETag"] != etags["prod"]
                assert at - promoted < WAKE_WITHIN, at - promoted
            await _settled(watcher, container, others, 3)
            assert not any(t.done() for t in others), "a waiter whose alias and version did not change returned"
            assert watcher.woken - woken == 3, "waiters not concerned by the move were woken"
            assert watcher.waiting == 3
            # Version 1 (staging's, and the version ref's) is revoked: exactly those wake.
            await asyncio.to_thread(revoke, container, admin, 1)
            revoked = time.monotonic()
            for r, at in await asyncio.gather(*others):
                assert r.status_code == 409 and r.json()["type"].endswith("/revoked"), r.text
                assert at - revoked < WAKE_WITHIN, at - revoked
    asyncio.run(scenario())


def test_a_trust_root_rotation_wakes_every_waiter(release_world, live, container):
    _, tokens, _ = release_world
    url, watcher = live
    etags = {ref: _etag(url, tokens, ref) for ref in ("prod", "2")}

    def rotate():
        key = write_new_key(container.settings.data_dir.resolve() / "keys" / "signing-key-2.pem")
        with container.session_factory() as session:
            trust_roots.rotate(session, container.keyring, key, expires_in=__import__("datetime").timedelta(days=1),
                               clock=container.clock)
        return key.key_id

    async def scenario():
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            waits = [asyncio.create_task(_wait(http, tokens, ref, etags[ref])) for ref in ("prod", "2", "prod")]
            await _registered(watcher, 3)
            key_id = await asyncio.to_thread(rotate)
            rotated = time.monotonic()
            for r, at in await asyncio.gather(*waits):
                assert r.status_code == 200, r.text
                assert r.json()["envelope"]["signatures"][0]["keyid"] == key_id
                assert at - rotated < WAKE_WITHIN, at - rotated
    asyncio.run(scenario())


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_the_safety_net_poll_wakes_a_waiter_whose_notification_was_lost(release_world, container, monkeypatch):
    _, tokens, admin = release_world
    container.settings.event_safety_poll_seconds = 1.0
    app = create_app(container)
    with serve_in_thread(app) as url:
        watcher = app.state.event_watcher
        etag = _etag(url, tokens, "prod")
        # This process's appends notify a channel nobody listens on: the move is committed, unannounced.
        monkeypatch.setattr(audit, "NOTIFY_CHANNEL", "modelreg_nobody_listens")

        async def scenario():
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                waiting = asyncio.create_task(_wait(http, tokens, "prod", etag))
                await _registered(watcher, 1)
                await asyncio.to_thread(promote, container, admin, 2)
                promoted = time.monotonic()
                r, at = await waiting
                assert r.status_code == 200, r.text
                assert at - promoted < 1.0 + WAKE_WITHIN, at - promoted
        asyncio.run(scenario())


def test_many_waiters_hold_no_thread_and_a_plain_request_still_answers_at_once(release_world, container):
    _, tokens, _ = release_world
    container.settings.event_poll_seconds = 0.25
    app = create_app(container)
    with serve_in_thread(_limited_threadpool(app, 4), app.state.event_watcher) as url:
        watcher = app.state.event_watcher
        etag = _etag(url, tokens, "prod")

        async def scenario():
            limits = httpx.Limits(max_connections=300, max_keepalive_connections=300)
            async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
                waits = [asyncio.create_task(_wait(http, tokens, "prod", etag, wait=20)) for _ in range(200)]
                await _registered(watcher, 200, timeout=120)
                threads = threading.active_count()
                started = time.monotonic()
                r = await http.get(BASE, headers=_as(tokens), params={"ref": "prod"})
                assert r.status_code == 200, r.text
                # The waits last 20 s: answered well inside that, and with every wait still pending, the plain
                # request did not queue behind them (a loaded machine may still take seconds over it).
                assert time.monotonic() - started < 10
                assert not any(task.done() for task in waits)
                assert threading.active_count() == threads
                assert threads < 40, threads
                for task in waits:
                    task.cancel()
                await asyncio.gather(*waits, return_exceptions=True)
        asyncio.run(scenario())


def test_an_event_reader_waits_for_an_event_of_its_types_that_it_may_see(release_world, live, container):
    _, tokens, admin = release_world
    url, watcher = live
    head = httpx.get(url + "/v1/events", headers=_as(tokens), params={"limit": 1000}, timeout=30).json()["cursor"]

    async def scenario():
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            def read(who):
                return http.get("/v1/events", headers=_as(tokens, who),
                                params={"type": "version.revoked", "after": head, "wait": 30})
            mine = asyncio.create_task(read("node"))
            stranger = asyncio.create_task(read("other-node"))
            await _registered(watcher, 2)
            # An event of another type wakes the reader, which reads, finds nothing of its types and waits on.
            await asyncio.to_thread(promote, container, admin, 2)
            await _settled(watcher, container, (mine, stranger), 2)
            assert not mine.done() and not stranger.done()
            await asyncio.to_thread(revoke, container, admin, 1)
            revoked = time.monotonic()
            r = await mine
            assert time.monotonic() - revoked < WAKE_WITHIN
            body = r.json()
            assert [e["type"] for e in body["events"]] == ["dev.modelreg.version.revoked"], body
            assert body["cursor"] > head
            await _settled(watcher, container, (stranger,), 1)
            assert not stranger.done(), "a reader of another tenant woke on acme's revocation"
            stranger.cancel()
    asyncio.run(scenario())
