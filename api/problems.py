"""The one mapping from error class to HTTP status and RFC 9457 problem type, and its handlers.

Every deliberate error has a stable ``type`` URI, ``https://modelreg.dev/problems/<code>``, where
``<code>`` is the error class's ``code``. An error that is not a RegistryError is a 500 that logs the
traceback and says nothing more.

The same mapping documents the API: a router or route declares the error classes it can raise with
:func:`responses`, and the OpenAPI document states each resulting status as
``application/problem+json`` with the ``Problem`` schema.

Usage (a sketch, not run as a doctest)::

    router = APIRouter(responses=responses(*AUTHENTICATED, errors.NotFoundError))
    @router.post("/tenants", responses=responses(errors.AlreadyExistsError))
"""

from __future__ import annotations

import functools
import logging
import re
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
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
    (errors.TooManyRequestsError, 429),
    (errors.RegistryError, 400),
]


# What every route behind a bearer token can answer: no or a bad token, a role missing, bad input.
AUTHENTICATED: tuple[type[errors.RegistryError], ...] = (
    errors.AuthenticationError, errors.PermissionDeniedError, errors.InvalidInputError,
)


def status_for(exc: errors.RegistryError) -> int:
    return status_for_class(type(exc))


def status_for_class(cls: type[errors.RegistryError]) -> int:
    for branch, status in STATUS_BY_ERROR:
        if issubclass(cls, branch):
            return status
    return 500


class Problem(BaseModel):
    """An RFC 9457 problem: what every error answer of the API carries."""

    model_config = ConfigDict(extra="allow", title="Problem")

    type: str
    title: str
    status: int
    detail: str
    errors: list[dict[str, str]] | None = Field(
        None, description="invalid input: each field (`query.limit`, `name`...) and what is wrong with it")


_PROBLEM_SCHEMA = Problem.model_json_schema()


def responses(*raised: type[errors.RegistryError]) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses=`` of a router or route that can raise these errors.

    One problem+json response per status the classes map to; its description names their problem
    types (a subclass of one of them has a narrower type under the same status). A route's entry
    replaces its router's for the same status, so a route that adds a class under a status its
    router already documents lists the router's classes too.
    """
    codes: dict[int, list[str]] = {}
    for cls in raised:
        codes.setdefault(status_for_class(cls), []).append(cls.code)
    documented: dict[int | str, dict[str, Any]] = {}
    for status, types in sorted(codes.items()):
        response: dict[str, Any] = {
            "description": f"{HTTPStatus(status).phrase}: a problem of type {' or '.join(types)} "
                           "(or a narrower one)",
            "content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        if status == 401:
            response["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"},
                                                        "description": "Bearer"}}
        documented[status] = response
    return documented


def problem(status: int, code: str, title: str, detail: str, headers: dict[str, str] | None = None,
            **extra: Any) -> JSONResponse:
    body = {"type": PROBLEM_BASE + code, "title": title, "status": status, "detail": detail, **extra}
    headers = dict(headers or {})
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers or None)


def problem_for(exc: errors.RegistryError, headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    """The problem answer of a deliberate error: its status, type, message and details (and ``extra``)."""
    return problem(status_for(exc), exc.code, type(exc).__name__, exc.message, headers=headers,
                   **{**_jsonable(exc.details), **extra})


_documents: dict[tuple[Any, ...], dict[str, Any]] = {}


def install(app: FastAPI) -> None:
    """Install the error handlers, and the ``Problem`` schema the documented errors refer to."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        # Kept per process by what it describes: the apps of one process share their documented routes
        # (api/app.py), and making the document costs about 0.4 s of CPU.
        key = (app.title, app.version, tuple(id(r) for r in app.routes if getattr(r, "include_in_schema", False)))
        schema = _documents.get(key)
        if schema is None:
            schema = generate()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.setdefault("Problem", _PROBLEM_SCHEMA)
            _documents.clear()
            _documents[key] = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(errors.RegistryError)
    async def _registry_error(_request: Request, exc: errors.RegistryError) -> JSONResponse:
        # A transient refusal that knows when to ask again says so (RFC 9110 Retry-After, in seconds).
        retry_after = getattr(exc, "retry_after", None)
        return problem_for(exc, headers={"Retry-After": str(retry_after)} if retry_after is not None else None)

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
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # A body that is not even text ("There was an error parsing the body"): invalid input,
            # like the body that is text but not JSON, which FastAPI reports as a validation error.
            return problem(422, "invalid-input", "InvalidInputError", f"body: {exc.detail}")
        code = {404: "not-found", 405: "method-not-allowed", 401: "unauthenticated"}.get(exc.status_code, "http-error")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names the methods of one route on the path only; a path served by several
            # routes (GET and POST /v1/tenants) takes the methods of all, as the document lists them.
            headers["Allow"] = ", ".join(_documented_methods(request)) or headers.get("Allow", "")
        return problem(exc.status_code, code, "HTTPError", str(exc.detail), headers=headers)

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


def _documented_methods(request: Request) -> list[str]:
    """The methods the OpenAPI document lists for the request's path (and HEAD beside GET)."""
    methods: set[str] = set()
    for template, operations in request.app.openapi()["paths"].items():
        if _path_pattern(template).fullmatch(request.url.path):
            methods |= {method.upper() for method in operations}
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


@functools.cache
def _path_pattern(template: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)))


def _jsonable(details: dict[str, Any]) -> dict[str, Any]:
    reserved = {"type", "title", "status", "detail"}
    return {k: v for k, v in details.items()
            if k not in reserved and isinstance(v, (str, int, float, bool, list, dict, type(None)))}
