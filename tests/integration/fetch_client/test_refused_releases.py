"""A release the node must not trust (forged, signed by an unknown key or by a rotation its previous root did
not sign, expired, rolled back, naming a path outside DEST or other files than the version's) is refused
with its own code and one stderr line, and DEST is left as it was."""

from __future__ import annotations

import base64
import datetime as dt
import json

import pytest

from registry.signing.keys import SigningKey
from registry.signing.trust_root import root_document, sign_root
from tests.support.fetch_node import (
    LATER,
    NOW,
    assert_refused,
    build_node_world,
    refusal_leaves_dest_as_it_was,
)

pytestmark = pytest.mark.seeded(builder=build_node_world)


def _forged(node) -> None:
    body = node.release()
    payload = json.loads(base64.b64decode(body["envelope"]["payload"]))
    payload["version"] = 2
    body["envelope"]["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()


def _unknown_key(node) -> None:
    node.release(keys=[SigningKey.generate()])


def _expired(node) -> None:
    node.release(expires=NOW - dt.timedelta(seconds=1))


def _traversal(node) -> None:
    node.release(files=[*node.files, {"path": "../escape.txt", "size": 1, "sha256": "a" * 64}])


def _extra_file(node) -> None:
    node.release(files=[*node.files, {"path": "extra.txt", "size": 1, "sha256": node.files[0]["sha256"]}])


def _missing_file(node) -> None:
    node.release(files=[f for f in node.files if f["path"] != "config.json"])


def _rotation_not_signed_by_previous(node) -> None:
    new = SigningKey.generate()
    node.standin.roots[2] = sign_root(root_document(2, [new.public_key], 1, LATER), [new])
    node.release(keys=[new], root_version=2)


@pytest.mark.parametrize("attack,code,kind", [
    (_forged, 10, "signature"), (_unknown_key, 10, "signature"), (_expired, 11, "expired"),
    (_traversal, 18, "manifest"), (_extra_file, 18, "manifest"), (_missing_file, 18, "manifest"),
    (_rotation_not_signed_by_previous, 10, "signature"),
])
@pytest.mark.parametrize("dest_kind", ["absent", "empty"])
@pytest.mark.parametrize("cache", ["cache", "no-cache"])
def test_each_refused_release_leaves_dest_as_it_was(node, attack, code, kind, dest_kind, cache):
    refusal_leaves_dest_as_it_was(node, attack, code, kind, dest_kind, cache)


def test_a_lower_serial_is_refused_after_a_higher_one_was_accepted(node):
    node.release(serial=5)
    assert node.fetch(node.tmp / "one").returncode == 0
    node.release(serial=4)
    assert_refused(node.fetch(node.tmp / "two"), 12, "rollback")
    assert not (node.tmp / "two").exists()
    node.release(serial=5)
    assert node.fetch(node.tmp / "three").returncode == 0
