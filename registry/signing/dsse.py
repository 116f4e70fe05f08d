"""DSSE envelopes: a payload, its type, and signatures over the pre-authentication encoding.

The signature covers ``PAE(payloadType, payload)``, never the JSON around it, so the envelope can be
re-encoded freely and a payload can never be read as another type. This is the envelope of the
OpenSSF model-signing bundle and of modelreg's release manifests and trust roots.
See https://github.com/secure-systems-lab/dsse/blob/v1.0.0/protocol.md.

Example:
    >>> from registry.signing.keys import SigningKey
    >>> key = SigningKey.generate()
    >>> envelope = sign_envelope(b'{"a":1}', "application/vnd.modelreg.test+json", key)
    >>> verify_envelope(envelope, key.public_key, "application/vnd.modelreg.test+json")
    b'{"a":1}'
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

from registry.domain.errors import InvalidInputError, SignatureError
from registry.signing.keys import SigningKey, VerifyingKey

# An envelope is small; a long signature list is an attempt to make the verifier work for nothing.
MAX_SIGNATURES = 32


def pae(payload_type: str, payload: bytes) -> bytes:
    """The DSSE v1 pre-authentication encoding, the bytes that are actually signed.

    ``b"DSSEv1 %d %s %d %s" % (len(type), type, len(payload), payload)`` where lengths count bytes.

    Args:
        payload_type: The payload's media type.
        payload: The payload bytes.
    """
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(type_bytes), type_bytes, len(payload), payload)


def sign_envelope(
    payload: bytes, payload_type: str, key: SigningKey | Sequence[SigningKey]
) -> dict[str, Any]:
    """Sign ``payload`` and wrap it in a DSSE envelope.

    Args:
        payload: The bytes to sign (for modelreg's own payloads, :func:`canonical_json` output).
        payload_type: The payload's media type, bound into the signature.
        key: One signing key, or several for a payload that needs a threshold of signers.

    Returns:
        ``{"payload": b64, "payloadType": ..., "signatures": [{"sig": b64, "keyid": ...}, ...]}``.

    Raises:
        InvalidInputError: no key was given.
    """
    keys = [key] if isinstance(key, SigningKey) else list(key)
    if not keys:
        raise InvalidInputError("a DSSE envelope needs at least one signing key")
    message = pae(payload_type, payload)
    return {
        "payload": base64.b64encode(payload).decode("ascii"),
        "payloadType": payload_type,
        "signatures": [
            {"sig": base64.b64encode(k.sign(message)).decode("ascii"), "keyid": k.key_id} for k in keys
        ],
    }


def _b64decode(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise SignatureError(f"envelope {what} is not a base64 string", reason="malformed")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError(f"envelope {what} is not valid base64", reason="malformed") from None


def _trusted(
    keys: Mapping[str, VerifyingKey] | VerifyingKey | Sequence[VerifyingKey],
) -> dict[str, VerifyingKey]:
    if isinstance(keys, VerifyingKey):
        return {keys.key_id: keys}
    if isinstance(keys, Mapping):
        return dict(keys)
    return {k.key_id: k for k in keys}


def verify_envelope(
    envelope: Mapping[str, Any],
    keys: Mapping[str, VerifyingKey] | VerifyingKey | Sequence[VerifyingKey],
    payload_type: str,
    *,
    threshold: int = 1,
) -> bytes:
    """Verify a DSSE envelope and return its payload.

    A signature counts once per distinct trusted public key (by :attr:`VerifyingKey.key_id`, whatever
    name a mapping gives it), so one key listed twice, or one key signing twice, never reaches a
    threshold of two. The ``keyid`` of a signature is an unauthenticated hint: it picks the key to try
    when it names a trusted key, and otherwise every trusted key is tried (model_signing writes ``""``).

    Args:
        envelope: The parsed envelope JSON.
        keys: The trusted keys: one key, a list, or a mapping from key id to key.
        payload_type: The payload type the caller expects; any other is refused.
        threshold: How many distinct trusted keys must have signed.

    Returns:
        The verified payload bytes.

    Raises:
        SignatureError: malformed envelope or base64, unexpected payload type, or fewer than
            ``threshold`` distinct trusted keys signed the payload.
        InvalidInputError: ``threshold`` is below 1 or no trusted key was given (an empty policy
            never passes).
    """
    trusted = _trusted(keys)
    if threshold < 1 or not trusted:
        raise InvalidInputError(
            "a DSSE verification needs a threshold of at least 1 and at least one trusted key",
            threshold=threshold,
        )
    if not isinstance(envelope, Mapping):
        raise SignatureError("envelope is not a JSON object", reason="malformed")
    extra = set(envelope) - {"payload", "payloadType", "signatures"}
    if extra:
        raise SignatureError(f"envelope has unknown fields {sorted(extra)}", reason="malformed")
    actual_type = envelope.get("payloadType")
    if actual_type != payload_type:
        raise SignatureError(
            f"payload type {actual_type!r} is not the expected {payload_type!r}",
            reason="payload-type",
            expected=payload_type,
            actual=actual_type if isinstance(actual_type, str) else None,
        )
    payload = _b64decode(envelope.get("payload"), "payload")
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise SignatureError("envelope has no signatures", reason="unsigned")
    if len(signatures) > MAX_SIGNATURES:
        raise SignatureError(f"envelope has more than {MAX_SIGNATURES} signatures", reason="malformed")

    message = pae(payload_type, payload)
    verified: set[str] = set()
    for entry in signatures:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("keyid", ""), str | None):
            raise SignatureError("envelope signature is not an object with sig and keyid", reason="malformed")
        sig = _b64decode(entry.get("sig"), "signature")
        hinted = trusted.get(entry.get("keyid") or "")
        for key in [hinted] if hinted is not None else trusted.values():
            if key.key_id in verified:
                continue
            try:
                key.verify(sig, message)
            except SignatureError:
                continue
            verified.add(key.key_id)
            break
    if len(verified) < threshold:
        raise SignatureError(
            f"{len(verified)} of the required {threshold} trusted keys signed the envelope",
            reason="threshold",
            threshold=threshold,
            verified_key_ids=sorted(verified),
        )
    return payload
