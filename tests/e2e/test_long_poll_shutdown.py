"""A stopping ``modelreg serve`` answers every waiting long-poll at once (304) and exits within its grace."""

from __future__ import annotations

import asyncio
import signal
import time

import httpx

from tests.support.release_seed import MODEL, TENANT, seed_release
from tests.support.server import start_server

PATH = f"/v1/models/{TENANT}/{MODEL}/manifest"
WAITERS = 50


def test_sigterm_answers_every_waiter_304_at_once_and_the_process_exits(tmp_path):
    data_dir = tmp_path / "data"
    token = seed_release(data_dir, 1)[0]
    server = start_server(data_dir, workers=0)
    try:
        auth = {"Authorization": f"Bearer {token}"}
        first = httpx.get(server.url + PATH, params={"ref": "prod"}, headers=auth, timeout=30)
        assert first.status_code == 200, first.text
        etag = first.headers["ETag"]

        async def scenario():
            limits = httpx.Limits(max_connections=WAITERS + 5)
            async with httpx.AsyncClient(base_url=server.url, timeout=90, limits=limits) as http:
                async def wait():
                    r = await http.get(PATH, params={"ref": "prod", "wait": 60},
                                       headers={**auth, "If-None-Match": etag})
                    return r.status_code, time.monotonic()
                waits = [asyncio.create_task(wait()) for _ in range(WAITERS)]
                await asyncio.sleep(6)  # every wait sent, issued once (304) and registered, on a busy machine too
                assert not any(t.done() for t in waits)
                stopped = time.monotonic()
                server.process.send_signal(signal.SIGTERM)
                answers = await asyncio.gather(*waits)
                return stopped, answers

        stopped, answers = asyncio.run(scenario())
        assert [status for status, _ in answers] == [304] * WAITERS
        assert max(at for _, at in answers) - stopped < 2.0
        server.process.wait(timeout=10)
        assert time.monotonic() - stopped < 10
    finally:
        server.stop()
