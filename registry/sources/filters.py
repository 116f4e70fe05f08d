"""Include/exclude globs over the POSIX paths of an upstream listing, shared by every source.

The rules are those of ``.gitignore`` patterns, which users already know:

- ``*`` and ``?`` never cross a ``/``; ``[abc]`` is a character class;
- a ``**`` segment matches any number of directories, zero included (``**/*.json``, ``onnx/**``);
- a pattern without a ``/`` matches the file's name at any depth (``*.safetensors``, ``tokenizer.*``);
- a pattern with a ``/`` is anchored at the repository root (``onnx/model.onnx``); a leading ``/`` only
  anchors a pattern that has no other ``/`` (``/config.json``);
- a trailing ``/`` matches everything below that directory (``original/``).

A file is selected when it matches some include pattern (or there are none) and no exclude pattern.

Example:
    >>> f = FileFilter(include=["*.safetensors", "*.json"], exclude=["original/"])
    >>> [p for p in ["model.safetensors", "config.json", "original/x.json", "a.bin"] if f.matches(p)]
    ['model.safetensors', 'config.json']
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence, TypeVar

from registry.domain.errors import InvalidInputError, InvalidPathError
from registry.domain.files import validate_path

T = TypeVar("T")


def _segment_regex(segment: str, pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = segment.find("]", i + 2 if segment[i + 1 : i + 2] in ("!", "^") else i + 1)
            if end < 0:
                raise InvalidInputError(f"unclosed '[' in glob {pattern!r}", pattern=pattern)
            body = segment[i + 1 : end]
            negate = body[:1] in ("!", "^")
            if negate:
                body = body[1:]
            # A class never matches "/": paths are split into segments by it.
            body = body.replace("\\", "\\\\").replace("]", "\\]")
            out.append(f"[^/{body}]" if negate else f"(?![/])[{body}]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def compile_glob(pattern: str) -> re.Pattern[str]:
    """Compile one glob into a regular expression over a whole relative POSIX path.

    Args:
        pattern: A glob following the rules in the module docstring.

    Raises:
        InvalidInputError: the pattern is empty or malformed.
    """
    if not isinstance(pattern, str) or not pattern.strip():
        raise InvalidInputError("empty glob pattern", pattern=str(pattern))
    if "\\" in pattern:
        raise InvalidInputError(f"backslash in glob {pattern!r}; use '/'", pattern=pattern)
    body = pattern
    directory = body.endswith("/")
    body = body.rstrip("/")
    anchored = "/" in body
    body = body.lstrip("/")
    if not body:
        raise InvalidInputError(f"glob {pattern!r} matches nothing", pattern=pattern)
    segments = body.split("/")
    if directory:
        segments.append("**")
    parts: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            # "a/**" needs at least one segment below "a"; "**/b" and "a/**/b" allow zero directories.
            parts.append(".+" if last else "(?:[^/]+/)*")
        else:
            parts.append(_segment_regex(segment, pattern) + ("" if last else "/"))
    regex = "".join(parts)
    if not anchored:
        regex = "(?:[^/]+/)*" + regex
    return re.compile(f"^{regex}$", re.DOTALL)


@dataclass(frozen=True)
class FileFilter:
    """Include/exclude globs; an empty include list selects every file.

    Raises:
        InvalidInputError: on construction, when a pattern is malformed.
    """

    include: Sequence[str] = ()
    exclude: Sequence[str] = ()
    _include: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _exclude: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.include, str) or isinstance(self.exclude, str):
            raise InvalidInputError("include/exclude must be lists of globs, not one string")
        object.__setattr__(self, "include", tuple(self.include or ()))
        object.__setattr__(self, "exclude", tuple(self.exclude or ()))
        object.__setattr__(self, "_include", tuple(compile_glob(p) for p in self.include))
        object.__setattr__(self, "_exclude", tuple(compile_glob(p) for p in self.exclude))

    def matches(self, path: str) -> bool:
        """Whether ``path`` (a clean relative POSIX path) is selected."""
        if self._include and not any(p.match(path) for p in self._include):
            return False
        return not any(p.match(path) for p in self._exclude)

    def select(self, items: Iterable[T], path_of=lambda item: item.path) -> list[T]:  # noqa: ANN001
        """Validate a whole upstream listing, then keep the selected items.

        Every listed path is checked, excluded ones too: a listing that names ``../evil.txt`` comes
        from a hostile or broken upstream, whatever the user asked to mirror.

        Args:
            items: The listing (``UpstreamFile`` or anything with a path).
            path_of: How to read an item's path.

        Raises:
            InvalidPathError: a path is not clean, or two paths are equal once case-folded, or a
                path is both a file and a directory.
        """
        listed = list(items)
        folded: dict[str, str] = {}
        for item in listed:
            path = validate_path(path_of(item))
            key = path.casefold()
            if key in folded:
                raise InvalidPathError(path, f"duplicate of {folded[key]!r} (paths are compared case-folded)")
            folded[key] = path
        for key, path in folded.items():
            parent = key
            while "/" in parent:
                parent = parent.rsplit("/", 1)[0]
                if parent in folded:
                    raise InvalidPathError(folded[parent], f"is both a file and the directory of {path!r}")
        return [item for item in listed if self.matches(path_of(item))]


ALL_FILES = FileFilter()
