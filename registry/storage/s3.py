"""A blob store in an S3 bucket (AWS S3, MinIO, Ceph, SeaweedFS), through a boto3 client.

Keys are ``{prefix}/blobs/sha256/<first 2 hex>/<64 hex>``; puts in progress use ``{prefix}/tmp/<uuid>``.

How a put stays one pass and never shows half-written bytes:

- a stream that fits in one part is hashed in memory, then sent with one PutObject to its final key,
  carrying its ``ChecksumSHA256`` so the server refuses bytes that changed in transit;
- a larger stream with a known digest goes straight into a multipart upload at the final key, hashed
  part by part while earlier parts upload on a few threads; CompleteMultipartUpload is called only when
  digest and size match, else AbortMultipartUpload (unfinished uploads are invisible);
- a larger stream with an unknown digest goes into a multipart upload at a temporary key, which is copied
  server-side to its final key once the digest is known, then deleted.

Final writes use ``If-None-Match: *`` so an existing blob is never overwritten. Unfinished uploads and
temporary keys left by a crash are removed by :meth:`S3BlobStore.sweep_incomplete`.
"""

from __future__ import annotations

import base64
import hashlib
import io
import itertools
import math
import uuid
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta, timezone
from typing import Any, BinaryIO, Iterable, Iterator

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import BotoCoreError, ClientError

from registry.domain.errors import (
    BlobNotFoundError,
    BlobStoreError,
    DigestMismatchError,
    InvalidInputError,
    SizeMismatchError,
)
from registry.domain.files import is_sha256
from registry.storage.base import (
    STREAM_PATH,
    BlobInfo,
    BlobStore,
    ByteSource,
    PutResult,
    blob_key,
    check_range,
    check_size,
    iter_source,
)

MIB = 1024 * 1024
MIN_PART_SIZE = 5 * MIB  # S3's minimum for every part but the last
MAX_PARTS = 10_000
READ_CHUNK = MIB
SEEKABLE_BUFFER = 256 * 1024
_NOT_FOUND_CODES = {"404", "NoSuchKey", "NotFound"}
_LOST_RACE_CODES = {"PreconditionFailed", "ConditionalRequestConflict"}


