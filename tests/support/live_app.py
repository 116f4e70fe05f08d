"""An ASGI app served by a real uvicorn server in a thread, on a free loopback port."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

import uvicorn

from tests.support.server import free_port


@contextmanager
def serve_in_thread(app: Any, watcher: Any = None) -> Iterator[str]:
    """Yield the base URL while uvicorn serves ``app``; its log records go to the root logger (caplog).

    At the end every long poll is answered at once, as ``modelreg serve`` does on a stop: ``watcher``
    (default: the app's own ``state.event_watcher``, where it has one) is released before uvicorn drains
    its requests, so a test's last waits do not hold the stop for their whole ``wait=``.
    """
    if watcher is None:
        watcher = getattr(getattr(app, "state", None), "event_watcher", None)
    port = free_port()
    # log_config=None: uvicorn leaves logging alone, so its records propagate where the test captures them.
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, log_level="info",
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        if watcher is not None:
            watcher.release_all_threadsafe()
        server.should_exit = True
        thread.join(timeout=30)
