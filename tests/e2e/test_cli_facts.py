"""Facts on the version: ``GET /v1/models/{t}/{n}/versions/{n}`` and ``modelreg version show``."""

from __future__ import annotations

import json
import subprocess

import httpx
import pytest
from sqlalchemy import delete

from api.app import create_app
from registry.db.models import VersionFacts
from registry.db.session import begin_write
from registry.facts import READER_VERSION
from registry.services import versions
from registry.services.versions import SubmitRequest
from tests.support.live_app import serve_in_thread
from tests.support.registry import drain, make_admin, role_token
from tests.support.tiny_model import tiny_model_files
from tests.unit.test_cli import MODELREG


@pytest.fixture
def live(container, tmp_path):
    admin = make_admin(container)
    root = tmp_path / "tiny"
    root.mkdir()
    for path, data in tiny_model_files(9).items():
        (root / path).write_bytes(data)
    for name in ("tiny", "bare"):
        with container.session_factory() as session:
            versions.submit(session, admin, "acme", name, SubmitRequest(source=str(root)),
                            open_source=container.open_source, limits=container.limits(), ports=container.ports)
    drain(container)
    with container.session_factory() as session:
        # Sealing recorded the facts of both; "bare" stands for a version sealed before facts were read.
        begin_write(session)
        bare = versions.read_version(session, admin, "acme", "bare", 1)
        session.execute(delete(VersionFacts).where(VersionFacts.version_id == bare.id))
        session.commit()
    token = role_token(container, "reader", "acme", "submitter")
    with serve_in_thread(create_app(container)) as url:
        yield url, token


def _cli(url, token, *args):
    return subprocess.run([MODELREG, "version", "show", *args, "--url", url, "--token", token],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_facts_on_the_api_and_in_version_show(live):
    url, token = live
    auth = {"Authorization": f"Bearer {token}"}
    body = httpx.get(f"{url}/v1/models/acme/tiny/versions/1", headers=auth).json()
    assert body["facts"]["weights"]["parameters"] == {"value": 6224, "source": "safetensors headers (2 files)"}
    assert body["facts"]["reader_version"] == READER_VERSION
    assert httpx.get(f"{url}/v1/models/acme/bare/versions/1", headers=auth).json()["facts"] is None

    shown = _cli(url, token, "acme/tiny", "1")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert f"  facts (reader {READER_VERSION}):" in out
    assert "parameters 6224; tensor bytes 24896; dtypes F32 6224" in out
    assert "layers 2, hidden 16, heads 2, KV heads 2, head dim 8" in out
    assert "KV cache per token: 128 bytes fp16, 64 bytes fp8 (mha)" in out
    assert "capacity at" not in out
    # 128 bytes/token x 8192 tokens x 4 sequences = 4 MiB of KV cache at fp16, on top of 24896 bytes of weights.
    shown = _cli(url, token, "acme/tiny", "1", "--context", "8192", "--sequences", "4")
    assert shown.returncode == 0, shown.stderr
    assert "capacity at 8192 tokens x 4 sequence(s):" in shown.stdout
    assert f"KV cache fp16: 0.00 GiB (4194304 bytes); GPU memory needed 0.00 GiB ({4194304 + 24896} bytes)" \
        in shown.stdout
    assert "not counted: activations" in shown.stdout
    as_json = json.loads(_cli(url, token, "acme/tiny", "1", "--context", "8192", "--sequences", "4",
                              "--json").stdout)
    assert as_json["facts"] == body["facts"]
    assert as_json["capacity"]["total_bytes"] == {"fp16": 4194304 + 24896, "fp8": 2097152 + 24896}
    # The old flags and output still hold; JSON without --context is the API's answer as it is.
    assert json.loads(_cli(url, token, "acme/tiny", "1", "--json").stdout) == body
    bare = _cli(url, token, "acme/bare", "1")
    assert bare.returncode == 0 and "  facts: not recorded" in bare.stdout
    refused = _cli(url, token, "acme/bare", "1", "--context", "10")
    assert refused.returncode == 1 and "no facts recorded" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    usage = _cli(url, token, "acme/tiny", "1", "--sequences", "4")
    assert usage.returncode == 1 and "--sequences needs --context" in usage.stderr
