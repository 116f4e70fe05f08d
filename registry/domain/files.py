"""File paths, digests and file entries: the identity of a version's contents.

A version's file list is a set of :class:`FileEntry` whose paths are clean relative POSIX paths.
``validate_path`` is applied at mirror, at signing and at fetch, so a name such as ``../x`` can never
reach a filesystem.

Example:
    >>> validate_path("tokenizer/vocab.json")
    'tokenizer/vocab.json'
    >>> validate_file_list([FileEntry("a", 1, "00" * 32)])[0].path
    'a'
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Iterable

from registry.domain.errors import InvalidInputError, InvalidPathError
from registry.domain.text import text_problem

WEIGHT_FORMATS: dict[str, str] = {
    ".safetensors": "safetensors", ".gguf": "gguf", ".gguf.part": "gguf", ".bin": "pytorch", ".pt": "pytorch",
    ".pth": "pytorch", ".ckpt": "pytorch", ".ot": "pytorch", ".onnx": "onnx", ".h5": "keras", ".keras": "keras",
    ".msgpack": "flax", ".pb": "tensorflow", ".tflite": "tflite", ".npz": "numpy", ".npy": "numpy",
    ".pkl": "pickle", ".pickle": "pickle", ".joblib": "joblib", ".mlmodel": "coreml",
}
"""The one table of weight files: each suffix and the format it holds (facts' formats, ModelPack's weight
layers). ``.ot`` is libtorch's tensor archive (rust-bert); ``.gguf.part`` a split GGUF's piece."""


# \Z, not $: "$" also matches before a final newline.
SHA256_RE = re.compile(r"\A[0-9a-f]{64}\Z")
SHA1_RE = re.compile(r"\A[0-9a-f]{40}\Z")
MAX_PATH_LENGTH = 1024


def is_sha256(value: str) -> bool:
    return bool(SHA256_RE.match(value))


def require_sha256(value: str) -> str:
    """Return ``value`` if it is a lower-case hex sha256, else raise InvalidInputError."""
    if not isinstance(value, str) or not is_sha256(value):
        raise InvalidInputError(f"not a sha256 hex digest: {value!r}", digest=str(value))
    return value


def validate_path(path: str) -> str:
    """Check that ``path`` is a clean relative POSIX path and return it unchanged.

    Args:
        path: A file name as listed by an upstream or a manifest.

    Raises:
        InvalidPathError: empty, absolute, with ``..``/``.``/empty segments, backslashes, control or
            bidirectional formatting characters, a drive letter, or not in Unicode NFC form.
    """
    if not isinstance(path, str) or not path:
        raise InvalidPathError(str(path), "empty path")
    if len(path) > MAX_PATH_LENGTH:
        raise InvalidPathError(path[:64] + "...", f"longer than {MAX_PATH_LENGTH} characters")
    if "\\" in path:
        raise InvalidPathError(path, "backslash in path")
    # The characters free text may not hold: controls, and bidirectional formatting that disguises a name.
    problem = text_problem(path, MAX_PATH_LENGTH)
    if problem is not None:
        raise InvalidPathError(path, problem[0])
    if path.startswith("/"):
        raise InvalidPathError(path, "absolute path")
    if re.match(r"^[A-Za-z]:", path):
        raise InvalidPathError(path, "drive letter in path")
    if unicodedata.normalize("NFC", path) != path:
        raise InvalidPathError(path, "path is not in Unicode NFC form")
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidPathError(path, f"segment {segment!r} is not allowed")
    return path


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file of a version: where it goes, how big it is and what its bytes hash to."""

    path: str
    size: int
    sha256: str

    def as_dict(self) -> dict[str, object]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


def validate_file_list(files: Iterable[FileEntry]) -> list[FileEntry]:
    """Validate every path, reject duplicates (case-folded too) and a file that is also a directory.

    Returns:
        The entries sorted by path.

    Raises:
        InvalidPathError: on any bad or duplicate path.
    """
    entries = sorted(files, key=lambda f: f.path)
    seen: set[str] = set()
    for entry in entries:
        validate_path(entry.path)
        if entry.size < 0:
            raise InvalidInputError(f"negative size for {entry.path!r}", path=entry.path)
        require_sha256(entry.sha256)
        folded = entry.path.casefold()
        if folded in seen:
            raise InvalidPathError(entry.path, "duplicate path")
        seen.add(folded)
    dirs = {p.rsplit("/", i)[0] for p in seen for i in range(1, p.count("/") + 1)}
    for entry in entries:
        if entry.path.casefold() in dirs:
            raise InvalidPathError(entry.path, "path is both a file and a directory")
    return entries
