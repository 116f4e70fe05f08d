"""Free text: one check for every field a person types, and one way to show text that came from elsewhere.

Labels, revisions, token descriptions, globs and comments are stored, signed into manifests and shown to
reviewers, so each is bounded in length and refused when it holds a character that changes how text is
shown or stored rather than what it says:

- control characters (C0, DEL and C1): PostgreSQL cannot store a NUL, and an ESC drives the terminal of
  whoever lists the value;
- Unicode bidirectional formatting characters (embeddings, overrides, isolates and the implicit marks),
  which reorder what a reviewer reads ("Trojan Source", CVE-2021-42574);
- lone surrogates, which a JSON string can carry but UTF-8 cannot encode.

Labels (an upload's label, a revision) name something, so they are held to more: no character that shows
as nothing or as a break either (Unicode categories Cf, Zl, Zp, and Zs other than the ASCII space: U+200B,
U+00AD, U+2028, U+00A0...), or ``tiny\u200b`` reads as ``tiny`` to the reviewer who approves it.

``validate_text`` is the check for services (``validate_label`` for labels); ``FreeText(n)`` (``Label(n)``)
is the same check as a pydantic type for API bodies. ``printable`` escapes those characters visibly wherever text from a
server or an upstream is shown.

Example:
    >>> validate_text("main", field="revision", max_length=256)
    'main'
    >>> printable("model\\u202etxt.exe\\x1b[2J")
    'model\\\\u202etxt.exe\\\\x1b[2J'
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated, Any

from registry.domain.errors import InvalidTextError

# C0 and C1 controls (Unicode category Cc), then the bidirectional formatting characters: the Arabic
# letter mark, LRM/RLM, the embeddings and overrides LRE..RLO with PDF, and the isolates LRI..PDI;
# last the lone surrogates a JSON string can carry ("\\ud800"), which no UTF-8 database can store.
_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")

# The longest value of each free-text field (the database columns hold at least as much).
MAX_LABEL_LENGTH = 256
MAX_REVISION_LENGTH = 256
MAX_DESCRIPTION_LENGTH = 256
MAX_SOURCE_LENGTH = 1024
MAX_COMMENT_LENGTH = 4096

# The pydantic error type of FreeText; api/problems.py reports it as the problem type `invalid-text`.
PYDANTIC_ERROR_TYPE = "invalid_text"


def _describe(char: str) -> str:
    return f"U+{ord(char):04X}"


def text_problem(value: str, max_length: int) -> tuple[str, dict[str, Any]] | None:
    """Why ``value`` is not acceptable free text (a reason and its data), or None when it is."""
    if len(value) > max_length:
        return f"longer than {max_length} characters", {"max_length": max_length}
    found = _FORBIDDEN.search(value)
    if found is not None:
        char = found.group()
        kind = ("NUL" if char == "\x00" else "control" if char < "\u00a0" else
                "surrogate" if "\ud800" <= char <= "\udfff" else "bidirectional")
        return (f"{kind} character {_describe(char)} at position {found.start()}",
                {"character": _describe(char), "position": found.start()})
    return None


# Format (zero-width, soft hyphen, BOM...), line and paragraph separators, and spaces; the ASCII space is
# allowed by itself. Cc is refused by text_problem already.
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Zl", "Zp", "Zs"})


def label_problem(value: str, max_length: int) -> tuple[str, dict[str, Any]] | None:
    """Why ``value`` is not an acceptable label (a reason and its data), or None when it is."""
    problem = text_problem(value, max_length)
    if problem is not None:
        return problem
    for position, char in enumerate(value):
        if char != " " and unicodedata.category(char) in _INVISIBLE_CATEGORIES:
            return (f"invisible or separator character {_describe(char)} at position {position}",
                    {"character": _describe(char), "position": position})
    return None


def validate_label(value: str, *, field: str, max_length: int) -> str:
    """Return ``value`` if it is an acceptable label for ``field``: free text without invisible characters.

    Args:
        value: What the person typed.
        field: The field's name, for the error.
        max_length: The most characters the field holds.

    Raises:
        InvalidTextError: ``value`` is not a string, is too long, or holds a control, bidirectional,
            format, separator or non-ASCII space character.
    """
    if not isinstance(value, str):
        raise InvalidTextError(field, "not a string")
    problem = label_problem(value, max_length)
    if problem is not None:
        raise InvalidTextError(field, problem[0], **problem[1])
    return value


def validate_text(value: str, *, field: str, max_length: int) -> str:
    """Return ``value`` if it is acceptable free text for ``field``.

    Args:
        value: What the person typed.
        field: The field's name, for the error.
        max_length: The most characters the field holds.

    Raises:
        InvalidTextError: ``value`` is not a string, is longer than ``max_length``, or holds a control
            or bidirectional formatting character.
    """
    if not isinstance(value, str):
        raise InvalidTextError(field, "not a string")
    problem = text_problem(value, max_length)
    if problem is not None:
        raise InvalidTextError(field, problem[0], **problem[1])
    return value


def _pydantic_check(max_length: int, problem_of=text_problem):  # noqa: ANN202
    from pydantic_core import PydanticCustomError

    def check(value: Any) -> Any:
        # Non-strings are left to pydantic's own str validation, which names the wrong type.
        if isinstance(value, str):
            problem = problem_of(value, max_length)
            if problem is not None:
                raise PydanticCustomError(PYDANTIC_ERROR_TYPE, problem[0], problem[1])
        return value

    return check


def FreeText(max_length: int) -> Any:  # noqa: N802 - it names a type
    """The pydantic type of a free-text field of at most ``max_length`` characters (see validate_text).

    Example:
        ``description: FreeText(256) = ""`` in a request body.
    """
    # Imported here: file paths use this module, and the signing package and the client import no pydantic.
    from pydantic import BeforeValidator, Field

    return Annotated[str, BeforeValidator(_pydantic_check(max_length)), Field(max_length=max_length)]


def Label(max_length: int) -> Any:  # noqa: N802 - it names a type
    """The pydantic type of a label of at most ``max_length`` characters (see validate_label)."""
    from pydantic import BeforeValidator, Field

    return Annotated[str, BeforeValidator(_pydantic_check(max_length, label_problem)), Field(max_length=max_length)]


def printable(text: str) -> str:
    """``text`` with every control and bidirectional formatting character escaped visibly (``\\x1b``)."""
    return _FORBIDDEN.sub(lambda m: f"\\x{ord(m.group()):02x}" if m.group() <= "\xff"
                          else f"\\u{ord(m.group()):04x}", text)
