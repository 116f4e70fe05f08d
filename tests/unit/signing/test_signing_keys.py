"""Keys: PEM round trips, key ids that match model_signing's bundle hint, P-256 only, key files."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from registry.domain.errors import InvalidKeyError, SignatureError
from registry.signing.keys import SigningKey, VerifyingKey, ensure_key_file, load_signing_key, write_new_key


def _pem(private_key, password: bytes | None = None) -> bytes:
    encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


def _public_pem(private_key) -> bytes:
    return private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def test_private_pem_round_trip_keeps_key_and_key_id():
    key = SigningKey.generate()
    loaded = SigningKey.from_pem(key.private_pem())
    assert loaded.key_id == key.key_id
    signature = loaded.sign(b"data")
    key.public_key.verify(signature, b"data")


def test_public_pem_round_trip_and_str_input():
    key = SigningKey.generate()
    public = VerifyingKey.from_pem(key.public_key.public_pem().decode("ascii"))
    assert public == key.public_key
    assert public.key_id == key.key_id
    assert key.public_key.public_pem().startswith(b"-----BEGIN PUBLIC KEY-----\n")


def test_key_id_equals_model_signing_hint(tmp_path):
    from model_signing._signing import sign_ec_key

    key = SigningKey.generate()
    key_file = tmp_path / "key.pem"
    key_file.write_bytes(key.private_pem())
    hint = sign_ec_key.Signer(key_file)._get_verification_material().public_key.hint
    assert key.key_id == hint
    assert SigningKey.from_file(key_file).key_id == hint


def test_key_id_differs_between_keys_and_is_hex_sha256():
    a, b = SigningKey.generate(), SigningKey.generate()
    assert a.key_id != b.key_id
    assert len(a.key_id) == 64 and int(a.key_id, 16) >= 0


def test_sec1_pem_loads_with_same_key_id():
    raw = ec.generate_private_key(ec.SECP256R1())
    sec1 = raw.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    assert SigningKey.from_pem(sec1).key_id == VerifyingKey.from_pem(_public_pem(raw)).key_id


def test_signature_is_der_ecdsa_sha256_verifiable_by_cryptography():
    key = SigningKey.generate()
    signature = key.sign(b"payload")
    r, s = decode_dss_signature(signature)
    assert r > 0 and s > 0
    public = serialization.load_pem_public_key(key.public_key.public_pem())
    public.verify(signature, b"payload", ec.ECDSA(hashes.SHA256()))


def test_verify_rejects_other_data_other_key_and_garbage():
    key, other = SigningKey.generate(), SigningKey.generate()
    signature = key.sign(b"payload")
    with pytest.raises(SignatureError) as err:
        key.public_key.verify(signature, b"payload!")
    assert err.value.details["key_id"] == key.key_id
    with pytest.raises(SignatureError):
        other.public_key.verify(signature, b"payload")
    with pytest.raises(SignatureError):
        key.public_key.verify(b"\x30\x00", b"payload")


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: ec.generate_private_key(ec.SECP384R1()), id="p384"),
        pytest.param(lambda: ec.generate_private_key(ec.SECP256K1()), id="secp256k1"),
        pytest.param(ed25519.Ed25519PrivateKey.generate, id="ed25519"),
        pytest.param(lambda: rsa.generate_private_key(65537, 1024), id="rsa"),
    ],
)
def test_non_p256_keys_are_refused(make):
    raw = make()
    with pytest.raises(InvalidKeyError) as err:
        SigningKey.from_pem(_pem(raw))
    assert "P-256" in str(err.value)
    with pytest.raises(InvalidKeyError):
        VerifyingKey.from_pem(_public_pem(raw))


def test_encrypted_pem_needs_its_password():
    raw = ec.generate_private_key(ec.SECP256R1())
    pem = _pem(raw, b"s3cret")
    assert SigningKey.from_pem(pem, b"s3cret").key_id == VerifyingKey.from_pem(_public_pem(raw)).key_id
    with pytest.raises(InvalidKeyError):
        SigningKey.from_pem(pem)
    with pytest.raises(InvalidKeyError):
        SigningKey.from_pem(pem, b"wrong")


def test_garbage_pem_and_missing_file_are_invalid_keys(tmp_path):
    with pytest.raises(InvalidKeyError):
        SigningKey.from_pem(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    with pytest.raises(InvalidKeyError):
        VerifyingKey.from_pem("not a pem")
    with pytest.raises(InvalidKeyError) as err:
        SigningKey.from_file(tmp_path / "absent.pem")
    assert err.value.details["path"] == str(tmp_path / "absent.pem")


def test_load_signing_key_from_exactly_one_source(tmp_path):
    file_key, env_key = SigningKey.generate(), SigningKey.generate()
    key_file = tmp_path / "key.pem"
    key_file.write_bytes(file_key.private_pem())
    env_pem = env_key.private_pem().decode("ascii")
    assert load_signing_key(key_file, None).key_id == file_key.key_id
    assert load_signing_key(None, env_pem).key_id == env_key.key_id
    with pytest.raises(InvalidKeyError, match="only one"):
        load_signing_key(key_file, env_pem)
    with pytest.raises(InvalidKeyError, match="no signing key"):
        load_signing_key(None, None)
    with pytest.raises(InvalidKeyError, match="no signing key"):
        load_signing_key(None, "")


def test_write_new_key_is_private_and_never_overwrites(tmp_path):
    path = tmp_path / "data" / "signing-key.pem"
    key = write_new_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert SigningKey.from_file(path).key_id == key.key_id
    before = path.read_bytes()
    with pytest.raises(FileExistsError):
        write_new_key(path)
    assert path.read_bytes() == before
    assert sorted(os.listdir(path.parent)) == ["signing-key.pem"]  # no temporary file left behind


def test_ensure_key_file_generates_once_then_loads(tmp_path):
    path = tmp_path / "signing-key.pem"
    first = ensure_key_file(path)
    second = ensure_key_file(path)
    assert first.key_id == second.key_id


def test_repr_does_not_leak_private_key():
    key = SigningKey.generate()
    assert "PRIVATE" not in repr(key) and key.key_id[:16] in repr(key)


def test_signing_package_imports_only_stdlib_cryptography_and_domain():
    # A None entry marks a module absent (registry/__init__.py does so for httpx's CLI): nothing was loaded.
    code = ("import sys, registry.signing; "
            "print(' '.join(sorted({m.split('.')[0] for m, mod in sys.modules.items() if mod is not None})))")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    forbidden = {"sqlalchemy", "fastapi", "pydantic", "pydantic_settings", "boto3", "botocore", "httpx"}
    assert forbidden.isdisjoint(out)
    assert "cryptography" in out
