"""The handlers a worker knows: one per job kind.

A handler's ``run`` receives the container and the job's payload (ids, never objects) and either
returns (the job succeeded) or raises (the worker decides from the error whether to retry). It must
be idempotent: a job may run twice, or again after a crash halfway. ``on_dead`` runs once when the
job gives up for good, e.g. to mark the model version it belongs to as failed; it gets the recorded
error (text) and the exception of the last attempt (None when that attempt's lease ran out).

Example:
    >>> handlers = HandlerRegistry()
    >>> _ = handlers.register(Handler("noop", lambda container, payload: None))
    >>> handlers.kinds()
    ['noop']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from registry.bootstrap import Container

Payload = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Handler:
    """How to run one kind of job.

    Attributes:
        kind: the job kind it handles (``mirror_file``, ``seal_version``, ...).
        run: does the work; raises on failure.
        on_dead: called with the payload, the last error and its exception (None when the last
            attempt's lease ran out) once the job is dead (out of attempts, or failed with an error
            that retrying cannot fix).
    """

    kind: str
    run: Callable[[Container, Payload], None]
    on_dead: Callable[[Container, Payload, str, BaseException | None], None] | None = None


class HandlerRegistry:
    """Job kind → handler. A worker claims only the kinds registered here."""

    def __init__(self, handlers: list[Handler] | None = None) -> None:
        self._handlers: dict[str, Handler] = {}
        for handler in handlers or []:
            self.register(handler)

    def register(self, handler: Handler) -> Handler:
        """Add a handler.

        Raises:
            ValueError: a handler for this kind is already registered (two would be ambiguous).
        """
        if handler.kind in self._handlers:
            raise ValueError(f"a handler for job kind {handler.kind!r} is already registered")
        self._handlers[handler.kind] = handler
        return handler

    def get(self, kind: str) -> Handler:
        """The handler of ``kind``.

        Raises:
            KeyError: no handler for this kind.
        """
        return self._handlers[kind]

    def kinds(self) -> list[str]:
        """The registered kinds, sorted."""
        return sorted(self._handlers)

    def __contains__(self, kind: object) -> bool:
        return kind in self._handlers

    def __len__(self) -> int:
        return len(self._handlers)
