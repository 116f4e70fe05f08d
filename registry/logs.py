"""Process logging: text or JSON lines, each line of an API request carrying that request's id.

``configure`` is called once by ``modelreg serve`` and ``modelreg worker`` (``MODELREG_LOG_FORMAT``);
the API's request-id middleware sets :data:`request_id` for the duration of a request, and every record
logged while it is set (by the middleware, a router, a service, the database layer) carries it.

What is logged is chosen so that neither a token nor file contents can appear: the access line holds
the method, the path without its query string (presigned URLs carry signatures there), the status and
the duration; headers and bodies are never logged.

Usage (a sketch, not run as a doctest)::

    configure("json")
    logging.getLogger("modelreg").info("started")
    # -> {"time": "...", "level": "INFO", "logger": "modelreg", "message": "started"}
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import uuid
from contextvars import ContextVar

request_id: ContextVar[str | None] = ContextVar("modelreg_request_id", default=None)
"""The id of the API request this context serves, or None outside a request."""

_WELL_FORMED = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def accept_request_id(incoming: str | None) -> str:
    """The caller's ``X-Request-ID`` when it is a plain token of at most 128 characters, else a new id.

    A malformed one (spaces, quotes, control characters, too long) is replaced, never echoed or logged:
    it could forge log lines or carry what should not be logged.
    """
    if incoming is not None and _WELL_FORMED.fullmatch(incoming):
        return incoming
    return uuid.uuid4().hex


class RequestIdFilter(logging.Filter):
    """Stamps each record with the request id current where it is logged (``record.request_id``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, request_id when in a
    request, the fields a record was given with ``extra={"fields": {...}}``, and the exception's trace."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
        }
        rid = getattr(record, "request_id", None)
        if rid is not None:
            line["request_id"] = rid
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update({k: v for k, v in fields.items() if k not in line})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class _RequestIdText(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        rid = getattr(record, "request_id", None)
        return f"{text} [request_id={rid}]" if rid is not None else text


def handler(log_format: str) -> logging.Handler:
    """A stderr handler writing ``json`` or ``text`` lines."""
    out = logging.StreamHandler()
    out.setFormatter(JsonFormatter() if log_format == "json" else _RequestIdText(TEXT_FORMAT))
    out.addFilter(RequestIdFilter())
    return out


def configure(log_format: str = "text", level: str = "INFO") -> None:
    """Send every logger's records (uvicorn's too) to one handler in ``log_format``; idempotent."""
    root = logging.getLogger()
    root.handlers[:] = [handler(log_format)]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error"):
        # uvicorn's own handlers would write its lines a second time, in its format.
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # These log whole URLs, query strings included (a presigned URL's signature is one); our access line
    # logs the path alone.
    for name in ("uvicorn.access", "httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
