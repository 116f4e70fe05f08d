"""The registry's signatures on ``/v2``, checked by stock verifiers: npm's ``@sigstore/verify`` and Debian's skopeo.

The world of ``tests/support/oci_world.py`` (acme/llm: 1 approved as ``prod`` with its image shape ``1-image``,
2 revoked, 3 awaiting; other/secret for the outsider), served by uvicorn. Each released manifest, raw and
image-shaped, has the registry's Sigstore bundle (a message signature) among its referrers:
``@sigstore/verify`` accepts it over the manifest bytes pulled from ``/v2`` with the key ``/v1/keys`` publishes,
and refuses a tampered manifest and a foreign key. cosign's ``sha256-<hex>.sig`` tag is found and copied by
skopeo; Debian's skopeo is built without sigstore verification, so the test checks the simple-signing payload
against its rules itself (with ``cryptography``, not the registry's code). A revoked version loses both.
SQLite and PostgreSQL.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from registry.domain.oci_referrers import CYCLONEDX, OCI_INDEX, SIGNATURE
from registry.services import revocations
from tests.support.distribution_registry import require
from tests.support.oci_world import REPO, World, build_world
from tests.support.sigstore_verify import verify

pytestmark = pytest.mark.seeded(builder=build_world)

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SHAPES = ("1", "1-image")
"""The released version's raw manifest and its image-shaped one."""


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _manifest(w: World, ref: str) -> tuple[bytes, str]:
    with w.http(w.node) as http:
        r = http.get(f"/v2/{REPO}/manifests/{ref}")
    assert r.status_code == 200, r.text
    assert r.headers["docker-content-digest"] == _sha256(r.content)
    return r.content, r.headers["docker-content-digest"]


def _published_keys(w: World) -> dict[str, str]:
    with w.http() as http:
        return {k["key_id"]: k["public_key_pem"] for k in http.get("/v1/keys").json()["keys"]}


def _foreign_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def _registry_bundle(w: World, digest: str) -> tuple[dict, bytes]:
    """The descriptor of the registry's bundle among ``digest``'s referrers, and the bundle pulled by digest."""
    with w.http(w.node) as http:
        listed = http.get(f"/v2/{REPO}/referrers/{digest}").json()["manifests"]
        (descriptor,) = [d for d in listed if d["artifactType"] == SIGNATURE
                         and d["annotations"]["dev.sigstore.bundle.content"] == "message-signature"]
        manifest = http.get(f"/v2/{REPO}/manifests/{descriptor['digest']}").json()
        assert manifest["subject"]["digest"] == digest and manifest["artifactType"] == SIGNATURE
        (layer,) = manifest["layers"]
        assert layer["annotations"]["org.opencontainers.image.title"] == digest.replace(":", "-") + ".sigstore.json"
        bundle = http.get(f"/v2/{REPO}/blobs/{layer['digest']}").content
    assert _sha256(bundle) == layer["digest"]
    return descriptor, bundle


@pytest.mark.parametrize("ref", SHAPES)
def test_sigstore_verify_accepts_the_registry_bundle_and_refuses_a_tampered_manifest_and_a_foreign_key(oci_world,
                                                                                                    ref):
    w = oci_world
    manifest, digest = _manifest(w, ref)
    _descriptor, bundle = _registry_bundle(w, digest)
    keys = _published_keys(w)
    hint = json.loads(bundle)["verificationMaterial"]["publicKey"]["hint"]
    assert hint in keys
    assert verify(bundle, manifest, keys) == {"ok": True}
    tampered = manifest.replace(b'"schemaVersion":2', b'"schemaVersion":2 ')
    assert tampered != manifest
    assert verify(bundle, tampered, keys)["code"] == "SIGNATURE_ERROR"
    # A foreign key under the registry's key id, and a foreign key alone (the hint names no trusted key).
    assert verify(bundle, manifest, {hint: _foreign_pem()})["code"] == "SIGNATURE_ERROR"
    assert verify(bundle, manifest, {"0" * 64: _foreign_pem()})["code"] == "PUBLIC_KEY_ERROR"
    # The other shape's manifest is not what this bundle signs.
    other, _ = _manifest(w, SHAPES[1 - SHAPES.index(ref)])
    assert verify(bundle, other, keys)["ok"] is False


