"""The pure builders of /v2's signatures: the Sigstore message-signature bundle and cosign's simple-signing manifest."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from registry.domain.errors import SignatureError
from registry.domain.modelpack import OCI_MANIFEST, digest_of
from registry.domain.oci_referrers import EMPTY_DIGEST, SIGNATURE, Subject, build
from registry.domain.oci_signatures import (
    COSIGN_SIGNATURE,
    FALLBACK_TAG_RE,
    SIG_TAG_RE,
    SIMPLE_SIGNING,
    bundle_document,
    signature_tag,
    sigstore_bundle,
    simple_signing_manifest,
    simple_signing_payload,
)
from registry.signing.keys import SigningKey

KEY = SigningKey.generate()
MANIFEST = b'{"mediaType":"application/vnd.oci.image.manifest.v1+json","schemaVersion":2}'
DIGEST = digest_of(MANIFEST)


def test_the_bundle_is_a_v03_message_signature_over_the_manifest_named_by_the_key_hint():
    bundle = json.loads(sigstore_bundle(MANIFEST, KEY.sign_deterministic, KEY.key_id))
    assert bundle["mediaType"] == SIGNATURE
    assert bundle["verificationMaterial"] == {"publicKey": {"hint": KEY.key_id}, "tlogEntries": []}
    message = bundle["messageSignature"]
    assert message["messageDigest"] == {"algorithm": "SHA2_256",
                                        "digest": base64.b64encode(hashlib.sha256(MANIFEST).digest()).decode()}
    KEY.public_key.verify(base64.b64decode(message["signature"]), MANIFEST)
    with pytest.raises(SignatureError):
        SigningKey.generate().public_key.verify(base64.b64decode(message["signature"]), MANIFEST)
    with pytest.raises(SignatureError):
        KEY.public_key.verify(base64.b64decode(message["signature"]), MANIFEST + b" ")


def test_the_same_key_and_manifest_give_the_same_bytes_so_the_referrer_digest_is_stable():
    first = sigstore_bundle(MANIFEST, KEY.sign_deterministic, KEY.key_id)
    assert first == sigstore_bundle(MANIFEST, KEY.sign_deterministic, KEY.key_id)
    other = SigningKey.generate()
    assert first != sigstore_bundle(MANIFEST, other.sign_deterministic, other.key_id)
    payload = simple_signing_payload("registry.test/acme/llm", DIGEST)
    assert simple_signing_manifest(payload, KEY.sign_deterministic) == \
        simple_signing_manifest(payload, KEY.sign_deterministic)


def test_the_bundle_referrer_follows_cosigns_bundle_layout():
    bundle = sigstore_bundle(MANIFEST, KEY.sign_deterministic, KEY.key_id)
    ref = build(Subject(DIGEST, len(MANIFEST)), bundle_document(DIGEST, bundle, {"dev.modelreg.version": "a/b@1"}))
    assert ref.manifest["artifactType"] == SIGNATURE and ref.manifest["subject"]["digest"] == DIGEST
    assert ref.manifest["config"]["digest"] == EMPTY_DIGEST
    (layer,) = ref.manifest["layers"]
    assert layer["mediaType"] == SIGNATURE and layer["digest"] == digest_of(bundle)
    assert layer["annotations"]["org.opencontainers.image.title"] == DIGEST.replace(":", "-") + ".sigstore.json"
    assert ref.descriptor()["annotations"] == {"dev.modelreg.version": "a/b@1",
                                               "dev.sigstore.bundle.content": "message-signature"}


def test_the_simple_signing_manifest_carries_the_payload_and_its_signature():
    payload = simple_signing_payload("registry.test:5000/acme/llm", DIGEST)
    assert json.loads(payload) == {"critical": {"identity": {"docker-reference": "registry.test:5000/acme/llm"},
                                                "image": {"docker-manifest-digest": DIGEST},
                                                "type": "cosign container image signature"},
                                   "optional": None}
    sig = simple_signing_manifest(payload, KEY.sign_deterministic)
    manifest = json.loads(sig.manifest_bytes)
    assert manifest["mediaType"] == OCI_MANIFEST and sig.manifest_digest == digest_of(sig.manifest_bytes)
    assert manifest["config"]["digest"] == EMPTY_DIGEST
    (layer,) = manifest["layers"]
    assert (layer["mediaType"], layer["digest"], layer["size"]) == (SIMPLE_SIGNING, sig.payload_digest, len(payload))
    KEY.public_key.verify(base64.b64decode(layer["annotations"][COSIGN_SIGNATURE]), payload)


@pytest.mark.parametrize("reference", ["", "Registry.Test/acme/llm", "host/acme/llm\n", "host", "a b/c",
                                       "host/" + "x" * 300])
def test_a_docker_reference_that_is_none_is_refused(reference):
    with pytest.raises(ValueError):
        simple_signing_payload(reference, DIGEST)


def test_the_attachment_tags():
    hexdigest = DIGEST.removeprefix("sha256:")
    assert signature_tag(DIGEST) == f"sha256-{hexdigest}.sig"
    assert SIG_TAG_RE.match(signature_tag(DIGEST)).group(1) == hexdigest
    assert FALLBACK_TAG_RE.match(f"sha256-{hexdigest}") and not FALLBACK_TAG_RE.match(signature_tag(DIGEST))
    for bad in (f"sha256-{hexdigest[:-1]}.sig", f"sha256-{hexdigest.upper()}.sig", f"sha512-{hexdigest}.sig"):
        assert not SIG_TAG_RE.match(bad)
