"""ASGI middleware that guards every route at once, before routing and before any database access."""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import problems
from registry import logs
from registry.domain.errors import InvalidTextError

access_log = logging.getLogger("modelreg.access")


class RefuseNulMiddleware:
    """Answers 422 (``invalid-text``) to a request whose path or query string holds a NUL character.

    PostgreSQL cannot store or even compare a NUL in text, so a name looked up from ``/principals/a%00``
    would fail inside the driver as a 500; no route has a use for one. Bodies are checked by their schemas
    (``FreeText``), headers by the HTTP parser.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            # The path arrives percent-decoded; the query string raw, where a NUL is "%00" (or a stray byte).
            query = scope["query_string"]
            where = ("path" if "\x00" in scope["path"] else
                     "query" if b"%00" in query or b"\x00" in query else None)
            if where is not None:
                response = problems.problem(422, InvalidTextError.code, "InvalidTextError",
                                            f"NUL character in the request {where}", field=where,
                                            reason="NUL character")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class RequestIdMiddleware:
    """Gives every request an id, returns it as ``X-Request-ID`` and logs one access line with it.

    A well-formed incoming ``X-Request-ID`` (a proxy's, a client's) is kept, so one id follows a request
    across services; otherwise one is made (``registry.logs.accept_request_id``). While the request runs,
    ``registry.logs.request_id`` holds it, so every line logged on its behalf carries it. The access line
    has the method, the path (no query string), the status and the duration: never a header or a body.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = next((v for k, v in scope["headers"] if k == b"x-request-id"), None)
        rid = logs.accept_request_id(incoming.decode("latin-1") if incoming is not None else None)
        token = logs.request_id.set(rid)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode())]
            await send(message)

        def log_access() -> None:
            access_log.info("%s %s %s", scope["method"], scope["path"], status, extra={"fields": {
                "method": scope["method"], "path": scope["path"], "status": status,
                "duration_ms": round((time.perf_counter() - started) * 1000, 1)}})

        try:
            await self.app(scope, receive, send_with_id)
        except BaseException:
            # The 500 is answered and its trace logged outside this middleware (Starlette's error
            # middleware), in this same task: the id stays set for that line, and ends with the task.
            log_access()
            raise
        log_access()
        logs.request_id.reset(token)
