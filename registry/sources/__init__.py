"""Upstream sources: where model files come from, behind the :class:`~registry.sources.base.Source` port.

- ``hf://org/name``: any Hugging Face-compatible hub (:class:`~registry.sources.huggingface.HuggingFaceSource`);
- ``s3://bucket/prefix``: an S3 prefix (:class:`~registry.sources.s3.S3Source`);
- ``file:///abs/dir`` or a plain path: a local directory
  (:class:`~registry.sources.local.LocalDirectorySource`).

Every source validates every listed path and applies the same include/exclude globs
(:mod:`registry.sources.filters`). Nothing is imported or connected until ``open_source`` is called.

Example:
    >>> parse_source_uri("hf://Qwen/Qwen2.5-0.5B")
    ('hf', 'Qwen/Qwen2.5-0.5B')
    >>> parse_source_uri("s3://models/llama/8b/")
    ('s3', 'models/llama/8b')
    >>> parse_source_uri("file:///srv/models/tiny")
    ('local', '/srv/models/tiny')
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Sequence
from urllib.parse import unquote, urlsplit

from registry.domain.errors import InvalidInputError
from registry.sources.base import Snapshot, Source, UpstreamFile
from registry.sources.filters import FileFilter

__all__ = [
    "FileFilter",
    "Snapshot",
    "Source",
    "UpstreamFile",
    "open_source",
    "parse_source_uri",
]

# The Hub's own rule (huggingface_hub.utils.validate_repo_id), kept here so parsing imports nothing heavy.
_HF_REPO_RE = re.compile(r"^(?:[\w\-.]+/)?[\w\-.]{1,96}$")
_S3_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")


def _parse_hf(uri: str, rest: str) -> str:
    repo = rest.strip("/")
    if (
        not _HF_REPO_RE.match(repo)
        or "--" in repo
        or ".." in repo
        or repo.endswith(".git")
        or any(part.startswith(("-", ".")) or part.endswith(("-", ".")) for part in repo.split("/"))
    ):
        raise InvalidInputError(f"not a Hugging Face repo id in {uri!r} (expected hf://org/name)", uri=uri)
    return repo


def _parse_s3(uri: str, parts: Any) -> str:
    bucket = parts.netloc
    if not _S3_BUCKET_RE.match(bucket) or ".." in bucket:
        raise InvalidInputError(f"not an S3 bucket name in {uri!r}", uri=uri)
    if parts.query or parts.fragment:
        raise InvalidInputError(f"query or fragment in {uri!r}", uri=uri)
    prefix = parts.path.strip("/")
    if prefix and any(segment in ("", ".", "..") for segment in prefix.split("/")):
        raise InvalidInputError(f"S3 prefix with empty or dot segments in {uri!r}", uri=uri)
    return f"{bucket}/{prefix}" if prefix else bucket


def _parse_local(uri: str, path: str) -> str:
    if not path or "\x00" in path:
        raise InvalidInputError(f"not a directory path: {uri!r}", uri=uri)
    return os.path.normpath(os.path.abspath(path))


def parse_source_uri(uri: str) -> tuple[str, str]:
    """Split a source URI into the source kind and its locator.

    Args:
        uri: ``hf://org/name``, ``s3://bucket[/prefix]``, ``file:///abs/dir``, or a plain directory
            path (made absolute against the current directory).

    Returns:
        ``(kind, locator)``: ``("hf", "org/name")``, ``("s3", "bucket/prefix")`` (or ``"bucket"``), or
        ``("local", "/abs/dir")``; the locator is what ``Snapshot.repo`` will say.

    Raises:
        InvalidInputError: an unknown scheme or a malformed repo id, bucket, prefix or path.
    """
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidInputError("empty source URI", uri=str(uri))
    uri = uri.strip()
    scheme_match = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*)://", uri)
    if scheme_match is None:
        return "local", _parse_local(uri, uri)
    scheme = scheme_match.group(1).lower()
    if scheme == "hf":
        return "hf", _parse_hf(uri, uri[len("hf://") :])
    if scheme == "s3":
        return "s3", _parse_s3(uri, urlsplit(uri))
    if scheme == "file":
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost"):
            raise InvalidInputError(f"file URI names a remote host: {uri!r}", uri=uri)
        if parts.query or parts.fragment:
            raise InvalidInputError(f"query or fragment in {uri!r}", uri=uri)
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise InvalidInputError(f"file URI without an absolute path: {uri!r}", uri=uri)
        return "local", _parse_local(uri, path)
    raise InvalidInputError(f"unsupported source scheme {scheme!r} in {uri!r}", uri=uri, scheme=scheme)


def open_source(
    uri: str,
    *,
    hf_endpoint: str | None = None,
    hf_token: str | None = None,
    s3_client_factory: Callable[[], Any] | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> Source:
    """Build the source a URI names.

    Args:
        uri: See :func:`parse_source_uri`.
        hf_endpoint: Base URL of the Hugging Face-compatible hub; required for ``hf://``.
        hf_token: Bearer token for that hub, if any (the machine's own HF token is never used).
        s3_client_factory: Returns a boto3 S3 client; required for ``s3://``.
        include: Globs of files to mirror (all when empty); see :mod:`registry.sources.filters`.
        exclude: Globs of files to leave out.

    Raises:
        InvalidInputError: a bad URI or glob, or a missing endpoint or client factory.
    """
    kind, locator = parse_source_uri(uri)
    FileFilter(include=include, exclude=exclude)  # fail on a bad glob before anything is built
    if kind == "hf":
        if not hf_endpoint:
            raise InvalidInputError("an hf:// source needs an explicit hub endpoint", uri=uri)
        from registry.sources.huggingface import HuggingFaceSource

        return HuggingFaceSource(locator, endpoint=hf_endpoint, token=hf_token, include=include, exclude=exclude)
    if kind == "s3":
        if s3_client_factory is None:
            raise InvalidInputError("an s3:// source needs an S3 client", uri=uri)
        from registry.sources.s3 import S3Source

        bucket, _, prefix = locator.partition("/")
        return S3Source(bucket, prefix, s3_client_factory(), include=include, exclude=exclude)
    from registry.sources.local import LocalDirectorySource

    return LocalDirectorySource(locator, include=include, exclude=exclude)
