"""Every check a node makes on a release before a byte is downloaded, against a table of forged releases.

Each row starts from a release the registry's own signer makes (``release_payload`` + ``sign_release``,
as ``registry/services/manifests.py`` does), alters one thing, and names the error and reason the node
must refuse it with: every field of the envelope and of the payload altered after signing, payloads
re-signed with bad values, every key-id trick, every threshold from 0 to n+1, the node's clock skewed both
ways, hostile paths. ``verify_manifest`` is the node's whole pre-download check (``registry.node.opener``).
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest

from registry.client.errors import BadManifestError, exit_code
from registry.domain.components import NODE_WRITTEN_FILES, components_map, unit_components
from registry.domain.errors import InvalidInputError, InvalidPathError, SignatureError
from registry.domain.files import FileEntry
from registry.domain.refs import parse_ref
from registry.node.opener import verify_manifest
from registry.node.trust import NodeTrust
from registry.signing.dsse import MAX_SIGNATURES
from registry.signing.keys import SigningKey
from registry.signing.release import (
    MAX_CLOCK_SKEW,
    RELEASE_PAYLOAD_TYPE,
    ReleaseExpiredError,
    ReleaseMismatchError,
    ReleaseNotYetValidError,
    ReleaseRollbackError,
    release_payload,
    sign_release,
)
from registry.signing.trust_root import TrustRoot, parse_root, root_document, sign_root

NOW = dt.datetime(2030, 6, 1, 12, 0, tzinfo=dt.timezone.utc)
ISSUED, EXPIRES = NOW - dt.timedelta(minutes=1), NOW + dt.timedelta(minutes=5)
KEYS = [SigningKey.generate() for _ in range(3)]
OUTSIDER = SigningKey.generate()
FILES = [{"path": "config.json", "size": 2, "sha256": hashlib.sha256(b"{}").hexdigest()},
         {"path": "weights/model.safetensors", "size": 5, "sha256": hashlib.sha256(b"12345").hexdigest()}]


def _bundle(files: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    statement = json.dumps({"predicate": {"resources": [{"name": f["path"], "digest": f["sha256"]}
                                                         for f in files]}}).encode()
    return {"dsseEnvelope": {"payload": base64.b64encode(statement).decode()}}, hashlib.sha256(statement).hexdigest()


BUNDLE, STATEMENT = _bundle(FILES)


def _root(threshold: int, keys: list[SigningKey] = KEYS) -> TrustRoot:
    """A trust root of ``keys``; thresholds a root document cannot hold (0, n+1) are built directly."""
    if 1 <= threshold <= len(keys):
        doc = root_document(1, [k.public_key for k in keys], threshold, NOW + dt.timedelta(days=365))
        return parse_root(sign_root(doc, keys))
    return TrustRoot(1, NOW + dt.timedelta(days=365), threshold, {k.key_id: k.public_key for k in keys}, {})


ROOT = _root(2)  # three keys, two must sign


def _payload(**changes: Any) -> dict[str, Any]:
    payload = release_payload(model="acme/tiny", ref="prod", tenant="acme", version=3,
                              source={"kind": "hf", "repo": "org/tiny", "revision": "a" * 40}, files=FILES,
                              license="mit", facts={"params": 1}, statement_digest=STATEMENT,
                              approval_digest="d" * 64, serial=7, issued_at=ISSUED, expires_at=EXPIRES)
    payload.update(changes)
    return payload


def _signed(payload: dict[str, Any] | None = None, signers: list[SigningKey] | None = None) -> dict[str, Any]:
    return sign_release(payload if payload is not None else _payload(), signers or KEYS[:2])


def check(envelope: Any, *, root: TrustRoot = ROOT, now: dt.datetime = NOW, min_serial: int | None = None,
          bundle: dict[str, Any] = BUNDLE, ref: str = "acme/tiny@prod"):
    trust = NodeTrust(root, state_dir=None, serials={} if min_serial is None else {"acme/tiny@prod": min_serial})
    return verify_manifest(envelope, bundle, ref=parse_ref(ref), trust=trust, now=now)


# --- the envelope and payload altered after signing: the signature no longer verifies ------------------

def _altered_payload(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    envelope = _signed()
    payload = json.loads(base64.b64decode(envelope["payload"]))
    change(payload)
    envelope["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    return envelope


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda payload: payload.__setitem__(key, value)


def _set_file(index: int, key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda payload: payload["files"][index].__setitem__(key, value)


AFTER_SIGNING = {
    "_type": _set("_type", "https://modelreg.dev/release/v2"), "model": _set("model", "acme/other"),
    "ref": _set("ref", "canary"), "tenant": _set("tenant", "beta"), "version": _set("version", 4),
    "source": _set("source", {"kind": "hf", "repo": "evil/tiny", "revision": "b" * 40}),
    "license": _set("license", "apache-2.0"), "facts": _set("facts", {"params": 2}),
    "statement_digest": _set("statement_digest", "e" * 64), "approval_digest": _set("approval_digest", "e" * 64),
    "serial": _set("serial", 8), "issued_at": _set("issued_at", NOW.isoformat()),
    "expires_at": _set("expires_at", (NOW + dt.timedelta(days=3650)).isoformat()),
    "files[].path": _set_file(1, "path", "weights/other.safetensors"), "files[].size": _set_file(1, "size", 6),
    "files[].sha256": _set_file(1, "sha256", "f" * 64),
    "files: one added": lambda p: p["files"].append({"path": "extra.bin", "size": 1, "sha256": "0" * 64}),
    "files: one removed": lambda p: p["files"].pop(),
    "a field added": _set("note", "x"),
    "a field removed": lambda p: p.pop("license"),
    "re-encoded with other whitespace": lambda p: None,  # json.dumps spacing differs from canonical JSON
}


@pytest.mark.parametrize("field", sorted(AFTER_SIGNING))
def test_every_payload_field_altered_after_signing_is_refused(field):
    with pytest.raises(SignatureError) as caught:
        check(_altered_payload(AFTER_SIGNING[field]))
    assert type(caught.value) is SignatureError and caught.value.details["reason"] == "threshold"
    assert caught.value.details["verified_key_ids"] == []
    assert exit_code(caught.value) == (10, "signature")


def _envelope(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    envelope = _signed()
    change(envelope)
    return envelope


def _resign_signature(envelope: dict[str, Any], key: SigningKey, keyid: str) -> dict[str, str]:
    from registry.signing.canonical import canonical_json
    from registry.signing.dsse import pae

    sig = key.sign(pae(RELEASE_PAYLOAD_TYPE, canonical_json(_payload())))
    return {"sig": base64.b64encode(sig).decode(), "keyid": keyid}


def _other_payload_sig(envelope: dict[str, Any]) -> None:
    other = _signed(_payload(serial=8))
    envelope["signatures"] = other["signatures"]


# (row, forged envelope, error class, reason)
ENVELOPES: list[tuple[str, Callable[[], Any], type, str]] = [
    ("not an object", lambda: [], SignatureError, "malformed"),
    ("an unknown envelope field", lambda: _envelope(lambda e: e.__setitem__("x", 1)), SignatureError, "malformed"),
    ("payloadType of a trust root", lambda: _envelope(
        lambda e: e.__setitem__("payloadType", "application/vnd.modelreg.root+json")), SignatureError, "payload-type"),
    ("payloadType missing", lambda: _envelope(lambda e: e.pop("payloadType")), SignatureError, "payload-type"),
    ("payload not base64", lambda: _envelope(lambda e: e.__setitem__("payload", "%%%")), SignatureError, "malformed"),
    ("payload not a string", lambda: _envelope(lambda e: e.__setitem__("payload", 7)), SignatureError, "malformed"),
    ("payload missing", lambda: _envelope(lambda e: e.pop("payload")), SignatureError, "malformed"),
    ("signatures missing", lambda: _envelope(lambda e: e.pop("signatures")), SignatureError, "unsigned"),
    ("signatures empty", lambda: _envelope(lambda e: e.__setitem__("signatures", [])), SignatureError, "unsigned"),
    ("signatures not a list", lambda: _envelope(lambda e: e.__setitem__("signatures", {"sig": "x"})),
     SignatureError, "unsigned"),
    ("more signatures than a node reads", lambda: _envelope(
        lambda e: e.__setitem__("signatures", e["signatures"] * (MAX_SIGNATURES // 2 + 1))), SignatureError,
     "malformed"),
    ("a signature not an object", lambda: _envelope(lambda e: e["signatures"].append("sig")), SignatureError,
     "malformed"),
    ("a keyid not a string", lambda: _envelope(lambda e: e["signatures"][0].__setitem__("keyid", 1)), SignatureError,
     "malformed"),
    ("a sig not base64", lambda: _envelope(lambda e: e["signatures"][0].__setitem__("sig", "%%%")), SignatureError,
     "malformed"),
    ("a sig flipped", lambda: _envelope(lambda e: e["signatures"][0].__setitem__(
        "sig", base64.b64encode(bytes(b ^ 1 for b in base64.b64decode(e["signatures"][0]["sig"]))).decode())),
     SignatureError, "threshold"),
    ("the signatures of another release", lambda: _envelope(_other_payload_sig), SignatureError, "threshold"),
    # Key-id tricks: a signature counts for the key that verified it, never for the id it claims.
    ("one key twice", lambda: _envelope(lambda e: e.__setitem__("signatures", [e["signatures"][0]] * 2)),
     SignatureError, "threshold"),
    ("one key twice, the second claiming another trusted key's id", lambda: _envelope(
        lambda e: e.__setitem__("signatures", [e["signatures"][0], {**e["signatures"][0], "keyid": KEYS[1].key_id}])),
     SignatureError, "threshold"),
    ("one key twice, once with an empty keyid", lambda: _envelope(
        lambda e: e.__setitem__("signatures", [e["signatures"][0], {**e["signatures"][0], "keyid": ""}])),
     SignatureError, "threshold"),
    ("one key twice under two made-up ids", lambda: _envelope(
        lambda e: e.__setitem__("signatures",
                                [{**e["signatures"][0], "keyid": "k1"}, {**e["signatures"][0], "keyid": "k2"}])),
     SignatureError, "threshold"),
    ("one key three times: empty, made-up and its own id", lambda: _envelope(
        lambda e: e.__setitem__("signatures",
                                [{**e["signatures"][0], "keyid": ""}, {**e["signatures"][0], "keyid": "k"},
                                               e["signatures"][0]])),
     SignatureError, "threshold"),
    ("an outsider's signature claiming a trusted key's id", lambda: _envelope(
        lambda e: e.__setitem__("signatures", [e["signatures"][0], _resign_signature(e, OUTSIDER, KEYS[1].key_id)])),
     SignatureError, "threshold"),
    ("an outsider's signature with its own id", lambda: _envelope(
        lambda e: e.__setitem__("signatures", [e["signatures"][0], _resign_signature(e, OUTSIDER, OUTSIDER.key_id)])),
     SignatureError, "threshold"),
    ("outsiders only", lambda: _signed(signers=[OUTSIDER, SigningKey.generate()]), SignatureError, "threshold"),
    # A keyid naming a trusted key picks the one key tried: a signature under another trusted key's name is void.
    ("keyids swapped between the two signers", lambda: _envelope(lambda e: e.__setitem__("signatures", [
        {**e["signatures"][0], "keyid": KEYS[1].key_id}, {**e["signatures"][1], "keyid": KEYS[0].key_id}])),
     SignatureError, "threshold"),
]


@pytest.mark.parametrize("row,forge,error,reason", ENVELOPES, ids=[row[0] for row in ENVELOPES])
def test_every_envelope_forgery_is_refused_with_its_reason(row, forge, error, reason):
    with pytest.raises(SignatureError) as caught:
        check(forge())
    assert type(caught.value) is error and caught.value.details["reason"] == reason, caught.value
    assert exit_code(caught.value) == (10, "signature")


# Signatures that verify: the key-id hint is only a hint.
GENUINE = [
    ("keyids empty (model_signing writes none)", lambda e: [{**s, "keyid": ""} for s in e["signatures"]]),
    ("keyids naming no trusted key", lambda e: [{**s, "keyid": "nobody"} for s in e["signatures"]]),
    ("an outsider's extra signature", lambda e: [*e["signatures"], _resign_signature(e, OUTSIDER, OUTSIDER.key_id)]),
]


@pytest.mark.parametrize("row,signatures", GENUINE, ids=[row[0] for row in GENUINE])
def test_genuine_signatures_with_odd_key_ids_are_accepted(row, signatures):
    envelope = _signed()
    envelope["signatures"] = signatures(envelope)
    assert check(envelope).serial == 7


# --- thresholds from 0 to n+1 ---------------------------------------------------------------------------

@pytest.mark.parametrize("threshold", range(0, len(KEYS) + 2))
@pytest.mark.parametrize("signers", range(1, len(KEYS) + 1))
def test_a_release_needs_exactly_the_roots_threshold_of_distinct_keys(threshold, signers):
    envelope = _signed(signers=KEYS[:signers])
    root = _root(threshold)
    if threshold == 0:
        # An empty policy never passes, whatever signed.
        with pytest.raises(InvalidInputError) as caught:
            check(envelope, root=root)
        assert "threshold of at least 1" in caught.value.message
    elif signers < threshold:
        with pytest.raises(SignatureError) as caught:
            check(envelope, root=root)
        assert caught.value.details["reason"] == "threshold"
        assert caught.value.details["verified_key_ids"] == sorted(k.key_id for k in KEYS[:signers])
    else:
        assert check(envelope, root=root).version == 3


# --- payloads re-signed with bad values: signed, and still refused --------------------------------------

SIGNED_BAD: list[tuple[str, dict[str, Any], type, str | None]] = [
    ("another _type", {"_type": "https://modelreg.dev/root/v1"}, SignatureError, "malformed"),
    ("another model", {"model": "acme/other"}, ReleaseMismatchError, None),
    ("another ref", {"ref": "canary"}, ReleaseMismatchError, None),
    ("version 0", {"version": 0}, SignatureError, "malformed"),
    ("version as text", {"version": "3"}, SignatureError, "malformed"),
    ("version true", {"version": True}, SignatureError, "malformed"),
    ("serial negative", {"serial": -1}, SignatureError, "malformed"),
    ("serial a float", {"serial": 7.0}, SignatureError, "malformed"),
    ("issued_at missing", {"issued_at": None}, SignatureError, "malformed"),
    ("expires_at with no time zone", {"expires_at": EXPIRES.replace(tzinfo=None).isoformat()}, SignatureError,
     "malformed"),
    ("expires_at not a time", {"expires_at": "tomorrow"}, SignatureError, "malformed"),
    ("tenant missing", {"tenant": None}, SignatureError, "malformed"),
    ("files not a list", {"files": {"config.json": 2}}, SignatureError, "malformed"),
    ("a file not an object", {"files": ["config.json"]}, SignatureError, "malformed"),
    ("a file with no path", {"files": [{"size": 2, "sha256": FILES[0]["sha256"]}]}, SignatureError, "malformed"),
    ("a file size negative", {"files": [{**FILES[0], "size": -1}]}, SignatureError, "malformed"),
    ("a file size as text", {"files": [{**FILES[0], "size": "2"}]}, SignatureError, "malformed"),
    ("a file sha256 short", {"files": [{**FILES[0], "sha256": "ab" * 16}]}, SignatureError, "malformed"),
    ("a file sha256 upper case", {"files": [{**FILES[0], "sha256": FILES[0]["sha256"].upper()}]}, SignatureError,
     "malformed"),
    ("a path listed twice", {"files": [FILES[0], {**FILES[0], "size": 3}]}, InvalidPathError,
     "listed twice in the release"),
    ("statement_digest of another bundle", {"statement_digest": "e" * 64}, BadManifestError, None),
    ("files other than the bundle's", {"files": [FILES[0]]}, BadManifestError, None),
]


@pytest.mark.parametrize("row,changes,error,reason", SIGNED_BAD, ids=[row[0] for row in SIGNED_BAD])
def test_a_signed_release_with_bad_values_is_refused_with_its_reason(row, changes, error, reason):
    with pytest.raises(error) as caught:
        check(_signed(_payload(**changes)))
    assert type(caught.value) is error, caught.value
    assert caught.value.details.get("reason") == reason, caught.value


# --- hostile paths, signed: refused before assembly -----------------------------------------------------

HOSTILE_PATHS = [
    ("../escape", "segment '..' is not allowed"), ("weights/../../etc/passwd", "segment '..' is not allowed"),
    ("/etc/passwd", "absolute path"), ("./config.json", "segment '.' is not allowed"),
    ("weights//x", "segment '' is not allowed"), ("weights/", "segment '' is not allowed"),
    ("", "empty path"), ("weights\\x", "backslash in path"), ("C:x", "drive letter in path"),
    ("a\x00b", None), ("a\nb", None), ("evil\u202etxt.exe", None), ("cafe\u0301", "path is not in Unicode NFC form"),
    ("x" * 5000, None),
    ("model.sig", "reserved for the fetched directory's signature and release"),
    (".git", "reserved for the fetched directory's signature and release"),
    (".git/modelreg-release.json", "reserved for the fetched directory's signature and release"),
    (".git/hooks/post-checkout", "reserved for the fetched directory's signature and release"),
]


@pytest.mark.parametrize("path,reason", HOSTILE_PATHS, ids=[repr(p[:20]) for p, _ in HOSTILE_PATHS])
def test_a_hostile_path_in_a_signed_release_is_refused_before_any_download(path, reason):
    files = [*FILES, {"path": path, "size": 1, "sha256": "0" * 64}]
    bundle, statement = _bundle(files)
    with pytest.raises(InvalidPathError) as caught:
        check(_signed(_payload(files=files, statement_digest=statement)), bundle=bundle)
    assert type(caught.value) is InvalidPathError
    if reason is not None:
        assert caught.value.details["reason"] == reason
    else:
        assert caught.value.details["reason"]  # a control, bidirectional or length problem, named
    assert exit_code(caught.value) == (18, "manifest")


# --- the node's clock, both ways, and the serial ---------------------------------------------------------

CLOCKS: list[tuple[str, dt.datetime, type | None]] = [
    ("just issued", ISSUED, None),
    ("a second before expiry", EXPIRES - dt.timedelta(seconds=1), None),
    ("at expiry", EXPIRES, ReleaseExpiredError),
    ("a microsecond past expiry", EXPIRES + dt.timedelta(microseconds=1), ReleaseExpiredError),
    ("a day past expiry", EXPIRES + dt.timedelta(days=1), ReleaseExpiredError),
    ("ten years past issue", ISSUED + dt.timedelta(days=3650), ReleaseExpiredError),
    ("a century past issue", ISSUED + dt.timedelta(days=36500), ReleaseExpiredError),
    ("node clock five minutes behind", ISSUED - dt.timedelta(minutes=5), None),
    ("node clock behind by the allowed skew", ISSUED - MAX_CLOCK_SKEW, None),
    ("node clock behind by more than the skew", ISSUED - MAX_CLOCK_SKEW - dt.timedelta(seconds=1),
     ReleaseNotYetValidError),
    ("node clock a year behind", ISSUED - dt.timedelta(days=365), ReleaseNotYetValidError),
]


@pytest.mark.parametrize("row,now,error", CLOCKS, ids=[row[0] for row in CLOCKS])
def test_the_nodes_clock_skewed_either_way(row, now, error):
    if error is None:
        assert check(_signed(), now=now).serial == 7
        return
    with pytest.raises(ReleaseExpiredError) as caught:
        check(_signed(), now=now)
    assert type(caught.value) is error
    assert exit_code(caught.value) == (11, "expired")


@pytest.mark.parametrize("accepted,error", [(None, None), (6, None), (7, None), (8, ReleaseRollbackError),
                                            (10**9, ReleaseRollbackError)])
def test_a_serial_lower_than_one_accepted_is_a_rollback(accepted, error):
    if error is None:
        assert check(_signed(), min_serial=accepted).serial == 7
        return
    with pytest.raises(ReleaseRollbackError) as caught:
        check(_signed(), min_serial=accepted)
    assert caught.value.details == {"serial": 7, "accepted": accepted}
    assert exit_code(caught.value) == (12, "rollback")


def test_a_release_for_another_ref_is_a_mix_and_match():
    with pytest.raises(ReleaseMismatchError) as caught:
        check(_signed(), ref="acme/tiny@canary")
    assert caught.value.details == {"model": "acme/tiny", "ref": "prod"}


def test_the_unaltered_release_passes():
    # Every row above is one change away from this.
    release = check(copy.deepcopy(_signed()))
    assert (release.model, release.ref, release.version, release.serial) == ("acme/tiny", "prod", 3, 7)
    assert [f.path for f in release.files] == ["config.json", "weights/model.safetensors"]


# --- the release unit: components and parts re-signed malformed, or not those of the files --------------

UNIT_FILES = [*FILES, {"path": "tokenizer_config.json", "size": 2, "sha256": hashlib.sha256(b"{}").hexdigest()}]
UNIT_PARTS = {"tokenizer_config.json": {"chat_template": "1" * 64, "without_chat_template": "2" * 64}}
UNIT_COMPONENTS = components_map(unit_components([FileEntry(**f) for f in UNIT_FILES], UNIT_PARTS))


def _unit_bundle(ignore: tuple[str, ...]) -> tuple[dict[str, Any], str]:
    statement = json.dumps({"predicate": {
        "resources": [{"name": f["path"], "digest": f["sha256"]} for f in UNIT_FILES],
        "serialization": {"ignore_paths": ["model.sig", ".git", *ignore]}}}).encode()
    return {"dsseEnvelope": {"payload": base64.b64encode(statement).decode()}}, hashlib.sha256(statement).hexdigest()


UNIT_BUNDLE, UNIT_STATEMENT = _unit_bundle(NODE_WRITTEN_FILES)


def _unit_release(components: Any = UNIT_COMPONENTS, parts: Any = UNIT_PARTS, files: list[dict] = UNIT_FILES,
                  statement: str = UNIT_STATEMENT) -> dict[str, Any]:
    payload = _payload(files=files, statement_digest=statement, components=components, parts=parts)
    if components is None:
        payload.pop("components")
    if parts is None:
        payload.pop("parts")
    return _signed(payload)


def test_a_release_carrying_its_unit_exposes_the_checked_components_and_parts():
    release = check(_unit_release(), bundle=UNIT_BUNDLE)
    assert release.components == UNIT_COMPONENTS and release.parts == UNIT_PARTS
    assert set(UNIT_COMPONENTS) == {"config", "weights", "tokenizer", "chat_templates"}
    assert check(_signed()).components is None  # a release without the keys: as before


MALFORMED_UNITS = {
    "components without parts": {"parts": None},
    "parts without components": {"components": None},
    "components not an object": {"components": ["weights"]},
    "an unknown component": {"components": {**UNIT_COMPONENTS, "backdoor": "0" * 64}},
    "a digest not hex": {"components": {**UNIT_COMPONENTS, "weights": "Z" * 64}},
    "parts of an unlisted file": {"parts": {**UNIT_PARTS, "other.json": {"chat_template": "1" * 64}}},
    "parts not an object": {"parts": {"tokenizer_config.json": ["chat_template"]}},
    "too many parts": {"parts": {"tokenizer_config.json": {f"chat_template/{i}": "1" * 64 for i in range(129)}}},
    "a part digest not hex": {"parts": {"tokenizer_config.json": {"chat_template": "x"}}},
}


@pytest.mark.parametrize("case", sorted(MALFORMED_UNITS))
def test_a_malformed_release_unit_is_refused(case):
    with pytest.raises(SignatureError) as caught:
        check(_unit_release(**MALFORMED_UNITS[case]), bundle=UNIT_BUNDLE)
    assert caught.value.details["reason"] == "malformed"


@pytest.mark.parametrize("change", [
    {"components": {**UNIT_COMPONENTS, "tokenizer": "0" * 64}},
    {"components": {k: v for k, v in UNIT_COMPONENTS.items() if k != "chat_templates"}},
    {"parts": {"tokenizer_config.json": {**UNIT_PARTS["tokenizer_config.json"], "chat_template": "3" * 64}}},
], ids=["a digest changed", "a component left out", "a part changed under the same digests"])
def test_component_digests_that_are_not_those_of_the_signed_files_and_parts_are_refused(change):
    with pytest.raises(SignatureError) as caught:
        check(_unit_release(**change), bundle=UNIT_BUNDLE)
    assert caught.value.details["reason"] == "components" and "differ" in str(caught.value)
    assert exit_code(caught.value) == (10, "signature")


def test_a_unit_whose_bundle_does_not_ignore_the_written_files_or_that_lists_one_is_refused():
    old_bundle, old_statement = _unit_bundle(())
    with pytest.raises(BadManifestError, match="does not ignore"):
        check(_unit_release(statement=old_statement), bundle=old_bundle)
    listed = [*UNIT_FILES, {"path": "modelreg-unit.json", "size": 2, "sha256": "0" * 64}]
    components = components_map(unit_components([FileEntry(**f) for f in listed], UNIT_PARTS))
    with pytest.raises(InvalidPathError):
        check(_unit_release(components=components, files=listed), bundle=UNIT_BUNDLE)
