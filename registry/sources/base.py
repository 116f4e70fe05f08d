"""The upstream source port.

A source resolves a requested revision (a branch, a tag, nothing) to an immutable one and lists the
files at that revision with the digests the upstream publishes. ``open`` streams one file's bytes;
the stream verifies what the upstream published that the blob store cannot (a git blob sha1) and
raises ``DigestMismatchError`` at its end, so the blob store never commits bytes that fail it.
Sources know nothing of the database or the blob store.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Iterator


@dataclass(frozen=True, slots=True)
class UpstreamFile:
    path: str
    size: int
    sha256: str | None = None
    """Published sha256 (HF LFS ``lfs.oid``, S3 ChecksumSHA256); checked by the blob store."""
    git_sha1: str | None = None
    """Git blob sha1 of a non-LFS HF file; checked by the stream ``open`` returns."""
    etag: str | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A resolved, immutable view of an upstream repository."""

    source_kind: str  # "hf" | "s3" | "local"
    repo: str  # "org/name", "bucket/prefix", "/abs/dir"
    requested_revision: str | None
    revision: str  # 40-hex commit (hf) or a digest of the listing (s3, local)
    files: tuple[UpstreamFile, ...]
    license: str | None = None
    card: dict | None = None
    """What the upstream says about license and access (HF: the card's ``license``, ``license_name`` and
    ``license_link`` as found, ``gated``, and ``access``: which token accepted a gated repository's terms)."""


class Source(abc.ABC):
    kind: str

    @abc.abstractmethod
    def resolve(self, revision: str | None) -> Snapshot:
        """Resolve ``revision`` once and list the files there.

        Raises:
            RepoNotFoundError, RevisionNotFoundError: the upstream has no such repo or revision.
            UpstreamError: the upstream failed or could not be reached.
            InvalidPathError: a listed path is not a clean relative path.
        """

    @abc.abstractmethod
    def open(self, revision: str, file: UpstreamFile) -> Iterator[bytes]:
        """Stream the bytes of ``file`` at the immutable ``revision``.

        The iterator raises ``DigestMismatchError``/``SizeMismatchError`` at its end when the bytes do
        not match what was published (other than ``sha256``, which the caller checks), and
        ``UpstreamError`` on transport failures.
        """
