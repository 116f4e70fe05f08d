"""Which upstreams a submission may name.

A submission makes the registry read from somewhere with its own network position and credentials,
so the places are configured, not chosen by the submitter: hub endpoints (the configured one and an
allow-list), directories on the server under configured roots (never the registry's own state), and S3
buckets on an allow-list (never the blob store's own bucket, which holds every tenant's bytes).

Example:
    >>> policy = SourcePolicy(hf_endpoints=("https://huggingface.co",))
    >>> policy.check("hf", "org/model", "https://huggingface.co/")
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from registry.domain.errors import SourceNotAllowedError


def same_endpoint(a: str, b: str) -> bool:
    """Whether two hub URLs name the same origin and base path (scheme and host compared case-blind)."""

    def key(url: str) -> tuple[str, str, int | None, str]:
        parts = urlsplit(url.strip())
        try:
            port = parts.port
        except ValueError:
            return ("", url, None, "")
        default = {"http": 80, "https": 443}.get(parts.scheme.lower())
        return (parts.scheme.lower(), (parts.hostname or "").lower(), port or default, parts.path.rstrip("/"))

    return key(a) == key(b)


@dataclass(frozen=True)
class SourcePolicy:
    """The upstreams this registry reads from.

    Attributes:
        hf_endpoints: hub endpoints a submission may name (the configured hub first).
        local_roots: directories under which server-side directory sources are allowed.
        s3_buckets: buckets allowed as ``s3://`` sources.
        forbidden_paths: directories never readable as sources (the data dir, the blob store).
        forbidden_buckets: buckets never readable as sources (the blob store's).
    """

    hf_endpoints: tuple[str, ...] = ()
    local_roots: tuple[Path, ...] = ()
    s3_buckets: tuple[str, ...] = ()
    forbidden_paths: tuple[Path, ...] = ()
    forbidden_buckets: tuple[str, ...] = ()

    def check(self, kind: str, locator: str, hf_endpoint: str | None) -> None:
        """Raise SourceNotAllowedError unless the source is allowed.

        Args:
            kind: ``hf``, ``s3`` or ``local`` (from ``parse_source_uri``).
            locator: ``org/name``, ``bucket/prefix`` or an absolute directory.
            hf_endpoint: the hub endpoint the submission names (``hf`` only).
        """
        if kind == "hf":
            if not any(same_endpoint(hf_endpoint or "", allowed) for allowed in self.hf_endpoints):
                raise SourceNotAllowedError(
                    f"hub endpoint {hf_endpoint!r} is not allowed here (see MODELREG_HF_ALLOWED_ENDPOINTS)",
                    endpoint=hf_endpoint)
        elif kind == "s3":
            bucket = locator.split("/", 1)[0]
            if bucket in self.forbidden_buckets or bucket not in self.s3_buckets:
                raise SourceNotAllowedError(
                    f"bucket {bucket!r} is not an allowed source (see MODELREG_S3_SOURCE_BUCKETS)", bucket=bucket)
        elif kind == "local":
            path = Path(os.path.realpath(locator))
            if any(_within(path, Path(os.path.realpath(p))) or _within(Path(os.path.realpath(p)), path)
                   for p in self.forbidden_paths):
                raise SourceNotAllowedError(f"{locator!r} holds or is inside the registry's own state",
                                            path=locator)
            if not any(_within(path, Path(os.path.realpath(root))) for root in self.local_roots):
                raise SourceNotAllowedError(
                    f"{locator!r} is not under an allowed directory on the server "
                    "(see MODELREG_LOCAL_SOURCE_ROOTS, or upload the directory: modelreg submit --upload)",
                    path=locator)
        else:
            raise SourceNotAllowedError(f"unknown source kind {kind!r}", kind=kind)


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
