"""The registry's signature over a served OCI manifest, in the two forms stock verifiers read.

Pure: the caller passes the signing function (the registry's key) and its key id.

- A Sigstore bundle v0.3 (``application/vnd.dev.sigstore.bundle.v0.3+json``) holding a *message signature*:
  ECDSA P-256/SHA-256 over the manifest bytes, so ``messageDigest`` is the manifest's own digest;
  ``verificationMaterial.publicKey.hint`` is the key id (``/v1/keys``), and there are no tlog entries. A
  message signature, not DSSE: it signs the manifest itself, which is what ``@sigstore/verify`` checks
  key-based against the artifact handed to it (``toSignedEntity(bundle, manifestBytes)``), and what
  ``cosign verify-blob --bundle`` reads; a DSSE in-toto statement would add a second document to agree on.
  :func:`bundle_document` attaches it as cosign's bundle spec (``specs/BUNDLE_SPEC.md``) lays it out: an OCI
  referrer of that manifest, the bundle as its one layer titled ``sha256-<hex>.sigstore.json``, and the
  ``dev.sigstore.bundle.content: message-signature`` annotation.
- cosign's legacy attachment, the ``sha256-<hex>.sig`` tag (:func:`simple_signing_manifest`): an OCI image
  manifest whose one layer (``application/vnd.dev.cosign.simplesigning.v1+json``) is the simple-signing
  payload (:func:`simple_signing_payload`) and carries the base64 signature over those payload bytes in the
  ``dev.cosignproject.cosign/signature`` annotation: what cosign, policy-controller and containers/image
  (``signature/sigstore``) read. Its config is the empty descriptor, so the one blob it adds is the payload.

Every digest here must stay the same between the listing (or the tag) and the pull by digest, and nothing is
stored: the signatures are deterministic ECDSA (RFC 6979, :meth:`registry.signing.keys.SigningKey.sign_deterministic`),
so the same key over the same bytes always gives the same signature, hence the same bundle and manifest bytes.
(A rotation of the registry's key gives new signatures, new digests, as it should.)

Example:
    >>> from registry.signing.keys import SigningKey
    >>> key = SigningKey.generate()
    >>> manifest = b'{"schemaVersion":2}'
    >>> bundle = sigstore_bundle(manifest, key.sign_deterministic, key.key_id)
    >>> bundle == sigstore_bundle(manifest, key.sign_deterministic, key.key_id)
    True
    >>> import json
    >>> payload = simple_signing_payload("registry.example/acme/llm", digest_of(manifest))
    >>> json.loads(payload)["critical"]["type"]
    'cosign container image signature'
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from registry.domain.modelpack import OCI_MANIFEST, canonical_json, digest_of
from registry.domain.oci_referrers import EMPTY, EMPTY_BYTES, EMPTY_DIGEST, SIGNATURE, Document

Sign = Callable[[bytes], bytes]
"""DER ECDSA P-256/SHA-256 over the bytes given, deterministic (RFC 6979)."""
BUNDLE_CONTENT = "dev.sigstore.bundle.content"
MESSAGE_SIGNATURE = "message-signature"
SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
"""The layer media type of a cosign signature (containers/image's ``SigstoreSignatureMIMEType``)."""
COSIGN_SIGNATURE = "dev.cosignproject.cosign/signature"
"""The layer annotation holding the base64 signature over the payload."""
SIMPLE_SIGNING_TYPE = "cosign container image signature"


@dataclass(frozen=True, slots=True)
class ManifestSigner:
    """The registry's key as these builders use it: its deterministic signing and its key id."""

    sign: Sign
    key_id: str


SIG_TAG_RE = re.compile(r"\Asha256-([0-9a-f]{64})\.sig\Z")
"""cosign's attachment tag of a manifest: its digest with ``-`` for ``:``, and ``.sig``."""
FALLBACK_TAG_RE = re.compile(r"\Asha256-([0-9a-f]{64})\Z")
"""distribution-spec's referrers tag schema: the index of a manifest's referrers, for clients without the API."""
DOCKER_REFERENCE_RE = re.compile(r"\A[a-z0-9.-]{1,253}(:[0-9]{1,5})?/[a-z0-9._/-]{1,255}\Z")
"""What a ``docker-reference`` may be here: host[:port]/repository (a Host header is the caller's to forge)."""


def sigstore_bundle(manifest_bytes: bytes, sign: Sign, key_id: str) -> bytes:
    """The Sigstore bundle v0.3 of a message signature over ``manifest_bytes`` (canonical JSON: stable bytes)."""
    return canonical_json({
        "mediaType": SIGNATURE,
        "verificationMaterial": {"publicKey": {"hint": key_id}, "tlogEntries": []},
        "messageSignature": {
            "messageDigest": {"algorithm": "SHA2_256", "digest": _b64(hashlib.sha256(manifest_bytes).digest())},
            "signature": _b64(sign(manifest_bytes)),
        },
    })


def bundle_document(manifest_digest: str, bundle: bytes, annotations: Mapping[str, str]) -> Document:
    """The bundle as a referrer's document (cosign's layout: title ``sha256-<hex>.sigstore.json``)."""
    return Document(SIGNATURE, f"{manifest_digest.replace(':', '-')}.sigstore.json", bundle,
                    {**annotations, BUNDLE_CONTENT: MESSAGE_SIGNATURE})


def simple_signing_payload(docker_reference: str, manifest_digest: str) -> bytes:
    """The simple-signing payload that names ``manifest_digest`` as ``docker_reference`` (a repository
    without tag: ``host/tenant/model``), in cosign's shape (``optional`` null)."""
    if not DOCKER_REFERENCE_RE.match(docker_reference):
        raise ValueError(f"{docker_reference[:300]!r} is not a host/repository reference")
    return canonical_json({"critical": {"identity": {"docker-reference": docker_reference},
                                        "image": {"docker-manifest-digest": manifest_digest},
                                        "type": SIMPLE_SIGNING_TYPE},
                           "optional": None})


@dataclass(frozen=True, slots=True)
class SignatureManifest:
    """The manifest the ``sha256-<hex>.sig`` tag names, and its one layer (the payload)."""

    manifest_bytes: bytes
    manifest_digest: str
    payload: bytes
    payload_digest: str


def simple_signing_manifest(payload: bytes, sign: Sign) -> SignatureManifest:
    """The cosign signature manifest of ``payload``: one simple-signing layer with the signature annotation."""
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": EMPTY, "digest": EMPTY_DIGEST, "size": len(EMPTY_BYTES)},
        "layers": [{"mediaType": SIMPLE_SIGNING, "digest": digest_of(payload), "size": len(payload),
                    "annotations": {COSIGN_SIGNATURE: _b64(sign(payload))}}],
    }
    manifest_bytes = canonical_json(manifest)
    return SignatureManifest(manifest_bytes, digest_of(manifest_bytes), payload, digest_of(payload))


def signature_tag(manifest_digest: str) -> str:
    """cosign's attachment tag of ``manifest_digest``."""
    return manifest_digest.replace(":", "-", 1) + ".sig"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")