class S3BlobStore(BlobStore):
    """Content-addressed blobs in an S3 bucket.

    Args:
        client: A boto3 S3 client (thread-safe; parts upload from several threads).
        bucket: The bucket, which must exist.
        prefix: Key prefix of the store inside the bucket ("" for the bucket's root).
        part_size: Multipart part size; a larger one is used when ``expected_size`` needs more than
            10,000 parts.
        max_concurrency: Parts uploaded at once; memory is bounded by ``(max_concurrency + 1) * part_size``.
        copy_part_size: Objects up to this size are copied with one CopyObject, larger ones with
            UploadPartCopy parts of this size (CopyObject stops at 5 GB).

    Raises:
        InvalidInputError: ``part_size`` is below S3's 5 MiB minimum.
    """

    def __init__(
        self,
        client: Any,
        bucket: str,
        prefix: str = "",
        part_size: int = 64 * MIB,
        *,
        max_concurrency: int = 3,
        copy_part_size: int = 1024 * MIB,
    ) -> None:
        if part_size < MIN_PART_SIZE or copy_part_size < MIN_PART_SIZE:
            raise InvalidInputError(f"part size {part_size} is below S3's minimum {MIN_PART_SIZE}")
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.part_size = part_size
        self.max_concurrency = max(1, max_concurrency)
        self._copy_config = TransferConfig(
            multipart_threshold=copy_part_size, multipart_chunksize=copy_part_size, max_concurrency=4
        )
        # Ask for per-part CRC32 checksums exactly when the client would add them by itself (botocore's
        # default "when_supported"), as s3transfer does, so CompleteMultipartUpload lists them consistently.
        calculation = getattr(client.meta.config, "request_checksum_calculation", None)
        self._part_checksum = "CRC32" if calculation in (None, "when_supported") else None

    def __repr__(self) -> str:
        return f"S3BlobStore(bucket={self.bucket!r}, prefix={self.prefix!r})"

    def _key(self, relative: str) -> str:
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def _blob_key(self, digest: str) -> str:
        # blob_key validates the digest, so it can never climb out of the prefix.
        return self._key(blob_key(digest))

    # --- writing ---------------------------------------------------------------------------

    def _put_new(self, source: ByteSource, *, expected_sha256: str | None,
                 expected_size: int | None) -> PutResult:
        """Stream ``source`` into the bucket, hashing it part by part.

        Raises:
            BlobStoreError: the bucket failed or could not be reached; the rest as ``BlobStore.put``.
        """
        meter = _Meter(expected_sha256 or STREAM_PATH, expected_size)
        part_size = self.part_size
        if expected_size is not None:
            part_size = max(part_size, math.ceil(expected_size / MAX_PARTS / MIB) * MIB)
        parts = _iter_parts(iter_source(source, part_size), part_size, meter)
        first = next(parts, b"")
        if len(first) < part_size:
            # The whole stream fit in one part: its digest is already known.
            return self._put_small(first, meter.finish(expected_sha256))
        if expected_sha256 is not None:
            created = self._multipart(self._blob_key(expected_sha256), first, parts, meter, expected_sha256)
            return PutResult(expected_sha256, meter.size, created)
        tmp = self._key(f"tmp/{uuid.uuid4().hex}")
        self._multipart(tmp, first, parts, meter, None)
        return self._promote(tmp, meter)

    def _put_small(self, body: bytes, digest: str) -> PutResult:
        key = self._blob_key(digest)
        if self._stat_or_none(digest) is not None:
            return PutResult(digest, len(body), created=False)
        checksum = base64.b64encode(bytes.fromhex(digest)).decode()
        with _s3_errors("put", key):
            try:
                self.client.put_object(
                    Bucket=self.bucket, Key=key, Body=body, ChecksumSHA256=checksum, IfNoneMatch="*"
                )
            except ClientError as exc:
                if _error_code(exc) not in _LOST_RACE_CODES or self._stat_or_none(digest) is None:
                    raise
                return PutResult(digest, len(body), created=False)
        return PutResult(digest, len(body), created=True)

    def _multipart(
        self, key: str, first: bytes, parts: Iterator[bytes], meter: _Meter, expected_sha256: str | None
    ) -> bool:
        """Upload ``first`` then ``parts`` as one multipart upload at ``key``; complete it only if they check out.

        With ``expected_sha256`` (``key`` is then the final key) the digest must match it, and the upload
        is completed only if no object exists there yet. Returns whether this upload created the object.
        """
        extra = {"ChecksumAlgorithm": self._part_checksum} if self._part_checksum else {}
        with _s3_errors("put", key):
            upload_id = self.client.create_multipart_upload(Bucket=self.bucket, Key=key, **extra)["UploadId"]
        try:
            uploaded = self._upload_parts(key, upload_id, itertools.chain((first,), parts))
            meter.finish(expected_sha256)
            condition = {"IfNoneMatch": "*"} if expected_sha256 is not None else {}
            with _s3_errors("put", key):
                try:
                    self.client.complete_multipart_upload(
                        Bucket=self.bucket,
                        Key=key,
                        UploadId=upload_id,
                        MultipartUpload={"Parts": uploaded},
                        **condition,
                    )
                except ClientError as exc:
                    # 412: another put committed the same digest meanwhile; 409: AWS saw both conditional
                    # writes at once and let the other one win. Either way, keep theirs if it is there.
                    if _error_code(exc) not in _LOST_RACE_CODES or expected_sha256 is None:
                        raise
                    if _error_code(exc) == "ConditionalRequestConflict" and self._stat_or_none(expected_sha256) is None:
                        raise
                    self._abort(key, upload_id)
                    return False
            return True
        except BaseException:
            self._abort(key, upload_id)
            raise

    def _upload_parts(self, key: str, upload_id: str, bodies: Iterator[bytes]) -> list[dict[str, Any]]:
        done: list[dict[str, Any]] = []
        in_flight: deque[Future[dict[str, Any]]] = deque()
        with ThreadPoolExecutor(max_workers=self.max_concurrency, thread_name_prefix="s3-part") as pool:
            try:
                # Reading and hashing stay in this thread; at most max_concurrency parts wait in memory.
                for number, body in enumerate(bodies, start=1):
                    if number > MAX_PARTS:
                        raise BlobStoreError("put", f"more than {MAX_PARTS} parts; raise part_size", key=key)
                    while len(in_flight) >= self.max_concurrency:
                        done.append(in_flight.popleft().result())
                    in_flight.append(pool.submit(self._upload_part, key, upload_id, number, body))
                    del body
                while in_flight:
                    done.append(in_flight.popleft().result())
            except BaseException:
                for future in in_flight:
                    future.cancel()
                raise
        return done

    def _upload_part(self, key: str, upload_id: str, number: int, body: bytes) -> dict[str, Any]:
        extra = {"ChecksumAlgorithm": self._part_checksum} if self._part_checksum else {}
        with _s3_errors("upload part", key):
            response = self.client.upload_part(
                Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body, **extra
            )
        part = {"PartNumber": number, "ETag": response["ETag"]}
        member = f"Checksum{self._part_checksum}"
        if self._part_checksum and member in response:
            part[member] = response[member]
        return part

    def _abort(self, key: str, upload_id: str) -> None:
        # Best effort: if this fails too, sweep_incomplete removes the upload later.
        with suppress(ClientError, BotoCoreError):
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)

    def _promote(self, tmp: str, meter: _Meter) -> PutResult:
        """Copy a completed temporary object to its final key, then delete it."""
        digest = meter.digest
        assert digest is not None
        try:
            if self._stat_or_none(digest) is not None:
                return PutResult(digest, meter.size, created=False)
            final = self._blob_key(digest)
            with _s3_errors("copy", final):
                self.client.copy(
                    {"Bucket": self.bucket, "Key": tmp}, self.bucket, final, Config=self._copy_config
                )
            return PutResult(digest, meter.size, created=True)
        finally:
            with suppress(ClientError, BotoCoreError):
                self.client.delete_object(Bucket=self.bucket, Key=tmp)

    # --- reading ---------------------------------------------------------------------------

    def _stat_or_none(self, digest: str) -> BlobInfo | None:
        key = self._blob_key(digest)
        try:
            with _s3_errors("head", key, digest):
                response = self.client.head_object(Bucket=self.bucket, Key=key)
        except BlobNotFoundError:
            return None
        return BlobInfo(digest, response["ContentLength"])

    def exists(self, digest: str) -> bool:
        """Whether a blob with this digest is committed. Raises InvalidInputError, BlobStoreError."""
        return self._stat_or_none(digest) is not None

    def stat(self, digest: str) -> BlobInfo:
        """Size of a committed blob. Raises BlobNotFoundError, InvalidInputError, BlobStoreError."""
        info = self._stat_or_none(digest)
        if info is None:
            raise BlobNotFoundError(digest)
        return info

    def open_range(self, digest: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Yield the bytes ``[start, end)`` of a blob from one ranged GET.

        Raises:
            BlobNotFoundError: no blob has this digest.
            InvalidInputError: a bad digest, or a negative ``start``/``end``.
            BlobStoreError: the bucket failed or could not be reached.
        """
        check_range(start, end)
        key = self._blob_key(digest)
        if end is not None and end <= start:
            self.stat(digest)  # an empty range of a missing blob is still an error
            return iter(())
        args: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if start or end is not None:
            args["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        with _s3_errors("get", key, digest):
            try:
                response = self.client.get_object(**args)
            except ClientError as exc:
                if _error_code(exc) == "InvalidRange":  # start at or past the end: nothing to read
                    return iter(())
                raise
        return _iter_body(response["Body"], key)

    def open_seekable(self, digest: str) -> BinaryIO:
        """A buffered, seekable reader doing one ranged GET per buffer fill (nothing is read on open).

        Raises:
            BlobNotFoundError: no blob has this digest.
        """
        info = self.stat(digest)
        raw = _S3RangeReader(self.client, self.bucket, self._blob_key(digest), digest, info.size)
        return io.BufferedReader(raw, buffer_size=SEEKABLE_BUFFER)  # type: ignore[return-value]

    def presign_get(self, digest: str, expires_in: timedelta) -> str:
        """A SigV4/SigV2 presigned GET URL of the blob, from the client's endpoint and credentials."""
        key = self._blob_key(digest)
        with _s3_errors("presign", key):
            return self.client.generate_presigned_url(
                "get_object",
                Params={"Bucket": self.bucket, "Key": key},
                ExpiresIn=max(1, int(expires_in.total_seconds())),
            )

    # --- maintenance -----------------------------------------------------------------------

    def delete(self, digest: str) -> None:
        """Remove a blob if present. Raises InvalidInputError, BlobStoreError."""
        key = self._blob_key(digest)
        with _s3_errors("delete", key):
            self.client.delete_object(Bucket=self.bucket, Key=key)

    def iter_blobs(self) -> Iterator[BlobInfo]:
        """Every committed blob, in key order; stray keys under ``blobs/`` are ignored."""
        root = self._key("blobs/sha256/")
        paginator = self.client.get_paginator("list_objects_v2")
        with _s3_errors("list", root):
            for page in paginator.paginate(Bucket=self.bucket, Prefix=root):
                for item in page.get("Contents", ()):
                    shard, _, name = item["Key"][len(root) :].partition("/")
                    if is_sha256(name) and shard == name[:2]:
                        yield BlobInfo(name, item["Size"], item.get("LastModified"))

    def unfinished_uploads(self, digest: str) -> list[str]:
        """Ids of the multipart uploads at this blob's final key. Raises InvalidInputError, BlobStoreError."""
        key = self._blob_key(digest)
        uploads = self.client.get_paginator("list_multipart_uploads")
        with _s3_errors("list uploads", key):
            return [
                upload["UploadId"]
                for page in uploads.paginate(Bucket=self.bucket, Prefix=key)
                for upload in page.get("Uploads", ())
                if upload["Key"] == key
            ]

    def abort_uploads(self, digest: str, upload_ids: Iterable[str]) -> int:
        """Abort these multipart uploads at this blob's final key; return how many were aborted here."""
        key = self._blob_key(digest)
        aborted = 0
        for upload_id in upload_ids:
            with _s3_errors("abort", key):
                try:
                    self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
                except ClientError as exc:
                    if _error_code(exc) != "NoSuchUpload":  # finished or aborted meanwhile
                        raise
                    continue
            aborted += 1
        return aborted

    def sweep_incomplete(self, older_than: timedelta) -> int:
        """Abort multipart uploads and delete temporary keys started more than ``older_than`` ago.

        Only this store's ``blobs/`` and ``tmp/`` keys are considered, so other users of the bucket are
        left alone. Returns how many uploads and keys were removed.
        """
        cutoff = datetime.now(timezone.utc) - older_than
        removed = 0
        uploads = self.client.get_paginator("list_multipart_uploads")
        for area in ("blobs/", "tmp/"):
            prefix = self._key(area)
            with _s3_errors("list uploads", prefix):
                stale = [
                    upload
                    for page in uploads.paginate(Bucket=self.bucket, Prefix=prefix)
                    for upload in page.get("Uploads", ())
                    if upload["Initiated"] <= cutoff
                ]
            for upload in stale:
                with _s3_errors("abort", upload["Key"]):
                    try:
                        self.client.abort_multipart_upload(
                            Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                        )
                    except ClientError as exc:
                        if _error_code(exc) != "NoSuchUpload":  # finished or aborted meanwhile
                            raise
                        continue
                removed += 1
        tmp = self._key("tmp/")
        objects = self.client.get_paginator("list_objects_v2")
        with _s3_errors("list", tmp):
            stale_keys = [
                item["Key"]
                for page in objects.paginate(Bucket=self.bucket, Prefix=tmp)
                for item in page.get("Contents", ())
                if item["LastModified"] <= cutoff
            ]
        for key in stale_keys:
            with _s3_errors("delete", key):
                self.client.delete_object(Bucket=self.bucket, Key=key)
            removed += 1
        return removed

    def check(self) -> None:
        """HEAD the bucket. Raises BlobStoreError when it is missing or unreachable."""
        with _s3_errors("check", self.bucket):
            self.client.head_bucket(Bucket=self.bucket)


class _Meter:
    """Hash and byte count of a stream, fed chunk by chunk in the reading thread."""

    def __init__(self, label: str, expected_size: int | None) -> None:
        self.label = label
        self.expected_size = expected_size
        self.hasher = hashlib.sha256()
        self.size = 0
        self.digest: str | None = None

    def feed(self, chunk: bytes) -> None:
        self.hasher.update(chunk)
        self.size += len(chunk)
        if self.expected_size is not None and self.size > self.expected_size:
            # Stop reading (and uploading) a source that is already too long.
            raise SizeMismatchError(self.label, expected=self.expected_size, actual=self.size)

    def finish(self, expected_sha256: str | None) -> str:
        """The digest, once the stream has ended. Raises SizeMismatchError, DigestMismatchError."""
        check_size(self.label, self.expected_size, self.size)
        digest = self.hasher.hexdigest()
        if expected_sha256 is not None and digest != expected_sha256:
            raise DigestMismatchError(expected_sha256, expected=expected_sha256, actual=digest)
        self.digest = digest
        return digest


def _iter_parts(chunks: Iterator[bytes], part_size: int, meter: _Meter) -> Iterator[bytes]:
    """Group chunks into parts of at least ``part_size`` bytes (the last may be shorter).

    A part only shorter than ``part_size`` is the last one, which is how ``put`` spots a small stream.
    A file object read ``part_size`` at a time gives whole parts without any join.
    """
    pending: list[bytes] = []
    length = 0
    for chunk in chunks:
        meter.feed(chunk)
        pending.append(chunk)
        length += len(chunk)
        if length >= part_size:
            yield pending[0] if len(pending) == 1 else b"".join(pending)
            pending, length = [], 0
    if pending:
        yield pending[0] if len(pending) == 1 else b"".join(pending)


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


@contextmanager
def _s3_errors(operation: str, key: str, digest: str | None = None) -> Iterator[None]:
    """Translate botocore errors: a missing object of ``digest`` → BlobNotFoundError, else BlobStoreError."""
    try:
        yield
    except ClientError as exc:
        code = _error_code(exc)
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if digest is not None and (code in _NOT_FOUND_CODES or (status == 404 and code != "NoSuchBucket")):
            raise BlobNotFoundError(digest) from None
        message = exc.response.get("Error", {}).get("Message", "")
        raise BlobStoreError(operation, f"{code}: {message}".strip(": "), key=key) from exc
    except BotoCoreError as exc:
        raise BlobStoreError(operation, str(exc), key=key) from exc


def _iter_body(body: Any, key: str) -> Iterator[bytes]:
    try:
        with _s3_errors("get", key):
            yield from body.iter_chunks(READ_CHUNK)
    finally:
        body.close()


class _S3RangeReader(io.RawIOBase):
    """A raw, seekable reader over one object; each read is a ranged GET of exactly what was asked."""

    def __init__(self, client: Any, bucket: str, key: str, digest: str, size: int) -> None:
        self._client = client
        self._bucket = bucket
        self._key = key
        self._digest = digest
        self._size = size
        self._pos = 0
        self.name = f"s3://{bucket}/{key}"

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def _get(self, count: int) -> bytes:
        end = min(self._size, self._pos + count)
        if count <= 0 or self._pos >= end:
            return b""
        with _s3_errors("get", self._key, self._digest):
            response = self._client.get_object(
                Bucket=self._bucket, Key=self._key, Range=f"bytes={self._pos}-{end - 1}"
            )
            body = response["Body"]
            try:
                data = body.read()
            finally:
                body.close()
        self._pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self._get(len(buffer))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        # One GET for the rest, not RawIOBase's default loop of small reads.
        return self._get(self._size - self._pos)
