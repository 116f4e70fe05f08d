"""modelreg's version signature against the real OpenSSF ``model_signing`` CLI (1.1.1), offline.

A bundle signed by registry.signing must pass ``model_signing verify key`` and fail it after any
change to the model directory; a bundle signed by the CLI must pass our own directory check. Every
CLI run has an audit hook that records (and refuses) any network use, to show ``verify key`` and
``sign key`` work with no network at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from registry.domain.errors import ManifestMismatchError
from registry.signing import (
    SigningKey,
    build_model_statement,
    sign_model_bundle,
    verify_model_bundle,
    verify_model_directory,
)

MODEL_SIGNING = Path(sys.executable).parent / "model_signing"

FILES = {
    "config.json": b'{"architectures": ["TinyModel"], "hidden_size": 8}',
    "model.safetensors": bytes(range(256)) * 4,
    "tokenizer/tokenizer.json": b'{"version": "1.0", "model": {"vocab": {"a": 0}}}',
    "empty.txt": b"",
}

# Loaded into every CLI process through PYTHONPATH: records any attempt to resolve or reach a
# network address, and makes it fail, so an attempt cannot go unnoticed behind a retry or fallback.
SITECUSTOMIZE = """
import os, socket, sys

def _no_network(event, args):
    if event in ("socket.connect", "socket.sendto", "socket.getaddrinfo", "socket.gethostbyname"):
        if event in ("socket.connect", "socket.sendto") and args[0].family == socket.AF_UNIX:
            return
        with open(os.environ["MODELREG_TEST_NETLOG"], "a") as log:
            log.write(f"{event} {args[1:] if event in ('socket.connect', 'socket.sendto') else args}\\n")
        raise OSError("network access is disabled in this test")

sys.addaudithook(_no_network)
# Proof that this process ran guarded: one line per guarded process.
with open(os.environ["MODELREG_TEST_NETLOG"] + ".guarded", "a") as marker:
    marker.write(f"{os.getpid()}\\n")
"""


@pytest.fixture
def offline_env(tmp_path) -> tuple[dict[str, str], Path]:
    site = tmp_path / "offline-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    netlog = tmp_path / "netlog.txt"
    env = dict(os.environ, PYTHONPATH=str(site), MODELREG_TEST_NETLOG=str(netlog), NO_COLOR="1")
    return env, netlog


def _run(env: dict[str, str], *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MODEL_SIGNING), *map(str, args)], env=env, capture_output=True, text=True, timeout=120
    )


def _write_model(root: Path) -> None:
    for path, data in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    # Hugging Face repositories all carry one; model_signing never hashes it, nor do we list it.
    (root / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")


def test_offline_guard_catches_network_use(offline_env):
    env, netlog = offline_env
    probe = (
        "import socket\n"
        "for attempt in (lambda: socket.getaddrinfo('example.org', 443),\n"
        "                lambda: socket.socket().connect(('127.0.0.1', 9))):\n"
        "    try:\n"
        "        attempt()\n"
        "    except OSError:\n"
        "        pass\n"
    )
    subprocess.run([sys.executable, "-c", probe], env=env, check=True, timeout=60)
    log = netlog.read_text()
    assert "socket.getaddrinfo ('example.org', 443" in log
    assert "socket.connect (('127.0.0.1', 9),)" in log


def test_cli_verifies_our_bundle_and_rejects_any_change(tmp_path, offline_env):
    env, netlog = offline_env
    model = tmp_path / "tiny-model"
    _write_model(model)
    key = SigningKey.generate()
    public_key = tmp_path / "registry.pub"
    public_key.write_bytes(key.public_key.public_pem())
    statement = build_model_statement(
        model.name, [(path, hashlib.sha256(data).hexdigest()) for path, data in FILES.items()]
    )
    bundle = sign_model_bundle(statement, key)
    signature = model / "model.sig"
    signature.write_text(json.dumps(bundle))

    def verify() -> subprocess.CompletedProcess[str]:
        return _run(env, "verify", "key", model, "--public_key", public_key, "--signature", signature)

    ok = verify()
    assert ok.returncode == 0, ok.stderr
    assert "Verification succeeded" in ok.stdout
    verify_model_directory(model, json.loads(signature.read_text()), key.public_key)

    # One flipped bit in the weights.
    weights = model / "model.safetensors"
    original = weights.read_bytes()
    weights.write_bytes(original[:100] + bytes([original[100] ^ 0x01]) + original[101:])
    flipped = verify()
    assert flipped.returncode != 0
    assert "Hash mismatch for" in flipped.stderr and "model.safetensors" in flipped.stderr
    with pytest.raises(ManifestMismatchError) as err:
        verify_model_directory(model, bundle, key.public_key)
    assert [m["path"] for m in err.value.mismatched] == ["model.safetensors"]
    weights.write_bytes(original)

    # An added file, empty like the one model_signing's shard mode lets through.
    (model / "tokenizer" / "added.txt").write_bytes(b"")
    added = verify()
    assert added.returncode != 0
    assert "Extra files" in added.stderr and "tokenizer/added.txt" in added.stderr
    with pytest.raises(ManifestMismatchError) as err:
        verify_model_directory(model, bundle, key.public_key)
    assert err.value.extra == ["tokenizer/added.txt"]
    (model / "tokenizer" / "added.txt").unlink()

    # A removed empty file.
    (model / "empty.txt").unlink()
    removed = verify()
    assert removed.returncode != 0
    assert "Missing files" in removed.stderr and "empty.txt" in removed.stderr
    (model / "empty.txt").write_bytes(b"")

    # Another registry's key.
    other = tmp_path / "other.pub"
    other.write_bytes(SigningKey.generate().public_key.public_pem())
    wrong_key = _run(env, "verify", "key", model, "--public_key", other, "--signature", signature)
    assert wrong_key.returncode != 0

    assert verify().returncode == 0  # restored exactly
    assert len(Path(f"{netlog}.guarded").read_text().split()) == 6  # every CLI run was guarded
    assert not netlog.exists(), netlog.read_text()


def test_bundle_signed_by_the_cli_passes_our_verification(tmp_path, offline_env):
    env, netlog = offline_env
    model = tmp_path / "cli-signed"
    _write_model(model)
    key = SigningKey.generate()
    private_key = tmp_path / "registry.pem"
    private_key.write_bytes(key.private_pem())
    signature = model / "model.sig"

    signed = _run(env, "sign", "key", model, "--private_key", private_key, "--signature", signature)
    assert signed.returncode == 0, signed.stderr
    bundle = json.loads(signature.read_text())
    assert bundle["verificationMaterial"]["publicKey"]["hint"] == key.key_id

    statement = verify_model_directory(model, bundle, key.public_key)
    resources = {r["name"]: r["digest"] for r in statement["predicate"]["resources"]}
    assert resources == {path: hashlib.sha256(data).hexdigest() for path, data in FILES.items()}
    # Same files, same manifest: the CLI's resources and root digest equal ours.
    ours = build_model_statement(model.name, list(resources.items()))
    assert verify_model_bundle(bundle, key.public_key)["subject"] == ours["subject"]

    (model / "config.json").write_bytes(b"{}")
    with pytest.raises(ManifestMismatchError) as err:
        verify_model_directory(model, bundle, key.public_key)
    assert [m["path"] for m in err.value.mismatched] == ["config.json"]
    assert Path(f"{netlog}.guarded").exists()
    assert not netlog.exists(), netlog.read_text()
