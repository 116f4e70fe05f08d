"""Signing: ECDSA P-256 keys, canonical JSON, DSSE envelopes and OpenSSF model-signing bundles.

Serving nodes import this package through the fetch client, so it depends only on the standard
library, ``cryptography`` and ``registry.domain``.

- ``keys``: :class:`SigningKey`, :class:`VerifyingKey` (key id = sha256 of the public key PEM),
  :func:`load_signing_key`, :func:`write_new_key`, :func:`ensure_key_file`.
- ``canonical``: :func:`canonical_json`, the bytes of every payload modelreg signs itself.
- ``dsse``: :func:`pae`, :func:`sign_envelope`, :func:`verify_envelope` (with a threshold of keys).
- ``bundle``: the version manifest as a ``model.sig`` that ``model_signing verify key`` accepts.

Example:
    >>> key = SigningKey.generate()
    >>> statement = build_model_statement("tiny", [("weights.bin", "00" * 32)])
    >>> bundle = sign_model_bundle(statement, key)
    >>> verify_model_bundle(bundle, key.public_key) == statement
    True
"""

from registry.signing.bundle import (
    BUNDLE_MEDIA_TYPE,
    IGNORE_PATHS,
    IN_TOTO_PAYLOAD_TYPE,
    PREDICATE_TYPE,
    SIGNATURE_FILE_NAME,
    build_model_statement,
    sign_model_bundle,
    verify_model_bundle,
    verify_model_directory,
)
from registry.signing.canonical import canonical_json
from registry.signing.dsse import pae, sign_envelope, verify_envelope
from registry.signing.keys import SigningKey, VerifyingKey, ensure_key_file, load_signing_key, write_new_key

__all__ = [
    "BUNDLE_MEDIA_TYPE",
    "IGNORE_PATHS",
    "IN_TOTO_PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "SIGNATURE_FILE_NAME",
    "SigningKey",
    "VerifyingKey",
    "build_model_statement",
    "canonical_json",
    "ensure_key_file",
    "load_signing_key",
    "pae",
    "sign_envelope",
    "sign_model_bundle",
    "verify_envelope",
    "verify_model_bundle",
    "verify_model_directory",
    "write_new_key",
]
