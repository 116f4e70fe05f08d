"""Content-addressed blob storage: the :class:`BlobStore` port and its two adapters.

``open_blob_store`` builds the adapter a URL names, with the settings it needs:

- ``file:///abs/dir`` → :class:`LocalBlobStore` (the embedded default);
- ``s3://bucket/prefix`` → :class:`S3BlobStore` (any S3-compatible endpoint).

Usage (a sketch, not run as a doctest)::

    store = open_blob_store("file:///var/lib/modelreg/blobs", settings)
    result = store.put(open("model.safetensors", "rb"), expected_sha256=published)
    store.open_range(result.digest, 0, 8)
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from registry.domain.errors import InvalidInputError
from registry.statefile import create_once
from registry.storage.base import BlobInfo, BlobStore, ByteSource, PutResult, blob_key
from registry.storage.local import LocalBlobStore
from registry.storage.s3 import S3BlobStore

if TYPE_CHECKING:
    from registry.settings import Settings

__all__ = [
    "BlobInfo",
    "BlobStore",
    "ByteSource",
    "LocalBlobStore",
    "PutResult",
    "S3BlobStore",
    "blob_key",
    "make_s3_client",
    "open_blob_store",
]

PRESIGN_KEY_FILE = "presign.key"


def open_blob_store(url: str, settings: Settings) -> BlobStore:
    """Build the blob store ``url`` names.

    Args:
        url: ``file:///abs/dir`` or ``s3://bucket/prefix``.
        settings: Supplies the S3 endpoint, region, credentials and part size, and for a local store
            the presign secret and public URL. Without a presign secret, a local store keeps a random
            one in ``<dir>/presign.key`` so every process sharing the directory signs alike.

    Raises:
        InvalidInputError: an unknown scheme, a relative path, or an S3 URL without a bucket.
    """
    parts = urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise InvalidInputError(f"file URL with a host: {url!r}", url=url)
        root = Path(unquote(parts.path))
        if not root.is_absolute():
            raise InvalidInputError(f"blob store path must be absolute: {url!r}", url=url)
        if settings.presign_secret is not None:
            secret = settings.presign_secret.get_secret_value().encode()
        else:
            secret = _persistent_secret(root)
        return LocalBlobStore(root, secret, settings.public_url)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise InvalidInputError(f"S3 URL without a bucket: {url!r}", url=url)
        return S3BlobStore(
            make_s3_client(settings), parts.netloc, parts.path.strip("/"), settings.multipart_part_size
        )
    raise InvalidInputError(f"unknown blob store scheme {parts.scheme!r} in {url!r}", url=url)


def make_s3_client(settings: Settings):
    """A boto3 S3 client for the configured endpoint: path-style addressing and standard retries.

    Without configured keys, boto3's own chain (environment, profile, instance role) applies.
    """
    import boto3
    from botocore.config import Config

    secret = settings.s3_secret_access_key
    return boto3.client(
        "s3",
        endpoint_url=settings.s3_endpoint_url,
        region_name=settings.s3_region,
        aws_access_key_id=settings.s3_access_key_id,
        aws_secret_access_key=secret.get_secret_value() if secret is not None else None,
        config=Config(
            # Path style works on every S3-compatible server, including ones without wildcard DNS.
            s3={"addressing_style": "path"},
            retries={"mode": "standard", "max_attempts": 5},
            connect_timeout=10,
            read_timeout=120,
            # Room for the part-upload threads of several concurrent puts.
            max_pool_connections=32,
        ),
    )


def _persistent_secret(root: Path) -> bytes:
    root.mkdir(parents=True, exist_ok=True)
    path = root / PRESIGN_KEY_FILE
    # Processes starting together agree on one key: the loser reads the winner's file.
    secret = create_once(path, secrets.token_bytes(32))
    if len(secret) < 16:
        raise InvalidInputError(f"presign key file {path} is too short", path=str(path))
    return secret
