"""KServe's default path: ``kserve-storage`` (KServe's own storage code, from PyPI) downloads ``hf://`` from ``/hf``.

An ``InferenceService`` with ``storageUri: hf://acme/llm`` runs KServe's stock storage initializer, whose
entrypoint calls ``kserve_storage.Storage.download_files([uri], [dest])``. Pointed at modelreg with
``HF_ENDPOINT=<registry>/hf`` and a node's token in ``HF_TOKEN``, that unmodified code gets the approved
bytes of the version ``prod`` names (``hf://acme/llm``: the Hub's ``main``), or of a pinned version
(``hf://acme/llm:2``), and is refused a revoked version and a request without a token. Each run is a
fresh process, as in the init container (``HF_ENDPOINT`` is read when ``huggingface_hub`` is imported).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import kserve_storage  # noqa: F401  (KServe's storage code; in the test extras, never skipped)
import pytest

from tests.support.release_seed import MODEL, TENANT, promote, revoke, seed_files, seed_release
from tests.support.server import start_server

INITIALIZER = (
    "import sys\n"
    "from kserve_storage import Storage\n"
    "Storage.download_files([sys.argv[1]], [sys.argv[2]])\n"
)


def _version_files(number: int) -> dict[str, str]:
    """The sha256 of each file release_seed approved as ``number``."""
    return {path: hashlib.sha256(data).hexdigest() for path, data in seed_files(number).items()}


def _downloaded(dest: Path) -> dict[str, str]:
    return {str(p.relative_to(dest)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(dest.rglob("*")) if p.is_file() and ".cache" not in p.relative_to(dest).parts}


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("kserve-storage") / "data"
    token = seed_release(data_dir, 1)[0]
    server = start_server(data_dir, workers=0)
    yield server, token
    server.stop()


def _initialize(server, uri: str, dest: Path, token: str | None, home: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "MODELREG_"))}
    env.update(HF_ENDPOINT=server.url + "/hf", HF_HUB_DISABLE_TELEMETRY="1", HF_HOME=str(home / "hf"),
               HOME=str(home))
    if token:
        env["HF_TOKEN"] = token
    return subprocess.run([sys.executable, "-c", INITIALIZER, uri, str(dest)], env=env, capture_output=True,
                          text=True, timeout=180)


def test_kserve_storage_downloads_prod_s_approved_bytes_from_hf(registry, tmp_path):
    server, token = registry
    dest = tmp_path / "mnt" / "models"
    done = _initialize(server, f"hf://{TENANT}/{MODEL}", dest, token, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _downloaded(dest) == _version_files(1)


def test_a_pinned_version_and_a_moved_alias(registry, tmp_path):
    server, token = registry
    pinned = _initialize(server, f"hf://{TENANT}/{MODEL}:2", tmp_path / "pinned", token, tmp_path)
    assert pinned.returncode == 0, pinned.stderr[-3000:]
    assert _downloaded(tmp_path / "pinned") == _version_files(2)

    promote(server.data_dir, 2)
    try:
        moved = _initialize(server, f"hf://{TENANT}/{MODEL}", tmp_path / "moved", token, tmp_path)
        assert moved.returncode == 0, moved.stderr[-3000:]
        assert _downloaded(tmp_path / "moved") == _version_files(2)
    finally:
        promote(server.data_dir, 1)


def test_no_token_and_a_revoked_version_get_no_bytes(registry, tmp_path):
    server, token = registry
    anonymous = _initialize(server, f"hf://{TENANT}/{MODEL}", tmp_path / "anonymous", None, tmp_path)
    assert anonymous.returncode != 0
    assert not _downloaded(tmp_path / "anonymous")

    revoke(server.data_dir, 2)
    refused = _initialize(server, f"hf://{TENANT}/{MODEL}:2", tmp_path / "revoked", token, tmp_path)
    assert refused.returncode != 0
    assert "RevisionNotFound" in refused.stderr or "404" in refused.stderr, refused.stderr[-3000:]
    assert not _downloaded(tmp_path / "revoked")