def test_the_image_shape_has_its_own_referrers_and_the_tag_fallback_lists_what_the_api_does(oci_world):
    w = oci_world
    raw_digest = _manifest(w, "1")[1]
    image_digest = _manifest(w, "1-image")[1]
    with w.http(w.node) as http:
        for digest in (raw_digest, image_digest):
            api = http.get(f"/v2/{REPO}/referrers/{digest}")
            tag = http.get(f"/v2/{REPO}/manifests/{digest.replace(':', '-')}", headers={"Accept": OCI_INDEX})
            assert tag.status_code == 200 and tag.headers["content-type"] == OCI_INDEX
            assert tag.content == api.content and tag.headers["docker-content-digest"] == _sha256(tag.content)
            # Built again, the same bytes: a listed digest stays pullable.
            assert http.get(f"/v2/{REPO}/referrers/{digest}").content == api.content
        image = http.get(f"/v2/{REPO}/referrers/{image_digest}").json()["manifests"]
    assert sorted(d["artifactType"] for d in image) == sorted([SIGNATURE, CYCLONEDX])
    with w.http(w.node) as http:
        for d in image:
            subject = http.get(f"/v2/{REPO}/manifests/{d['digest']}").json()["subject"]
            assert subject["digest"] == image_digest


def _sig(w: World, digest: str, token: str | None = None):
    with w.http(token or w.node) as http:
        return http.get(f"/v2/{REPO}/manifests/{digest.replace(':', '-')}.sig")


def test_the_sig_payload_names_the_public_url_host_whatever_host_the_caller_sends(oci_world):
    """The Host header is the caller's: with a public URL configured, the signed ``docker-reference`` is its
    host; without one, the host asked (checked to be a reference)."""
    w = oci_world
    _, digest = _manifest(w, "1")
    tag = f"{digest.replace(':', '-')}.sig"

    def reference(host: str) -> str:
        with w.http(w.node) as http:
            sig = http.get(f"/v2/{REPO}/manifests/{tag}", headers={"Host": host})
            assert sig.status_code == 200, sig.text
            layer = sig.json()["layers"][0]["digest"]
            payload = http.get(f"/v2/{REPO}/blobs/{layer}", headers={"Host": host})
        assert payload.status_code == 200, payload.text
        return json.loads(payload.content)["critical"]["identity"]["docker-reference"]

    assert reference("forged.example:8443") == f"forged.example:8443/{REPO}"
    w.container.settings.public_url = "https://models.example.com/"
    assert reference("forged.example:8443") == reference(w.host) == f"models.example.com/{REPO}"


def test_a_revoked_version_loses_its_bundle_and_its_sig_tag(oci_world):
    w = oci_world
    keys = _published_keys(w)
    gone: list[str] = []
    manifests = {}
    for ref in SHAPES:
        manifest, digest = _manifest(w, ref)
        manifests[digest] = manifest
        descriptor, bundle = _registry_bundle(w, digest)
        assert verify(bundle, manifest, keys) == {"ok": True}
        sig = _sig(w, digest)
        assert sig.status_code == 200
        gone += [descriptor["digest"], _sha256(bundle), sig.json()["layers"][0]["digest"]]
    with w.container.session_factory() as session:
        revocations.revoke(session, w.admin, "acme", "llm", 1, "a bad batch", clock=w.container.clock)
    with w.http(w.node) as http:
        for digest in manifests:
            assert http.get(f"/v2/{REPO}/referrers/{digest}").json()["manifests"] == []
            for tag in (f"{digest.replace(':', '-')}.sig", digest.replace(":", "-"), digest):
                r = http.get(f"/v2/{REPO}/manifests/{tag}")
                assert (r.status_code, r.json()["errors"][0]["code"]) == (404, "MANIFEST_UNKNOWN"), tag
        for d in gone[::3]:
            r = http.get(f"/v2/{REPO}/manifests/{d}")
            assert (r.status_code, r.json()["errors"][0]["code"]) == (404, "MANIFEST_UNKNOWN")
        for d in [*gone[1::3], *gone[2::3]]:
            r = http.get(f"/v2/{REPO}/blobs/{d}")
            assert (r.status_code, r.json()["errors"][0]["code"]) == (404, "BLOB_UNKNOWN")


