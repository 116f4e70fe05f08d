"""DSSE: the pre-authentication encoding, envelope round trips, tampering, and thresholds of keys."""

from __future__ import annotations

import base64
import copy

import pytest

from registry.domain.errors import InvalidInputError, SignatureError
from registry.signing.dsse import pae, sign_envelope, verify_envelope
from registry.signing.keys import SigningKey

TYPE = "application/vnd.modelreg.release+json"
PAYLOAD = b'{"model":"acme/tiny","serial":7}'


@pytest.fixture(scope="module")
def keys() -> list[SigningKey]:
    return [SigningKey.generate() for _ in range(3)]


def test_pae_matches_the_dsse_spec_test_vector():
    # From secure-systems-lab/dsse protocol.md, "Test case".
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_pae_counts_bytes_not_characters():
    assert pae("é", b"\xff") == b"DSSEv1 2 \xc3\xa9 1 \xff"


def test_pae_equals_model_signing_pae_for_in_toto():
    from model_signing._signing.sign_sigstore_pb import pae as model_signing_pae

    payload = b'{"_type":"https://in-toto.io/Statement/v1"}'
    assert pae("application/vnd.in-toto+json", payload) == model_signing_pae(payload)


def test_round_trip_returns_payload(keys):
    envelope = sign_envelope(PAYLOAD, TYPE, keys[0])
    assert set(envelope) == {"payload", "payloadType", "signatures"}
    assert base64.b64decode(envelope["payload"]) == PAYLOAD
    assert envelope["signatures"][0]["keyid"] == keys[0].key_id
    assert verify_envelope(envelope, keys[0].public_key, TYPE) == PAYLOAD
    assert verify_envelope(envelope, {"root-1": keys[0].public_key}, TYPE) == PAYLOAD
    assert verify_envelope(envelope, [keys[1].public_key, keys[0].public_key], TYPE) == PAYLOAD


def test_tampered_payload_is_refused(keys):
    envelope = sign_envelope(PAYLOAD, TYPE, keys[0])
    envelope["payload"] = base64.b64encode(PAYLOAD.replace(b"7", b"8")).decode()
    with pytest.raises(SignatureError) as err:
        verify_envelope(envelope, keys[0].public_key, TYPE)
    assert err.value.details["reason"] == "threshold"


def test_wrong_key_is_refused(keys):
    envelope = sign_envelope(PAYLOAD, TYPE, keys[0])
    with pytest.raises(SignatureError):
        verify_envelope(envelope, keys[1].public_key, TYPE)


def test_wrong_payload_type_is_refused(keys):
    envelope = sign_envelope(PAYLOAD, TYPE, keys[0])
    with pytest.raises(SignatureError) as err:
        verify_envelope(envelope, keys[0].public_key, "application/vnd.modelreg.trust-root+json")
    assert err.value.details["reason"] == "payload-type"
    # Relabelling the envelope does not help: the type is inside the signed bytes.
    relabelled = dict(envelope, payloadType="application/vnd.modelreg.trust-root+json")
    with pytest.raises(SignatureError) as err:
        verify_envelope(relabelled, keys[0].public_key, "application/vnd.modelreg.trust-root+json")
    assert err.value.details["reason"] == "threshold"


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda e: e.update(payload="not base64!"), id="payload-not-base64"),
        pytest.param(lambda e: e.update(payload=123), id="payload-not-string"),
        pytest.param(lambda e: e["signatures"][0].update(sig="@@@"), id="sig-not-base64"),
        pytest.param(lambda e: e["signatures"][0].pop("sig"), id="sig-missing"),
        pytest.param(lambda e: e.update(signatures=[]), id="no-signatures"),
        pytest.param(lambda e: e.pop("signatures"), id="signatures-missing"),
        pytest.param(lambda e: e.update(signatures=["x"]), id="signature-not-object"),
        pytest.param(lambda e: e.update(extra=1), id="unknown-field"),
        pytest.param(lambda e: e.pop("payloadType"), id="type-missing"),
    ],
)
def test_malformed_envelopes_raise_signature_error(keys, mutate):
    envelope = copy.deepcopy(sign_envelope(PAYLOAD, TYPE, keys[0]))
    mutate(envelope)
    with pytest.raises(SignatureError):
        verify_envelope(envelope, keys[0].public_key, TYPE)


def test_non_object_envelope_is_refused(keys):
    with pytest.raises(SignatureError):
        verify_envelope([], keys[0].public_key, TYPE)  # type: ignore[arg-type]


def test_keyid_is_only_a_hint(keys):
    envelope = sign_envelope(PAYLOAD, TYPE, keys[0])
    envelope["signatures"][0]["keyid"] = ""  # as model_signing writes it
    assert verify_envelope(envelope, [keys[1].public_key, keys[0].public_key], TYPE) == PAYLOAD
    envelope["signatures"][0]["keyid"] = "unknown"
    assert verify_envelope(envelope, [keys[1].public_key, keys[0].public_key], TYPE) == PAYLOAD
    del envelope["signatures"][0]["keyid"]
    assert verify_envelope(envelope, keys[0].public_key, TYPE) == PAYLOAD


def test_threshold_counts_distinct_trusted_keys(keys):
    trusted = {k.key_id: k.public_key for k in keys[:2]}
    both = sign_envelope(PAYLOAD, TYPE, keys[:2])
    assert verify_envelope(both, trusted, TYPE, threshold=2) == PAYLOAD
    with pytest.raises(SignatureError) as err:
        verify_envelope(both, trusted, TYPE, threshold=3)
    assert err.value.details["verified_key_ids"] == sorted(trusted)

    # One trusted signer and one untrusted signer do not make two.
    mixed = sign_envelope(PAYLOAD, TYPE, [keys[0], keys[2]])
    with pytest.raises(SignatureError):
        verify_envelope(mixed, trusted, TYPE, threshold=2)
    assert verify_envelope(mixed, trusted, TYPE, threshold=1) == PAYLOAD


def test_threshold_is_not_met_by_repeating_one_key(keys):
    twice = sign_envelope(PAYLOAD, TYPE, [keys[0], keys[0]])
    with pytest.raises(SignatureError):
        verify_envelope(twice, keys[0].public_key, TYPE, threshold=2)
    # The same public key trusted under two names still counts once.
    aliased = {"old": keys[0].public_key, "new": keys[0].public_key}
    with pytest.raises(SignatureError):
        verify_envelope(twice, aliased, TYPE, threshold=2)


def test_empty_policy_never_passes(keys):
    envelope = sign_envelope(PAYLOAD, TYPE, keys[0])
    with pytest.raises(InvalidInputError):
        verify_envelope(envelope, keys[0].public_key, TYPE, threshold=0)
    with pytest.raises(InvalidInputError):
        verify_envelope(envelope, {}, TYPE)
    with pytest.raises(InvalidInputError):
        sign_envelope(PAYLOAD, TYPE, [])
