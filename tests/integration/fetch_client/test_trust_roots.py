"""Trust roots: a rotation signed by both roots is walked and cached only after a success; a root pinned by its
sha256 is fetched and walked forward, a wrong pin or another root 1 refused before the manifest."""

from __future__ import annotations

import datetime as dt
import hashlib
import json

import pytest

from registry.signing.keys import SigningKey
from registry.signing.trust_root import root_document, sign_root
from tests.support.fetch_node import (
    BIG,
    LATER,
    NOW,
    assert_refused,
    build_node_world,
)

pytestmark = pytest.mark.seeded(builder=build_node_world)


def test_a_rotation_signed_by_both_roots_is_walked_and_kept_in_the_cache_only_after_success(node):
    new = SigningKey.generate()
    node.standin.roots[2] = sign_root(root_document(2, [new.public_key], 1, LATER), [node.key, new])
    pinned = node.root_file.read_bytes()
    node.release(keys=[new], root_version=2, expires=NOW - dt.timedelta(seconds=1))
    assert_refused(node.fetch(node.tmp / "expired"), 11, "expired")
    assert not (node.cache / "trust" / "roots" / "2.json").exists()
    node.release(keys=[new], root_version=2)
    ok = node.fetch(node.tmp / "dest")
    assert ok.returncode == 0, ok.stderr
    assert (node.cache / "trust" / "roots" / "2.json").exists() and node.root_file.read_bytes() == pinned
    # The next fetch trusts root 2 from the cache (walked again from the pin) even if the registry is quiet.
    del node.standin.roots[2]
    assert node.fetch(node.tmp / "dest2").returncode == 0


def _served_root_sha256(node, version: int = 1) -> str:
    import httpx

    return hashlib.sha256(httpx.get(f"{node.standin.url}/v1/trust-root/{version}", timeout=30).content).hexdigest()


def test_a_trust_root_pinned_by_sha256_is_fetched_from_the_registry_and_walked_forward(node):
    node.use_cache = False
    pin = _served_root_sha256(node)
    # A rotation signed by root 1 and the new key: the fetch walks from the pinned root 1 to it.
    new = SigningKey.generate()
    node.standin.roots[2] = sign_root(root_document(2, [new.public_key], 1, LATER), [node.key, new])
    node.release(keys=[new], root_version=2)
    dest = node.tmp / "dest"
    ok = node.cli("fetch", "acme/tiny@prod", str(dest), "--trust-root-sha256", pin, "--json")
    assert ok.returncode == 0, ok.stderr
    assert (dest / "big.txt").read_bytes() == BIG
    verified = node.cli("verify", str(dest), "--trust-root-sha256", pin.upper())
    assert verified.returncode == 0, verified.stderr
    # The file and the pin together: the file must be the pinned bytes.
    both = node.cli("fetch", "acme/tiny@prod", str(node.tmp / "dest-2"), "--trust-root", str(node.root_file),
                    "--trust-root-sha256", hashlib.sha256(node.root_file.read_bytes()).hexdigest())
    assert both.returncode == 0, both.stderr


def test_a_wrong_pin_is_refused_before_the_manifest_and_dest_stays_absent(node):
    node.use_cache = False
    node.release()
    wrong = hashlib.sha256(b"another root").hexdigest()
    dest = node.tmp / "dest"
    refused = node.cli("fetch", "acme/tiny@prod", str(dest), "--trust-root-sha256", wrong)
    assert_refused(refused, 10, "signature")
    assert "the registry's trust root 1 hashes to sha256" in refused.stderr and wrong in refused.stderr
    assert not dest.exists() and node.standin.manifest_gets == []
    # The file given too, and not the pinned one: refused the same way.
    refused = node.cli("fetch", "acme/tiny@prod", str(dest), "--trust-root", str(node.root_file),
                       "--trust-root-sha256", wrong)
    assert_refused(refused, 10, "signature")
    assert not dest.exists()


def test_a_registry_serving_another_root_1_than_the_pinned_one_is_refused(node):
    node.use_cache = False
    pin = _served_root_sha256(node)
    # The attacker's registry: its own root 1 (self-signed, valid on its own) and releases it signs.
    attacker = SigningKey.generate()
    node.standin.roots = {1: sign_root(root_document(1, [attacker.public_key], 1, LATER), [attacker])}
    node.release(keys=[attacker])
    dest = node.tmp / "mnt-models"
    dest.mkdir()
    assert_refused(node.cli("fetch", "acme/tiny@prod", str(dest), "--trust-root-sha256", pin), 10, "signature")
    assert list(dest.iterdir()) == []
    # The same root 1 re-serialized (other whitespace) is other bytes: refused too, the pin is of bytes.
    node.standin.roots = {}
    original = json.loads(node.root_file.read_text())
    node.standin.raw_roots = {1: json.dumps(original, indent=1).encode()}
    assert_refused(node.cli("fetch", "acme/tiny@prod", str(dest), "--trust-root-sha256", pin), 10, "signature")
    assert list(dest.iterdir()) == []
