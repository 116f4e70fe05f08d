"""The node's trust-root checks (the pinned file, each rotation walked, the final root's expiry) against forgeries.

Every row starts from roots the registry's own functions make (``root_document`` + ``sign_root``, as
``modelreg keys rotate`` does), alters one thing and names the ``reason`` the node refuses it with: every
field of the envelope and payload altered after signing, payloads re-signed with bad values, key-id tricks,
every threshold from 0 to n+1, rotations that skip or are signed by the wrong keys, the clock both ways.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest

from registry.client.errors import exit_code
from registry.node.trust import NodeTrust
from registry.signing.canonical import canonical_json
from registry.signing.dsse import pae
from registry.signing.keys import SigningKey
from registry.signing.trust_root import (
    ROOT_PAYLOAD_TYPE,
    RootError,
    parse_root,
    root_document,
    sign_root,
    walk,
)

NOW = dt.datetime(2030, 6, 1, tzinfo=dt.timezone.utc)
EXPIRES = NOW + dt.timedelta(days=365)
OLD = [SigningKey.generate() for _ in range(3)]
NEW = [SigningKey.generate() for _ in range(3)]
OUTSIDER = SigningKey.generate()


def _doc(version: int = 1, keys: list[SigningKey] = OLD, threshold: int = 2, expires: dt.datetime = EXPIRES,
         **changes: Any) -> dict[str, Any]:
    doc = root_document(version, [k.public_key for k in keys], threshold, expires)
    doc.update(changes)
    return doc


def _raw_sign(doc: dict[str, Any], signers: list[tuple[SigningKey, str]]) -> dict[str, Any]:
    """An envelope over ``doc`` whose signatures claim the key ids given (for key-id tricks)."""
    payload = canonical_json(doc)
    return {"payload": base64.b64encode(payload).decode(), "payloadType": ROOT_PAYLOAD_TYPE,
            "signatures": [{"sig": base64.b64encode(k.sign(pae(ROOT_PAYLOAD_TYPE, payload))).decode(), "keyid": kid}
                           for k, kid in signers]}


PINNED = sign_root(_doc(), OLD[:2])


def _pinned_refused(envelope: Any, reason: str, fragment: str) -> None:
    with pytest.raises(RootError) as caught:
        parse_root(envelope)
    assert caught.value.details["reason"] == reason and fragment in caught.value.message, caught.value
    assert exit_code(caught.value) == (10, "signature")


def _altered(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    envelope = dict(PINNED)
    doc = json.loads(base64.b64decode(envelope["payload"]))
    change(doc)
    envelope["payload"] = base64.b64encode(json.dumps(doc).encode()).decode()
    return envelope


AFTER_SIGNING = {
    "version": lambda d: d.__setitem__("version", 2),
    "expires": lambda d: d.__setitem__("expires", (EXPIRES + dt.timedelta(days=3650)).isoformat()),
    "threshold": lambda d: d.__setitem__("threshold", 1),
    "a key replaced": lambda d: d["keys"].__setitem__(0, _doc(keys=[OUTSIDER], threshold=1)["keys"][0]),
    "a key added": lambda d: d["keys"].append(_doc(keys=[OUTSIDER], threshold=1)["keys"][0]),
    "a key removed": lambda d: d["keys"].pop(),
    "a field added": lambda d: d.__setitem__("note", "x"),
    "re-encoded": lambda d: None,
}


@pytest.mark.parametrize("field", sorted(AFTER_SIGNING))
def test_every_root_field_altered_after_signing_is_refused(field):
    _pinned_refused(_altered(AFTER_SIGNING[field]), "signature", "a threshold (")


SIGNED_BAD: list[tuple[str, Callable[[], dict[str, Any]], str, str]] = [
    ("another _type", lambda: sign_root(_doc(_type="https://modelreg.dev/release/v1"), OLD[:2]), "malformed",
     "is not a https://modelreg.dev/root/v1"),
    ("version 0", lambda: sign_root(_doc(version=0), OLD[:2]), "malformed", "version is not a positive"),
    ("version as text", lambda: sign_root(_doc(version="1"), OLD[:2]), "malformed", "version is not a positive"),
    ("no keys", lambda: sign_root(_doc(keys=[]), OLD[:2]), "malformed", "lists 1 to 16 keys"),
    ("seventeen keys", lambda: sign_root(_doc(keys=OLD[:1], threshold=1) | {
        "keys": _doc(keys=OLD[:1], threshold=1)["keys"] * 17}, OLD[:1]), "malformed", "lists 1 to 16 keys"),
    ("a key of another algorithm", lambda: sign_root(_doc() | {"keys": [
        {**k, "algorithm": "ed25519"} for k in _doc()["keys"]]}, OLD[:2]), "malformed", "is not ecdsa-p256"),
    ("a key that is not a PEM", lambda: sign_root(_doc() | {"keys": [
        {**k, "public_key_pem": "not a key"} for k in _doc()["keys"]]}, OLD[:2]), "malformed", "not a P-256"),
    ("a key id that is not the key's", lambda: sign_root(_doc() | {"keys": [
        {**k, "key_id": OUTSIDER.key_id} if i == 0 else k for i, k in enumerate(_doc()["keys"])]}, OLD[:2]),
     "malformed", "id is not the sha256 of its PEM"),
    ("threshold 0", lambda: sign_root(_doc(threshold=0), OLD), "malformed", "threshold is not between 1"),
    ("threshold n+1", lambda: sign_root(_doc(threshold=4), OLD), "malformed", "threshold is not between 1"),
    ("threshold as text", lambda: sign_root(_doc(threshold="2"), OLD), "malformed", "threshold is not between 1"),
    ("no expiry", lambda: sign_root({k: v for k, v in _doc().items() if k != "expires"}, OLD[:2]), "malformed",
     "expiry is not an ISO 8601"),
    ("expiry with no time zone", lambda: sign_root(_doc(expires=EXPIRES.replace(tzinfo=None)) | {
        "expires": EXPIRES.replace(tzinfo=None).isoformat()}, OLD[:2]), "malformed", "expiry has no time zone"),
    ("payload not base64", lambda: {**PINNED, "payload": "%%%"}, "malformed", "not base64 JSON"),
    ("payload type of a release", lambda: {**PINNED, "payloadType": "application/vnd.modelreg.release+json"},
     "signature", "payload type"),
    ("no signatures", lambda: {**PINNED, "signatures": []}, "signature", "no signatures"),
    # Key-id tricks: a threshold of two is two keys that verified, whatever ids the signatures claim.
    ("one key twice", lambda: _raw_sign(_doc(), [(OLD[0], OLD[0].key_id), (OLD[0], OLD[0].key_id)]),
     "signature", "1 of the required 2"),
    ("one key twice, claiming a second trusted id", lambda: _raw_sign(
        _doc(), [(OLD[0], OLD[0].key_id), (OLD[0], OLD[1].key_id)]), "signature", "1 of the required 2"),
    ("one key twice under two made-up ids", lambda: _raw_sign(_doc(), [(OLD[0], "k1"), (OLD[0], "k2")]),
     "signature", "1 of the required 2"),
    ("an outsider claiming a trusted id", lambda: _raw_sign(
        _doc(), [(OLD[0], OLD[0].key_id), (OUTSIDER, OLD[1].key_id)]), "signature", "1 of the required 2"),
    ("signed by outsiders only", lambda: sign_root(_doc(), [OUTSIDER, SigningKey.generate()]), "signature",
     "0 of the required 2"),
]


@pytest.mark.parametrize("row,forge,reason,fragment", SIGNED_BAD, ids=[row[0] for row in SIGNED_BAD])
def test_a_forged_pinned_root_is_refused_with_its_reason(row, forge, reason, fragment):
    _pinned_refused(forge(), reason, fragment)


@pytest.mark.parametrize("threshold", range(1, len(OLD) + 1))
@pytest.mark.parametrize("signers", range(0, len(OLD) + 1))
def test_a_root_needs_a_threshold_of_its_own_keys(threshold, signers):
    envelope = sign_root(_doc(threshold=threshold), OLD[:signers] or [OUTSIDER])
    if signers < threshold:
        _pinned_refused(envelope, "signature", f"{signers} of the required {threshold}")
    else:
        assert parse_root(envelope).threshold == threshold


# --- rotations -----------------------------------------------------------------------------------------

def _two(**kw: Any) -> dict[str, Any]:
    doc = _doc(version=kw.pop("version", 2), keys=kw.pop("keys", NEW), threshold=kw.pop("threshold", 2),
               expires=kw.pop("expires", EXPIRES))
    return sign_root(doc, kw.pop("signers", OLD[:2] + NEW[:2]))


ROTATIONS: list[tuple[str, Callable[[], dict[int, dict[str, Any]]], str | None, str]] = [
    ("signed by both roots", lambda: {2: _two()}, None, ""),
    ("an expired root between, the last one current", lambda: {
        2: _two(expires=NOW - dt.timedelta(days=1)),
        3: sign_root(_doc(version=3, keys=OLD), NEW[:2] + OLD[:2])}, None, ""),
    ("signed by the new keys only", lambda: {2: _two(signers=NEW[:2])}, "signature", "root 1's keys"),
    ("signed by the old keys only", lambda: {2: _two(signers=OLD[:2])}, "signature", "its own keys"),
    ("one old signature short of root 1's threshold", lambda: {2: _two(signers=OLD[:1] + NEW[:2])}, "signature",
     "root 1's keys"),
    ("one new signature short of its own threshold", lambda: {2: _two(signers=OLD[:2] + NEW[:1])}, "signature",
     "its own keys"),
    ("a version skipped", lambda: {2: _two(version=3)}, "version", "expected trust root version 2, got 3"),
    ("the same version again", lambda: {2: sign_root(_doc(), OLD[:2])}, "version", "expected trust root version 2"),
    ("a final root expired", lambda: {2: _two(expires=NOW - dt.timedelta(seconds=1))}, "expired", "expired at"),
    ("a final root expiring now", lambda: {2: _two(expires=NOW)}, "expired", "expired at"),
    ("more rotations than one walk takes", lambda: {
        v: sign_root(_doc(version=v, keys=OLD), OLD[:2]) for v in range(2, 6)}, "version", "more than 3"),
]


@pytest.mark.parametrize("row,served,reason,fragment", ROTATIONS, ids=[row[0] for row in ROTATIONS])
def test_each_rotation_forgery_is_refused_and_the_trusted_root_is_kept(row, served, reason, fragment):
    trusted = parse_root(PINNED)
    roots = served()
    if reason is None:
        assert walk(trusted, roots.get, now=NOW, max_steps=3).version == max(roots)
        return
    with pytest.raises(RootError) as caught:
        walk(trusted, roots.get, now=NOW, max_steps=3)
    assert caught.value.details["reason"] == reason and fragment in caught.value.message, caught.value
    assert exit_code(caught.value) == ((11, "expired") if reason == "expired" else (10, "signature"))


CLOCKS = [
    ("a year before expiry", EXPIRES - dt.timedelta(days=365), None),
    ("a second before expiry", EXPIRES - dt.timedelta(seconds=1), None),
    ("at expiry", EXPIRES, "expired"),
    ("a day past expiry", EXPIRES + dt.timedelta(days=1), "expired"),
    ("a century past expiry", EXPIRES + dt.timedelta(days=36500), "expired"),
]


@pytest.mark.parametrize("row,now,reason", CLOCKS, ids=[row[0] for row in CLOCKS])
def test_the_pinned_roots_expiry_against_the_clock_both_ways(tmp_path, row, now, reason):
    pinned = tmp_path / "root.json"
    pinned.write_text(json.dumps(PINNED))
    trust = NodeTrust.load(pinned, tmp_path / "cache")
    if reason is None:
        assert trust.refresh(lambda version: None, now=now).version == 1
        return
    with pytest.raises(RootError) as caught:
        trust.refresh(lambda version: None, now=now)
    assert caught.value.details["reason"] == reason
    assert exit_code(caught.value) == (11, "expired")
