"""The BlobStore contract's harness (``tests/integration/blob_store/``): a store plus a raw view of what it left
behind, the blobs it puts and the sources it reads them from.

The S3 store uses 5 MiB parts, so the ~12 MiB blob goes through a three-part multipart upload.
"""

from __future__ import annotations

import hashlib
import io
import random
from collections.abc import Iterator
from pathlib import Path

from registry.storage import BlobStore, S3BlobStore

MIB = 1024 * 1024
PART = 5 * MIB
REPO_ROOT = Path(__file__).resolve().parents[2]

BIG = random.Random(20240601).randbytes(12 * MIB + 123)
BIG_SHA = hashlib.sha256(BIG).hexdigest()
SMALL = b"tokenizer.json contents\n" * 100
SMALL_SHA = hashlib.sha256(SMALL).hexdigest()
EMPTY_SHA = hashlib.sha256(b"").hexdigest()


class Harness:
    """A store plus a raw view of what it left behind, so tests can prove nothing leaked."""

    def __init__(self, kind: str, store: BlobStore, tmp_path: Path, s3_server=None, bucket: str | None = None):
        self.kind = kind
        self.store = store
        self.tmp_path = tmp_path
        self.s3_server = s3_server
        self.bucket = bucket

    def leftovers(self) -> list[str]:
        """Everything a failed put could have left: temp files, objects, unfinished multipart uploads."""
        if self.kind == "local":
            root = self.store.root
            return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        client = self.s3_server.client()
        objects = [o["Key"] for o in client.list_objects_v2(Bucket=self.bucket).get("Contents", [])]
        uploads = [f"upload:{u['Key']}" for u in client.list_multipart_uploads(Bucket=self.bucket).get("Uploads", [])]
        return sorted(objects + uploads)

    def assert_nothing_committed(self) -> None:
        assert list(self.store.iter_blobs()) == []
        assert not self.store.exists(BIG_SHA)
        assert self.leftovers() == []


def make_s3_store(s3_server, bucket: str, prefix: str = "reg", **kwargs) -> S3BlobStore:
    return S3BlobStore(s3_server.client(), bucket, prefix, part_size=PART, **kwargs)


def chunks(data: bytes, size: int) -> Iterator[bytes]:
    for offset in range(0, len(data), size):
        yield data[offset : offset + size]


class ExplodingReader(io.RawIOBase):
    """A source that must never be read."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        raise AssertionError("the source was read")


def exploding_iterable() -> Iterator[bytes]:
    raise AssertionError("the source was read")
    yield b""  # pragma: no cover


class UpstreamDroppedError(ConnectionResetError):
    """An OSError, like a real dropped connection: it must reach the caller as it is, not as BlobStoreError."""


def dropping_source(data: bytes, fail_after: int) -> Iterator[bytes]:
    sent = 0
    for chunk in chunks(data, MIB):
        if sent >= fail_after:
            raise UpstreamDroppedError("connection reset by upstream")
        yield chunk
        sent += len(chunk)
