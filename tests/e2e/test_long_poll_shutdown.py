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
                # The server's own count of the long polls it holds: every wait sent, checked once and registered.
                deadline = time.monotonic() + 60
                while await _long_polls_waiting(http) < WAITERS:
                    assert time.monotonic() < deadline, "the server never held every wait"
                    assert not any(t.done() for t in waits), [t.result() for t in waits if t.done()]
                    await asyncio.sleep(0.02)
                assert not any(t.done() for t in waits)
                stopped = time.monotonic()
                server.process.send_signal(signal.SIGTERM)
                answers = await asyncio.gather(*waits)
                return stopped, answers

        stopped, answers = asyncio.run(scenario())
        assert [status for status, _ in answers] == [304] * WAITERS
        # The waits were 60 s long: answered (304) and the server gone well inside that, the shutdown cut
        # them short rather than waiting them out; the bounds leave room for a loaded machine.
        assert max(at for _, at in answers) - stopped < 20
        server.process.wait(timeout=30)
        assert time.monotonic() - stopped < 30
    finally:
        server.stop()


async def _long_polls_waiting(http: httpx.AsyncClient) -> float:
    metrics = (await http.get("/metrics")).text
    [line] = [line for line in metrics.splitlines() if line.startswith("modelreg_long_polls_waiting ")]
    return float(line.split()[1])
