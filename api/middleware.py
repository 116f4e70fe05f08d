"""ASGI middleware that guards every route at once, before routing and before any database access."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from api import problems
from registry.domain.errors import InvalidTextError


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
