"""The pin-only trust root (``--trust-root-sha256`` without a file, as KServe's storage initializer runs):
root 1 fetched from the registry is trusted only when exactly the bytes received hash to the pin.

Until these, a registry root that did not match the pin was caught only by the ``modelreg fetch`` tests.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json

import httpx
import pytest

from registry.client.api import RegistryApi
from registry.client.errors import exit_code
from registry.domain.errors import InvalidInputError
from registry.node.cache import NodeCache
from registry.node.opener import NodePolicy, ReleaseOpener
from registry.node.trust import PINNED_ROOT_VERSION, pinned_root
from registry.signing.canonical import canonical_json
from registry.signing.keys import SigningKey
from registry.signing.trust_root import RootError, root_document, sign_root

LATER = dt.datetime(2099, 1, 1, tzinfo=dt.timezone.utc)
KEY, OTHER = SigningKey.generate(), SigningKey.generate()
ROOT = json.dumps(sign_root(root_document(1, [KEY.public_key], 1, LATER), [KEY])).encode()
PIN = hashlib.sha256(ROOT).hexdigest()
# Validly signed, version 1, but by other keys: what a registry (or a man in the middle) that is not the
# operator's would serve.
IMPOSTOR = json.dumps(sign_root(root_document(1, [OTHER.public_key], 1, LATER), [OTHER])).encode()


class Registry:
    """``fetch_bytes`` for :func:`pinned_root`: serves ``roots`` by version and records what was asked."""

    def __init__(self, roots: dict[int, bytes]) -> None:
        self.roots, self.asked = roots, []

    def __call__(self, version: int) -> bytes | None:
        self.asked.append(version)
        return self.roots.get(version)


def _refused(pin: str, served: bytes) -> RootError:
    with pytest.raises(RootError) as caught:
        pinned_root(None, pin, Registry({1: served}))
    return caught.value


def test_root_1_whose_bytes_hash_to_the_pin_is_trusted():
    registry = Registry({1: ROOT, 2: IMPOSTOR})
    root = pinned_root(None, PIN.upper(), registry)  # a pin is hex, either case
    assert root.version == 1 and list(root.keys) == [KEY.key_id]
    assert registry.asked == [PINNED_ROOT_VERSION] == [1]


def test_a_registry_root_that_does_not_hash_to_the_pin_is_refused_before_it_is_parsed():
    refused = _refused(PIN, IMPOSTOR)
    assert refused.details["reason"] == "pin-mismatch"
    assert refused.details["expected"] == PIN
    assert refused.details["actual"] == hashlib.sha256(IMPOSTOR).hexdigest()
    assert "--trust-root-sha256" in refused.message and exit_code(refused)[1] == "signature"
    # Not JSON at all: still the pin that refuses it, not the parser.
    assert _refused(PIN, b"<html>captive portal</html>").details["reason"] == "pin-mismatch"


@pytest.mark.parametrize("change", [
    lambda b: b + b"\n",
    lambda b: json.dumps(json.loads(b), indent=2).encode(),
    lambda b: canonical_json(json.loads(b)),
    lambda b: b[:-1],
], ids=["a trailing newline", "indented", "canonical JSON", "a byte short"])
def test_the_same_root_in_other_bytes_is_refused(change):
    """The pin names bytes, not a document: root 1 re-encoded (whitespace, key order, a byte short) is
    not it."""
    served = change(ROOT)
    assert served != ROOT
    assert _refused(PIN, served).details["reason"] == "pin-mismatch"


def test_a_registry_without_root_1_is_not_found_and_none_to_ask_is_invalid_input():
    assert _refused(PIN, b"").details["reason"] == "pin-mismatch"
    with pytest.raises(RootError) as missing:
        pinned_root(None, PIN, Registry({}))
    assert missing.value.details["reason"] == "not-found"
    with pytest.raises(InvalidInputError, match="needs the registry"):
        pinned_root(None, PIN, None)


# The pins are made from PIN (a fresh key's root) in the test, so that the test ids are the same in every
# pytest-xdist worker.
@pytest.mark.parametrize("make_pin", [lambda p: "", lambda p: "abc", lambda p: p[:-1], lambda p: p + "0",
                                      lambda p: "g" * 64, lambda p: " " + p[1:]],
                         ids=["empty", "short", "63-digits", "65-digits", "not-hex", "leading-space"])
def test_a_pin_that_is_not_a_sha256_is_refused_without_asking_the_registry(make_pin):
    pin = make_pin(PIN)
    registry = Registry({1: ROOT})
    with pytest.raises(InvalidInputError):
        pinned_root(None, pin, registry)
    assert registry.asked == []


def test_a_pin_of_bytes_that_are_no_root_is_refused_by_the_parser():
    garbage = b'{"payload": "e30=", "payloadType": "x", "signatures": []}'
    refused = _refused(hashlib.sha256(garbage).hexdigest(), garbage)
    assert refused.details["reason"] != "pin-mismatch"


def _api(served: bytes) -> RegistryApi:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/trust-root/1", request.url
        return httpx.Response(200, content=served, headers={"content-type": "application/json"})

    return RegistryApi("http://registry.test", "t", transport=httpx.MockTransport(handler))


def test_the_openers_trust_with_only_a_pin_takes_the_registrys_root_only_when_it_is_the_pinned_one(tmp_path):
    """Every node program opens releases with this trust (:meth:`ReleaseOpener.trust`): with only a pin, root 1
    is the registry's GET /v1/trust-root/1, taken only when it hashes to the pin."""
    cache = NodeCache(tmp_path / "cache")
    with _api(ROOT) as api:
        assert ReleaseOpener(api, NodePolicy(None, PIN), state_dir=cache.root).trust().root.version == 1
    with _api(IMPOSTOR) as api, pytest.raises(RootError) as refused:
        ReleaseOpener(api, NodePolicy(None, PIN), state_dir=cache.root).trust()
    assert refused.value.details["reason"] == "pin-mismatch"
    assert not (tmp_path / "cache" / "trust").exists()  # nothing of either answer kept
