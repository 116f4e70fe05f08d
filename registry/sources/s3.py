"""``S3Source``: the objects under a prefix of an S3-compatible bucket, as one model repository.

S3 has no commits, so the revision is made from the listing: the sha256 of a canonical text with one
line per object (relative path, size, ETag, sha256 when published), sorted by path. Any change under
the prefix, listed files or not, gives a new revision. ``open`` reads each object with ``If-Match`` on
the ETag it was listed with, so an object replaced after ``resolve`` fails with ``UpstreamChangedError``
instead of mixing two states of the prefix in one version.

When the object carries a full-object ``ChecksumSHA256`` (uploaded with ``ChecksumAlgorithm=SHA256``),
it is published as the file's sha256 and the blob store checks it. Multipart "checksum of checksums"
values are not a digest of the bytes and are ignored. Object versions are not used.

Usage (a sketch, not run as a doctest)::

    source = S3Source("models", "llama/8b", boto3.client("s3"))
    snapshot = source.resolve(None)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any, Iterator, NoReturn, Sequence

from botocore.exceptions import BotoCoreError, ClientError

from registry.domain.errors import (
    InvalidInputError,
    RegistryError,
    RepoNotFoundError,
    RevisionNotFoundError,
    SizeMismatchError,
    UpstreamChangedError,
    UpstreamError,
)
from registry.domain.files import validate_path
from registry.sources.base import Snapshot, Source, UpstreamFile
from registry.sources.filters import FileFilter

CHUNK_SIZE = 1024 * 1024
_NOT_FOUND_CODES = frozenset({"NoSuchBucket"})
_CHANGED_CODES = frozenset({"PreconditionFailed", "NoSuchKey", "412", "404"})
_RETRYABLE_CODES = frozenset(
    {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "Throttling", "ThrottlingException"}
)


def listing_digest(entries: Sequence[tuple[str, int, str, str | None]]) -> str:
    """The revision of a prefix: sha256 over ``path\\tsize\\tetag\\tsha256`` lines sorted by path."""
    lines = "".join(f"{path}\t{size}\t{etag}\t{sha256 or ''}\n" for path, size, etag, sha256 in sorted(entries))
    return hashlib.sha256(lines.encode("utf-8", "surrogatepass")).hexdigest()


def checksum_sha256_hex(value: str | None) -> str | None:
    """Hex of a full-object base64 ``ChecksumSHA256``; None for none, a composite or a malformed one."""
    if not value or "-" in value:
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == 32 else None


class S3Source(Source):
    """The objects under ``s3://bucket/prefix``.

    Args:
        bucket: Bucket name.
        prefix: Key prefix, with or without a trailing ``/``; empty for the whole bucket.
        client: A boto3 S3 client (thread-safe; shared by the calls).
        include: Globs of files to mirror; all when empty.
        exclude: Globs of files to leave out.
        chunk_size: Bytes per chunk ``open`` yields.
    """

    kind = "s3"

    def __init__(
        self,
        bucket: str,
        prefix: str,
        client: Any,
        *,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        chunk_size: int = CHUNK_SIZE,
    ) -> None:
        if not bucket or "/" in bucket:
            raise InvalidInputError(f"not an S3 bucket name: {bucket!r}", bucket=str(bucket))
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._key_prefix = f"{self.prefix}/" if self.prefix else ""
        self.client = client
        self.filter = FileFilter(include=include, exclude=exclude)
        self.chunk_size = chunk_size

    @property
    def repo(self) -> str:
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    def __repr__(self) -> str:
        return f"S3Source({self.repo!r})"

    def resolve(self, revision: str | None) -> Snapshot:
        """List the prefix and compute its revision.

        Args:
            revision: None for the prefix as it is now, or a revision from an earlier ``resolve``,
                which must still be the current one.

        Raises:
            RepoNotFoundError: no such bucket, or nothing under the prefix.
            RevisionNotFoundError: ``revision`` is not the prefix's current revision.
            InvalidPathError: a key under the prefix is not a clean relative path, or two collide.
            UpstreamError: S3 failed or could not be reached.
        """
        try:
            listed = self._list()
            files = [self._head(path) for path in listed]
        except RegistryError:
            raise
        except (ClientError, BotoCoreError) as e:
            self._raise_translated(e)
        if not files:
            raise RepoNotFoundError(self.repo)
        current = listing_digest([(f.path, f.size, f.etag or "", f.sha256) for f in files])
        if revision is not None and revision != current:
            raise RevisionNotFoundError(self.repo, revision)
        selected = sorted(self.filter.select(files), key=lambda f: f.path)
        return Snapshot(
            source_kind=self.kind,
            repo=self.repo,
            requested_revision=revision,
            revision=current,
            files=tuple(selected),
        )

    def _list(self) -> list[str]:
        paths: list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key_prefix):
            for obj in page.get("Contents", ()):
                path = obj["Key"][len(self._key_prefix) :]
                # "Folder" markers some tools create: empty objects named like a directory.
                if path.endswith("/") and obj.get("Size", 0) == 0:
                    continue
                paths.append(path)
        # Checked before any HEAD, so a hostile key is refused without touching the object.
        self.filter.select(paths, path_of=lambda p: p)
        return paths

    def _head(self, path: str) -> UpstreamFile:
        # HEAD, not the listing, gives the checksum; its ETag and size go with that checksum.
        head = self.client.head_object(Bucket=self.bucket, Key=self._key_prefix + path, ChecksumMode="ENABLED")
        return UpstreamFile(
            path=path,
            size=int(head["ContentLength"]),
            sha256=checksum_sha256_hex(head.get("ChecksumSHA256")),
            etag=head["ETag"],
        )

    def open(self, revision: str, file: UpstreamFile) -> Iterator[bytes]:
        """Stream one object, provided its ETag is still the one ``resolve`` listed.

        The stream must be read to its end: after the last chunk it raises ``SizeMismatchError`` when
        the byte count differs from ``file.size``. The sha256, when published, is the caller's to check.

        Raises:
            InvalidInputError: ``file`` has no ETag (it did not come from ``resolve``).
            InvalidPathError: ``file.path`` is not clean.
            UpstreamChangedError: the object was replaced or deleted since ``resolve``.
            UpstreamError: S3 failed or could not be reached.
        """
        validate_path(file.path)
        if not file.etag:
            raise InvalidInputError(f"{file.path} has no ETag to pin it", path=file.path)
        return self._stream(file)

    def _stream(self, file: UpstreamFile) -> Iterator[bytes]:
        received = 0
        try:
            response = self.client.get_object(
                Bucket=self.bucket, Key=self._key_prefix + file.path, IfMatch=file.etag
            )
            body = response["Body"]
            try:
                for chunk in body.iter_chunks(self.chunk_size):
                    received += len(chunk)
                    if received > file.size:
                        raise SizeMismatchError(file.path, expected=file.size, actual=received)
                    yield chunk
            finally:
                body.close()
        except RegistryError:
            raise
        except (ClientError, BotoCoreError) as e:
            self._raise_translated(e, file)
        if received != file.size:
            raise SizeMismatchError(file.path, expected=file.size, actual=received)

    def _raise_translated(self, e: ClientError | BotoCoreError, file: UpstreamFile | None = None) -> NoReturn:
        if isinstance(e, ClientError):
            error = e.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in _NOT_FOUND_CODES:
                raise RepoNotFoundError(self.repo) from e
            if file is not None and code in _CHANGED_CODES:
                raise UpstreamChangedError(self.repo, file.path, expected=file.etag) from e
            if file is None and code in ("NoSuchKey", "404"):
                # Deleted between the listing and its HEAD: the prefix is changing under us.
                raise UpstreamError(
                    f"an object under {self.repo} vanished while listing", repo=self.repo, retryable=True
                ) from e
            raise UpstreamError(
                f"S3 answered {code or status} for {self.repo}: {error.get('Message', '')}",
                repo=self.repo,
                code=code,
                status=status,
                retryable=code in _RETRYABLE_CODES or (isinstance(status, int) and status >= 500),
            ) from e
        raise UpstreamError(
            f"cannot read {self.repo} from S3: {type(e).__name__}: {e}", repo=self.repo, retryable=True
        ) from e
