"""Include/exclude globs over the POSIX paths of an upstream listing, shared by every source.

The rules are those of ``.gitignore`` patterns, which users already know:

- ``*`` and ``?`` never cross a ``/``; ``[abc]`` is a character class;
- a ``**`` segment matches any number of directories, zero included (``**/*.json``, ``onnx/**``);
- a pattern without a ``/`` matches the file's name at any depth (``*.safetensors``, ``tokenizer.*``);
- a pattern with a ``/`` is anchored at the repository root (``onnx/model.onnx``); a leading ``/`` only
  anchors a pattern that has no other ``/`` (``/config.json``);
- a trailing ``/`` matches everything below that directory (``original/``).

A file is selected when it matches some include pattern (or there are none) and no exclude pattern.

Globs come from whoever submits, so matching does bounded work: a path is matched segment by segment,
and a segment character by character, by a small automaton that never backtracks (time linear in
pattern x path; a regular expression of nested ``**`` once took seconds per path). A glob holds at most
MAX_GLOB_LENGTH characters and a filter at most MAX_GLOBS include and MAX_GLOBS exclude globs.

Example:
    >>> f = FileFilter(include=["*.safetensors", "*.json"], exclude=["original/"])
    >>> [p for p in ["model.safetensors", "config.json", "original/x.json", "a.bin"] if f.matches(p)]
    ['model.safetensors', 'config.json']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence, TypeVar

from registry.domain.errors import InvalidGlobError, InvalidInputError, InvalidPathError
from registry.domain.files import validate_path
from registry.domain.text import validate_text

T = TypeVar("T")

# Bounds on the work one submission asks for: each glob is matched against every listed path.
MAX_GLOB_LENGTH = 256
MAX_GLOBS = 100  # include globs, and exclude globs, of one filter

# A token of a wildcard sequence: a test of one item, or RUN for any run of items (zero included).
RUN = None
Token = Callable[[str], bool] | None


class _Wildcard:
    """Matches a sequence of items against tokens without backtracking (a bit-parallel NFA, "Shift-And").

    Bit ``i`` of the state means "the tokens before ``i`` matched the items read so far", so each item costs
    one pass over the live tokens: matching is linear in tokens x items whatever the pattern. The same
    machine matches characters of a path segment (``*`` is a run) and segments of a path (``**`` is a run).
    """

    def __init__(self, tokens: Sequence[Token]) -> None:
        self._tokens = tuple(tokens)
        self._runs = sum(1 << i for i, t in enumerate(self._tokens) if t is RUN)
        self._done = 1 << len(self._tokens)
        self._singles = (self._done - 1) & ~self._runs
        self._start = self._close(1)

    def _close(self, state: int) -> int:
        # A run may be empty: standing before it is also standing after it.
        while True:
            wider = state | ((state & self._runs) << 1)
            if wider == state:
                return state
            state = wider

    def _hits(self, item: str, live: int) -> int:
        """The live single-item tokens that accept ``item``."""
        hits = 0
        while live:
            low = live & -live
            if self._tokens[low.bit_length() - 1](item):  # type: ignore[misc]
                hits |= low
            live ^= low
        return hits

    def matches(self, items: Iterable[str]) -> bool:
        state = self._start
        for item in items:
            state = self._close((self._hits(item, state & self._singles) << 1) | (state & self._runs))
            if not state:
                return False
        return bool(state & self._done)


class _SegmentWildcard(_Wildcard):
    """A wildcard over the characters of one segment; which tokens a character hits is worked out once."""

    def __init__(self, tokens: Sequence[Token]) -> None:
        super().__init__(tokens)
        self._hits_by_char: dict[str, int] = {}

    def _hits(self, item: str, live: int) -> int:
        hits = self._hits_by_char.get(item)
        if hits is None:
            hits = self._hits_by_char[item] = super()._hits(item, self._singles)
        return hits & live


def _class_token(body: str, negate: bool, pattern: str) -> Callable[[str], bool]:
    chars: set[str] = set()
    ranges: list[tuple[str, str]] = []
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            if body[i] > body[i + 2]:
                raise InvalidGlobError(pattern, f"reversed range {body[i:i + 3]!r}")
            ranges.append((body[i], body[i + 2]))
            i += 3
        else:
            chars.add(body[i])
            i += 1

    def member(c: str) -> bool:
        return c in chars or any(lo <= c <= hi for lo, hi in ranges)

    # A segment never holds "/", so no class can match one.
    return (lambda c: not member(c)) if negate else member


def _segment_tokens(segment: str, pattern: str) -> list[Token]:
    tokens: list[Token] = []
    i = 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            if tokens[-1:] != [RUN]:
                tokens.append(RUN)
        elif c == "?":
            tokens.append(lambda _c: True)
        elif c == "[":
            negate = segment[i + 1 : i + 2] in ("!", "^")
            end = segment.find("]", i + 2 if negate else i + 1)
            if end < 0:
                raise InvalidGlobError(pattern, "unclosed '['")
            body = segment[i + (2 if negate else 1) : end]
            if not body and not negate:
                raise InvalidGlobError(pattern, "empty '[]'")
            tokens.append(_class_token(body, negate, pattern))
            i = end
        else:
            tokens.append(c.__eq__)
        i += 1
    return tokens


class Glob:
    """One compiled glob; :meth:`match` takes time linear in the pattern's and the path's lengths."""

    def __init__(self, pattern: str, segments: Sequence[Token]) -> None:
        self.pattern = pattern
        self._path = _Wildcard(segments)

    def match(self, path: str) -> bool:
        """Whether the clean relative POSIX ``path`` matches."""
        return self._path.matches(path.split("/"))

    def __repr__(self) -> str:
        return f"Glob({self.pattern!r})"


def compile_glob(pattern: str) -> Glob:
    """Compile one glob into a matcher of whole relative POSIX paths.

    Args:
        pattern: A glob following the rules in the module docstring.

    Raises:
        InvalidGlobError: the pattern is empty or malformed.
        InvalidTextError: the pattern is longer than MAX_GLOB_LENGTH or holds a control or bidirectional
            formatting character.
    """
    if not isinstance(pattern, str) or not pattern.strip():
        raise InvalidGlobError(str(pattern), "empty glob")
    validate_text(pattern, field="glob", max_length=MAX_GLOB_LENGTH)
    if "\\" in pattern:
        raise InvalidGlobError(pattern, "backslash in glob; use '/'")
    body = pattern
    directory = body.endswith("/")
    body = body.rstrip("/")
    anchored = "/" in body
    body = body.lstrip("/")
    if not body:
        raise InvalidGlobError(pattern, "matches nothing")
    segments: list[Token] = [] if anchored else [RUN]
    names = body.split("/")
    if directory:
        names.append("**")
    for index, name in enumerate(names):
        if name == "**":
            # "a/**" needs at least one segment below "a"; "**/b" and "a/**/b" allow zero directories.
            if index == len(names) - 1:
                segments.append(lambda _segment: True)
            if segments[-1:] != [RUN]:
                segments.append(RUN)
        else:
            segments.append(_SegmentWildcard(_segment_tokens(name, pattern)).matches)
    return Glob(pattern, segments)


@dataclass(frozen=True)
class FileFilter:
    """Include/exclude globs; an empty include list selects every file.

    Raises:
        InvalidInputError: on construction, when a pattern is malformed or there are too many.
    """

    include: Sequence[str] = ()
    exclude: Sequence[str] = ()
    _include: tuple[Glob, ...] = field(init=False, repr=False, compare=False)
    _exclude: tuple[Glob, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.include, str) or isinstance(self.exclude, str):
            raise InvalidInputError("include/exclude must be lists of globs, not one string")
        object.__setattr__(self, "include", tuple(self.include or ()))
        object.__setattr__(self, "exclude", tuple(self.exclude or ()))
        for globs in (self.include, self.exclude):
            if len(globs) > MAX_GLOBS:
                raise InvalidGlobError(f"{len(globs)} globs",
                                       f"more than {MAX_GLOBS} include or exclude globs", limit=MAX_GLOBS)
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
