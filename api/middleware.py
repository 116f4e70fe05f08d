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
