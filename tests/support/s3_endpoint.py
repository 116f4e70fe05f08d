"""A ``modelreg serve-s3`` endpoint in front of the live API, and what its tests read it with: acme/llm@1 (a
safetensors file over two chunks) approved, serve-s3 in a thread with a node cache, boto3 and SigV4-signed
requests, and the node cache's chunks. ``tests/integration/serve_s3/conftest.py``'s ``endpoint`` serves it over
a copy of the seeded world ``build_endpoint_world`` (built once per worker, database and blob store)."""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
import time
from collections.abc import Iterator

import boto3
import httpx
import numpy as np
from botocore.config import Config
from safetensors.numpy import save

from api.app import create_app
from registry.bootstrap import ensure_trust_root
from registry.client.api import RegistryApi
from registry.domain.chunks import CHUNK_SIZE
from registry.node.cache import NodeCache
from registry.node.opener import NodePolicy
from registry.node.serve_s3 import ChunkSource, S3Server
from tests.support.live_app import serve_in_thread
from tests.support.registry import make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version
from tests.support.tiny_model import tiny_model_files

T, M = "acme", "llm"
BIG = "extra/big.safetensors"
KEY, SECRET = "node-key", "node-secret-0123456789"


def model_files() -> dict[str, bytes]:
    big = save({"big": np.arange((2 * CHUNK_SIZE) // 4 + 1000, dtype=np.float32)})
    assert len(big) > 2 * CHUNK_SIZE
    return {**tiny_model_files(1), BIG: big}


def s3_client(url: str, key: str = KEY, secret: str = SECRET):
    return boto3.client("s3", endpoint_url=url, aws_access_key_id=key, aws_secret_access_key=secret,
                        region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))


def build_endpoint_world(container, root) -> dict:
    """The seeded world (``tests/support/worlds.py``): acme/llm@1 approved through the real pipeline, the trust
    root as ``modelreg serve`` makes it at start, a node token."""
    admin = make_admin(container, T)
    files = model_files()
    awaiting_version(container, admin, root / "m", T, M, files=files)
    approve_standin(container, T, M, 1)
    ensure_trust_root(container)  # as `modelreg serve` does at start: the newest root names the log
    return {"admin": admin, "files": files, "token": role_token(container, "node-1", T, "node")}


@contextlib.contextmanager
def served_endpoint(store_container, seeded: dict, tmp_path) -> Iterator[dict]:
    """serve-s3 in a thread in front of the live API over the seeded world, with a node cache."""
    container = store_container
    with serve_in_thread(create_app(container)) as url:
        root = tmp_path / "root.json"
        root.write_text(httpx.get(f"{url}/v1/trust-root", timeout=30).text)
        with RegistryApi(url, seeded["token"]) as api:
            cache = NodeCache(tmp_path / "cache")
            source = ChunkSource(api, cache, policy=NodePolicy(root), max_chunks=4)
            with running(source) as s3_url:
                yield {"url": s3_url, "files": seeded["files"], "cache": cache, "source": source,
                       "container": container, "admin": seeded["admin"], "tmp_path": tmp_path}


@contextlib.contextmanager
def running(source: ChunkSource) -> Iterator[str]:
    """serve-s3 over ``source`` in a thread, on a free loopback port: its URL."""
    server = S3Server("127.0.0.1", 0, source, {KEY: SECRET})
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def signed_get(url: str, target: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """GET ``url + target`` as sent (percent-encoded, as boto3 sends it), signed with SigV4 by botocore at
    its clock (``botocore.auth.get_current_datetime``): for what boto3's own calls will not send."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method="GET", url=url + target, headers=dict(headers or {}))
    S3SigV4Auth(Credentials(KEY, SECRET), "s3", "us-east-1").add_auth(request)
    return httpx.get(url + target, headers=dict(request.headers.items()))


def s3_error_code(response: httpx.Response) -> str:
    match = re.search(rb"<Code>([^<]*)</Code>", response.content)
    assert match is not None and response.headers["content-type"] == "application/xml", response.content[:300]
    return match.group(1).decode()


def flip_stored_byte(store, digest: str, offset: int) -> None:
    """Flip one byte of a blob where the store keeps it (behind the store's back, as a bad disk would)."""
    from registry.storage import S3BlobStore

    if isinstance(store, S3BlobStore):
        key = store._blob_key(digest)
        data = bytearray(store.client.get_object(Bucket=store.bucket, Key=key)["Body"].read())
        data[offset] ^= 0x01
        store.client.put_object(Bucket=store.bucket, Key=key, Body=bytes(data))
    else:
        path = store._path(digest)
        path.chmod(0o644)
        data = bytearray(path.read_bytes())
        data[offset] ^= 0x01
        path.write_bytes(bytes(data))


def cached_chunks(cache: NodeCache) -> set[str]:
    return {b.digest for b in cache.blobs() if b.tenant == T}


def wait_cached(cache: NodeCache, digests: set[str]) -> None:
    """A fetched chunk goes into the node cache once its bytes went out: it is there moments later."""
    deadline = time.monotonic() + 20
    while not digests <= cached_chunks(cache):
        assert time.monotonic() < deadline, f"not in the node cache: {digests - cached_chunks(cache)}"
        time.sleep(0.02)


def chunk_digests(data: bytes) -> set[str]:
    return {hashlib.sha256(data[i:i + CHUNK_SIZE]).hexdigest() for i in range(0, len(data), CHUNK_SIZE)}
