"""Run:ai Model Streamer's S3 backend, in its own process as a loader runs it, streams the release through
serve-s3: every tensor equal to the original, and a flipped byte fails that chunk."""

from __future__ import annotations

import hashlib
import logging

import pytest

from registry.domain.chunks import CHUNK_SIZE
from tests.support.s3_endpoint import (
    BIG,
    KEY,
    SECRET,
    M,
    T,
    build_endpoint_world,
    cached_chunks,
    flip_stored_byte,
)

pytestmark = pytest.mark.seeded(builder=build_endpoint_world)

STREAM_SCRIPT = """
import hashlib, json, sys
from runai_model_streamer import SafetensorsStreamer
out = {}
with SafetensorsStreamer() as streamer:
    for uri in sys.argv[1:]:
        streamer.stream_file(uri)
        out[uri] = {name: hashlib.sha256(tensor.contiguous().numpy().tobytes()).hexdigest()
                    for name, tensor in streamer.get_tensors()}
print(json.dumps(out))
"""


def stream_with_runai(url: str, *uris: str):
    """Run:ai Model Streamer (its S3 backend) in one process of its own, as a loader would, streaming each file in
    turn (one start of torch): uri -> tensor name -> sha256 of its bytes."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
           "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0"}
    run = subprocess.run([sys.executable, "-c", STREAM_SCRIPT, *uris], capture_output=True, text=True, env=env,
                         timeout=300)
    return run.returncode, (json.loads(run.stdout) if run.returncode == 0 else run.stderr)


def test_the_runai_streamer_streams_every_tensor_of_the_release_equal_to_the_originals(endpoint, caplog):
    caplog.set_level(logging.DEBUG, logger="modelreg.serve_s3")
    from safetensors.numpy import load

    files = {f"s3://{T}/{M}@1/{path}": data for path, data in endpoint["files"].items()
             if path.endswith(".safetensors")}
    assert f"s3://{T}/{M}@1/{BIG}" in files  # BIG spans two chunks
    code, streamed = stream_with_runai(endpoint["url"], *files)
    assert code == 0, (streamed[-300:], caplog.text[-3000:])
    for uri, data in files.items():
        originals = {n: hashlib.sha256(a.tobytes()).hexdigest() for n, a in load(data).items()}
        assert streamed[uri] == originals, uri


def test_a_flipped_byte_makes_the_runai_streamer_fail_on_that_chunk(endpoint, caplog):
    path, data = next((p, d) for p, d in endpoint["files"].items() if p.endswith(".safetensors") and p != BIG)
    flip_stored_byte(endpoint["container"].blob_store, hashlib.sha256(data).hexdigest(), len(data) - 1)
    with caplog.at_level(logging.ERROR, logger="modelreg.serve_s3"):
        code, streamed = stream_with_runai(endpoint["url"], f"s3://{T}/{M}@1/{path}")
    assert code != 0, streamed
    assert any(path in r.getMessage() and "chunk 0" in r.getMessage() for r in caplog.records), caplog.text
    assert hashlib.sha256(data[:CHUNK_SIZE]).hexdigest() not in cached_chunks(endpoint["cache"])