def test_another_tenants_caller_gets_the_answer_a_nonexistent_signature_gets(oci_world):
    w = oci_world
    _, digest = _manifest(w, "1")
    nobody = _sha256(b"no manifest")
    real, fake = _sig(w, digest, w.outsider), _sig(w, nobody, w.outsider)
    assert (real.status_code, real.json()) == (fake.status_code, fake.json())
    assert real.status_code == 403
    with w.http(w.outsider) as http:
        # Under its own repository, acme's manifest has no signature.
        for tag in (f"{digest.replace(':', '-')}.sig", digest.replace(":", "-")):
            r = http.get(f"/v2/other/secret/manifests/{tag}")
            assert (r.status_code, r.json()["errors"][0]["code"]) == (404, "MANIFEST_UNKNOWN")
    with w.http() as anonymous:
        assert anonymous.get(f"/v2/{REPO}/manifests/{digest.replace(':', '-')}.sig").status_code == 401


def _check_simple_signing(manifest: dict, payload: bytes, *, digest: str, repository: str, pem: str) -> None:
    """The rules a sigstoreSigned policy applies: the layer is the payload, the payload names this manifest
    as a cosign container image signature, and the annotation's signature over the payload verifies."""
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == SIMPLE_SIGNING and layer["digest"] == _sha256(payload)
    critical = json.loads(payload)["critical"]
    assert critical["type"] == "cosign container image signature"
    assert critical["image"]["docker-manifest-digest"] == digest
    assert critical["identity"]["docker-reference"] == repository
    key = serialization.load_pem_public_key(pem.encode())
    key.verify(base64.b64decode(layer["annotations"]["dev.cosignproject.cosign/signature"]), payload,
               ec.ECDSA(hashes.SHA256()))


@pytest.mark.parametrize("ref", SHAPES)
def test_skopeo_finds_and_reads_the_sig_attachment_which_verifies_with_the_registry_key_only(oci_world, tmp_path,
                                                                                             ref):
    w, skopeo = oci_world, require("skopeo")
    _, digest = _manifest(w, ref)
    source = f"docker://{w.host}/{REPO}:{digest.replace(':', '-')}.sig"

    inspected = subprocess.run([skopeo, "--insecure-policy", "inspect", "--raw", "--tls-verify=false", "--creds",
                                f"anyone:{w.node}", source], capture_output=True, text=True, timeout=120)
    assert inspected.returncode == 0, inspected.stderr
    raw = inspected.stdout
    assert raw.encode() == _sig(w, digest).content
    layout = tmp_path / "sig"
    done = subprocess.run([skopeo, "--insecure-policy", "copy", "--src-tls-verify=false", "--src-creds",
                           f"anyone:{w.node}", source, f"oci:{layout}:sig"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    manifest = json.loads(raw)
    payload = (layout / "blobs" / "sha256" / manifest["layers"][0]["digest"].removeprefix("sha256:")).read_bytes()
    (pem,) = _published_keys(w).values()
    _check_simple_signing(manifest, payload, digest=digest, repository=f"{w.host}/{REPO}", pem=pem)
    with pytest.raises(InvalidSignature):
        _check_simple_signing(manifest, payload, digest=digest, repository=f"{w.host}/{REPO}", pem=_foreign_pem())
    other, _ = _manifest(w, SHAPES[1 - SHAPES.index(ref)])
    with pytest.raises(AssertionError):
        _check_simple_signing(manifest, payload, digest=_sha256(other), repository=f"{w.host}/{REPO}", pem=pem)


def test_the_sig_tag_is_not_a_listed_tag(oci_world):
    """The attachment tags answer, as cosign and containers/image ask them, without crowding the tag list."""
    w = oci_world
    with w.http(w.node) as http:
        assert all(not t.startswith("sha256-") for t in http.get(f"/v2/{REPO}/tags/list").json()["tags"])

