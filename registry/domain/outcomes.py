"""What a stage's work ends in: :class:`Pending`, :class:`Passed` or :class:`Failed`.

Stage work (``registry/services/stages/``) returns one of these and never moves the version itself;
the lifecycle (:mod:`registry.services.lifecycle`) turns it into the move: ``Passed`` to the next stage
that applies, ``Failed`` to ``failed`` with the reason recorded, ``Pending`` nowhere (jobs are queued,
and the job that finishes the work reports the outcome then).

Example:
    >>> from registry.domain.errors import InvalidInputError
    >>> Failed.from_error(InvalidInputError("no files", reason="empty")).reason
    'invalid_input'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from registry.domain.errors import RegistryError


@dataclass(frozen=True, slots=True)
class Pending:
    """The work is under way (jobs queued, or results still missing): the version stays where it is."""


@dataclass(frozen=True, slots=True)
class Passed:
    """The work is done and found nothing against the version: it moves on.

    Attributes:
        details: the audit details of the move on (``version.scanned``'s verdicts, ``version.sealed``'s digest).
    """

    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Failed:
    """The work failed the version.

    Attributes:
        reason: the version's ``failure_reason`` (``unsafe_file``, ``scan_error``, ``upstream``...).
        detail: the version's ``failure_detail`` (what a reader is shown).
        event: the ``version.failed`` audit details; ``{"reason": reason, **detail}`` when not given.
    """

    reason: str
    detail: dict[str, Any] = field(default_factory=dict)
    event: dict[str, Any] | None = None

    @property
    def audit_details(self) -> dict[str, Any]:
        return self.event if self.event is not None else {"reason": self.reason, **self.detail}

    @classmethod
    def from_error(cls, error: RegistryError) -> "Failed":
        """The failure a registry error stands for: its code as the reason, its data as the detail."""
        detail = {"error": type(error).__name__, "message": error.message,
                  **{k: v for k, v in error.details.items() if _jsonable(v)}}
        return cls(error.code.replace("-", "_"), detail)


Outcome = Union[Pending, Passed, Failed]
"""What stage work returns."""


def _jsonable(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool, type(None), list, dict))
