"""The one mapping from error class to HTTP status and RFC 9457 problem type, and its handlers.

Every deliberate error has a stable ``type`` URI, ``https://modelreg.dev/problems/<code>``, where
``<code>`` is the error class's ``code``. An error that is not a RegistryError is a 500 that logs the
traceback and says nothing more.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from registry.domain import errors, text

log = logging.getLogger(__name__)

PROBLEM_BASE = "https://modelreg.dev/problems/"
MEDIA_TYPE = "application/problem+json"
LISTED_ERRORS = 20

# Most specific first: the first matching class decides.
STATUS_BY_ERROR: list[tuple[type[errors.RegistryError], int]] = [
    (errors.RangeNotSatisfiableError, 416),
    (errors.LimitExceededError, 413),
    (errors.InvalidInputError, 422),
    (errors.AuthenticationError, 401),
    (errors.PermissionDeniedError, 403),
    (errors.NotFoundError, 404),
    (errors.ConflictError, 409),
    (errors.PolicyViolationError, 403),
    (errors.IntegrityError, 422),
    (errors.UpstreamError, 502),
    (errors.ServiceUnavailableError, 503),
    (errors.RegistryError, 400),
]


def status_for(exc: errors.RegistryError) -> int:
    for cls, status in STATUS_BY_ERROR:
        if isinstance(exc, cls):
            return status
    return 500


def problem(status: int, code: str, title: str, detail: str, **extra: Any) -> JSONResponse:
    body = {"type": PROBLEM_BASE + code, "title": title, "status": status, "detail": detail, **extra}
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def install(app: FastAPI) -> None:
    @app.exception_handler(errors.RegistryError)
    async def _registry_error(_request: Request, exc: errors.RegistryError) -> JSONResponse:
        status = status_for(exc)
        return problem(status, exc.code, type(exc).__name__, exc.message, **_jsonable(exc.details))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        found = exc.errors()
        # A list of thousands of bad entries is answered with the first few and the count.
        fields = [
            {"field": ".".join(str(p) for p in e.get("loc", ()) if p != "body"), "message": e.get("msg", "")}
            for e in found[:LISTED_ERRORS]
        ]
        more = f" (and {len(found) - len(fields)} more)" if len(found) > len(fields) else ""
        detail = "; ".join(f"{f['field']}: {f['message']}" for f in fields) + more or "invalid request"
        # Refused free text has its own type, as when a service refuses it (InvalidTextError).
        if fields and all(e.get("type") == text.PYDANTIC_ERROR_TYPE for e in found):
            return problem(422, errors.InvalidTextError.code, "InvalidTextError", detail,
                           errors=fields, errors_count=len(found))
        return problem(422, "invalid-input", "InvalidInputError", detail,
                       errors=fields, errors_count=len(found))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not-found", 405: "method-not-allowed", 401: "unauthenticated"}.get(exc.status_code, "http-error")
        return problem(exc.status_code, code, "HTTPError", str(exc.detail))

    @app.exception_handler(ClientDisconnect)
    async def _client_disconnect(request: Request, _exc: ClientDisconnect) -> Response:
        # Not an error of ours: the client went away while sending its body (nothing of it was kept).
        # One line, no traceback; the answer below goes nowhere.
        log.info("client disconnected before sending the whole request body: %s %s",
                 request.method, request.url.path)
        return Response(status_code=400)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(500, "internal", "InternalError", "internal server error")


def _jsonable(details: dict[str, Any]) -> dict[str, Any]:
    reserved = {"type", "title", "status", "detail"}
    return {k: v for k, v in details.items() if k not in reserved and isinstance(v, (str, int, float, bool, list, dict, type(None)))}
