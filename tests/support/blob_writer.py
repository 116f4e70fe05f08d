"""A put that stalls halfway, run in a child process so a test can kill -9 it mid-write.

Usage: ``python -c "from tests.support.blob_writer import main; main()" '<json config>'``

The config names the store (``{"kind": "local", "root": ...}`` or ``{"kind": "s3", "endpoint_url",
"access_key", "secret_key", "region", "bucket", "prefix", "part_size"}``), ``stall_after`` (bytes to
send before the source stops producing), ``chunk_size`` and ``expected_sha256`` (or null). The child
prints ``sent <n>`` after each chunk and ``stalled`` once it waits forever inside the put.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from registry.storage import BlobStore, LocalBlobStore, S3BlobStore


def build_store(config: dict[str, Any]) -> BlobStore:
    if config["kind"] == "local":
        return LocalBlobStore(Path(config["root"]), b"blob-writer-secret")
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url=config["endpoint_url"],
        aws_access_key_id=config["access_key"],
        aws_secret_access_key=config["secret_key"],
        region_name=config["region"],
        config=Config(s3={"addressing_style": "path"}),
    )
    return S3BlobStore(client, config["bucket"], config["prefix"], part_size=config["part_size"])


def stalling_source(stall_after: int, chunk_size: int) -> Iterator[bytes]:
    sent = 0
    while sent < stall_after:
        chunk = bytes([sent // chunk_size % 251]) * chunk_size
        yield chunk
        sent += len(chunk)
        print(f"sent {sent}", flush=True)
    print("stalled", flush=True)
    time.sleep(3600)  # the test kills us here, in the middle of the put
    yield b"never"


def main() -> None:
    config = json.loads(sys.argv[1])
    store = build_store(config)
    store.put(
        stalling_source(config["stall_after"], config["chunk_size"]),
        expected_sha256=config.get("expected_sha256"),
    )
    print("finished", flush=True)  # must never happen


if __name__ == "__main__":
    main()
