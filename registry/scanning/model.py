"""The verdict model shared by every scanner.

Every scanned file gets a :class:`FileScan`: the format decided from its bytes, a verdict, and
findings, each with a stable ``rule_id`` and a location precise enough to explain the verdict.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable


class Verdict(str, enum.Enum):
    SAFE = "safe"
    SUSPICIOUS = "suspicious"
    UNSAFE = "unsafe"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @classmethod
    def worst(cls, verdicts: "list[Verdict]") -> "Verdict":
        return max(verdicts, key=lambda v: v.rank, default=cls.SAFE)


# An error outranks suspicious: a file we could not decide on is never loaded, but is not known-malicious.
_RANK = {Verdict.SAFE: 0, Verdict.SUSPICIOUS: 1, Verdict.ERROR: 2, Verdict.UNSAFE: 3}


class Severity(str, enum.Enum):
    INFO = "info"  # recorded, does not change the verdict
    SUSPICIOUS = "suspicious"
    UNSAFE = "unsafe"
    ERROR = "error"

    def verdict(self) -> Verdict:
        return {
            Severity.INFO: Verdict.SAFE,
            Severity.SUSPICIOUS: Verdict.SUSPICIOUS,
            Severity.UNSAFE: Verdict.UNSAFE,
            Severity.ERROR: Verdict.ERROR,
        }[self]


@dataclass(frozen=True, slots=True)
class Finding:
    rule_id: str
    """Stable identifier, e.g. ``pickle.global.not-allowed`` or ``safetensors.header.hole``."""
    severity: Severity
    location: str
    """Where: ``member/path.pkl@offset 123 opcode STACK_GLOBAL``, ``header.tensors[w]``..."""
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "rule_id": self.rule_id,
            "severity": self.severity.value,
            "location": self.location,
            "message": self.message,
        }


@dataclass(slots=True)
class FileScan:
    path: str
    format: str
    """Format decided from the bytes: ``pickle``, ``pytorch-zip``, ``safetensors``, ``gguf``, ``zip``..."""
    findings: list[Finding] = field(default_factory=list)
    scanner: str = "modelreg"
    scanner_version: str = ""

    @property
    def verdict(self) -> Verdict:
        return Verdict.worst([f.severity.verdict() for f in self.findings])

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "verdict": self.verdict.value,
            "scanner": self.scanner,
            "scanner_version": self.scanner_version,
            "findings": [f.as_dict() for f in self.findings],
        }


@dataclass(slots=True)
class ScanContext:
    """What a format scanner knows about where it is.

    Attributes:
        path: the file's path within the version (or a ``container!member`` path when nested).
        depth: container nesting depth (0 for a top-level file).
        scan_nested: callback to scan an embedded stream (``name, reader, size``) with the full engine,
            under the same depth and size bounds; returns the nested findings (already located).
        siblings: paths of the other files of the same version/directory, when known (e.g. for ONNX
            external data or for remote code detection).
    """

    path: str
    depth: int = 0
    scan_nested: Callable[[str, BinaryIO, int], list[Finding]] | None = None
    siblings: frozenset[str] = frozenset()
