"""ASGI middleware that guards every route at once, before routing and before any database access."""

from __future__ import annotations

import logging
import re
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import problems
from registry import logs
from registry.domain.errors import InvalidTextError, LimitExceededError

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


MAX_BODY_BYTES = 16 << 20
"""The largest body a route that parses it (JSON, a console form, ``paths-info``) is given. The largest
legitimate one is an upload's file list at the limits (10,000 files, paths of 1,024 characters, a digest
and a size each: about 11.5 MB); no route needs more."""
STREAMED_BODIES = re.compile(r"\A(PUT /v1/blobs/sha256/[^/]+|PUT /v1/evalsets/[^/]+)\Z")
"""The routes that stream their bodies to storage, each bounding what it reads itself (after authorizing)."""


class BoundBodyMiddleware:
    """Answers 413 (``limit-exceeded``) to a body over :data:`MAX_BODY_BYTES`, before any route reads it.

    FastAPI reads a route's whole body before the route's dependencies run, authentication included, so
    without this anyone could make a process hold a body of any size. A declared ``Content-Length`` over
    the limit is refused without reading; a body of no declared length is read up to the limit and then
    handed on. Streaming uploads (:data:`STREAMED_BODIES`) are left to their routes.
    """

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or STREAMED_BODIES.match(f"{scope['method']} {scope['path']}"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(scope, receive, send)
            return
        if declared is not None and declared.isdigit():
            # The HTTP server delivers no more than the declared length.
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        size, more = 0, True
        while more:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
            if size > self.limit:
                await self._refuse(scope, receive, send)
                return
        queued = iter(messages)

        async def replay() -> Message:
            return next(queued, None) or await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = problems.problem(413, LimitExceededError.code, "LimitExceededError",
                                    f"request body over the limit of {self.limit} bytes", limit=self.limit)
        await response(scope, receive, send)


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


CONSOLE_HEADERS = [
    (b"content-security-policy",
     b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
     b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


class ConsoleHeadersMiddleware:
    """Adds the web console's security headers to every answer under ``/ui`` (its errors included).

    A Content-Security-Policy that allows scripts and styles from the console's own files only (no inline
    script, no inline style), frames denied both ways (``frame-ancestors 'none'`` and ``X-Frame-Options``),
    no MIME sniffing; pages are not cached (they show what one principal may see).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path != "/ui" and not path.startswith("/ui/"):
            await self.app(scope, receive, send)
            return
        static = path.startswith("/ui/static/")

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", [])
                           if k.lower() not in {name for name, _ in CONSOLE_HEADERS}]
                headers += CONSOLE_HEADERS
                if not static and not any(k.lower() == b"cache-control" for k, _ in headers):
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
