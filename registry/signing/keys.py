"""ECDSA P-256 signing and verifying keys, identified by the sha256 of their public key PEM.

P-256 is what ``model_signing verify key`` accepts (it refuses Ed25519), so one key signs both the
OpenSSF model-signing bundle and modelreg's own DSSE envelopes (docs/adr/0001). A key id is the hex
sha256 of the SubjectPublicKeyInfo PEM, byte for byte what model_signing writes as the bundle's
``verificationMaterial.publicKey.hint``, so a bundle's hint names the same key as our key ids.

Example:
    >>> key = SigningKey.generate()
    >>> signature = key.sign(b"payload")
    >>> key.public_key.verify(signature, b"payload")
    >>> VerifyingKey.from_pem(key.public_key.public_pem()).key_id == key.key_id
    True
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from registry.domain.errors import InvalidKeyError, SignatureError
from registry.statefile import create_exclusive

_CURVE = "secp256r1"
_ALGORITHM = ec.ECDSA(hashes.SHA256())
_DETERMINISTIC = ec.ECDSA(hashes.SHA256(), deterministic_signing=True)


def _require_p256(key: ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey | object) -> None:
    if not isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        raise InvalidKeyError(f"not an ECDSA key ({type(key).__name__}); modelreg signs with ECDSA P-256")
    if key.curve.name != _CURVE:
        raise InvalidKeyError(f"ECDSA curve {key.curve.name} is not P-256 (secp256r1)", curve=key.curve.name)


def _as_bytes(pem: bytes | str) -> bytes:
    return pem.encode("ascii") if isinstance(pem, str) else pem


class VerifyingKey:
    """An ECDSA P-256 public key.

    Args:
        public_key: The ``cryptography`` public key object.

    Raises:
        InvalidKeyError: the key is not ECDSA P-256.
    """

    __slots__ = ("_key", "_pem", "_key_id")

    def __init__(self, public_key: ec.EllipticCurvePublicKey) -> None:
        _require_p256(public_key)
        self._key = public_key
        self._pem = public_key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self._key_id = hashlib.sha256(self._pem).hexdigest()

    @classmethod
    def from_pem(cls, pem: bytes | str) -> VerifyingKey:
        """Load a SubjectPublicKeyInfo PEM (``-----BEGIN PUBLIC KEY-----``).

        Args:
            pem: The PEM text.

        Raises:
            InvalidKeyError: the PEM cannot be parsed, or the key is not ECDSA P-256.
        """
        try:
            key = serialization.load_pem_public_key(_as_bytes(pem))
        except (ValueError, TypeError, UnsupportedAlgorithm) as err:
            raise InvalidKeyError(f"cannot read public key PEM: {err}") from None
        return cls(key)  # type: ignore[arg-type]  # checked by _require_p256

    @classmethod
    def from_file(cls, path: Path) -> VerifyingKey:
        """Load a public key PEM from a file.

        Args:
            path: The PEM file.

        Raises:
            InvalidKeyError: the file cannot be read or does not hold an ECDSA P-256 public key.
        """
        try:
            pem = Path(path).read_bytes()
        except OSError as err:
            raise InvalidKeyError(
                f"cannot read public key file {path}: {err.strerror}", path=str(path)
            ) from None
        return cls.from_pem(pem)

    @property
    def key_id(self) -> str:
        """Hex sha256 of :meth:`public_pem`; equal to model_signing's bundle ``hint``."""
        return self._key_id

    def public_pem(self) -> bytes:
        """The SubjectPublicKeyInfo PEM, the exact bytes the key id hashes."""
        return self._pem

    def verify(self, signature: bytes, data: bytes) -> None:
        """Check a DER ECDSA/SHA-256 signature over ``data``.

        Args:
            signature: DER-encoded ECDSA signature.
            data: The signed bytes.

        Raises:
            SignatureError: the signature does not verify with this key.
        """
        try:
            self._key.verify(signature, data, _ALGORITHM)
        except InvalidSignature:
            raise SignatureError("signature does not verify", key_id=self._key_id) from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VerifyingKey) and other._key_id == self._key_id

    def __hash__(self) -> int:
        return hash(self._key_id)

    def __repr__(self) -> str:
        return f"VerifyingKey(key_id={self._key_id[:16]}...)"


class SigningKey:
    """An ECDSA P-256 private key.

    Args:
        private_key: The ``cryptography`` private key object.

    Raises:
        InvalidKeyError: the key is not ECDSA P-256.
    """

    __slots__ = ("_key", "_public")

    def __init__(self, private_key: ec.EllipticCurvePrivateKey) -> None:
        _require_p256(private_key)
        self._key = private_key
        self._public = VerifyingKey(private_key.public_key())

    @classmethod
    def generate(cls) -> SigningKey:
        """Generate a new random P-256 key."""
        return cls(ec.generate_private_key(ec.SECP256R1()))

    @classmethod
    def from_pem(cls, pem: bytes | str, password: bytes | None = None) -> SigningKey:
        """Load a private key PEM (PKCS#8 or SEC1 ``EC PRIVATE KEY``).

        Args:
            pem: The PEM text.
            password: The passphrase of an encrypted PEM.

        Raises:
            InvalidKeyError: unreadable PEM, wrong or missing password, or not ECDSA P-256.
        """
        try:
            key = serialization.load_pem_private_key(_as_bytes(pem), password)
        except (ValueError, TypeError, UnsupportedAlgorithm) as err:
            # The message of cryptography's error names the cause (bad password, not a key); it
            # never includes key material.
            raise InvalidKeyError(f"cannot read private key PEM: {err}") from None
        return cls(key)  # type: ignore[arg-type]  # checked by _require_p256

    @classmethod
    def from_file(cls, path: Path, password: bytes | None = None) -> SigningKey:
        """Load a private key PEM from a file.

        Args:
            path: The PEM file.
            password: The passphrase of an encrypted PEM.

        Raises:
            InvalidKeyError: the file cannot be read or does not hold an ECDSA P-256 private key.
        """
        try:
            pem = Path(path).read_bytes()
        except OSError as err:
            raise InvalidKeyError(f"cannot read key file {path}: {err.strerror}", path=str(path)) from None
        return cls.from_pem(pem, password)

    def private_pem(self) -> bytes:
        """The unencrypted PKCS#8 PEM of the private key."""
        return self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    @property
    def public_key(self) -> VerifyingKey:
        return self._public

    @property
    def key_id(self) -> str:
        """The key id of :attr:`public_key`."""
        return self._public.key_id

    def sign(self, data: bytes) -> bytes:
        """Sign ``data`` with ECDSA/SHA-256 and return the DER-encoded signature."""
        return self._key.sign(data, _ALGORITHM)

    def sign_deterministic(self, data: bytes) -> bytes:
        """Sign ``data`` with deterministic ECDSA/SHA-256 (RFC 6979): the same key and bytes always give the
        same signature, for documents whose digest must not change between requests (``/v2``'s signatures).

        Raises:
            InvalidKeyError: the OpenSSL ``cryptography`` is built with lacks RFC 6979 (before 3.2).
        """
        try:
            return self._key.sign(data, _DETERMINISTIC)
        except UnsupportedAlgorithm:
            raise InvalidKeyError("deterministic ECDSA (RFC 6979) needs cryptography built with OpenSSL >= 3.2") \
                from None

    def __repr__(self) -> str:
        return f"SigningKey(key_id={self.key_id[:16]}...)"


def load_signing_key(key_file: Path | None, key_pem: str | None, password: bytes | None = None) -> SigningKey:
    """Load the registry's signing key from exactly one of a file or a PEM given in the environment.

    Setting both is refused rather than letting one win: a stale key file silently beaten by an
    environment variable (or the reverse) would sign with a key the operator did not mean, and that
    shows up only when serving nodes reject the manifests.

    Args:
        key_file: Path of a PEM file (``MODELREG_SIGNING_KEY_FILE``).
        key_pem: The PEM itself (``MODELREG_SIGNING_KEY_PEM``).
        password: The passphrase of an encrypted PEM.

    Raises:
        InvalidKeyError: neither or both are given, or the key is unreadable or not ECDSA P-256.
    """
    if key_file is not None and key_pem:
        raise InvalidKeyError("both a signing key file and a signing key PEM are set; set only one")
    if key_pem:
        return SigningKey.from_pem(key_pem, password)
    if key_file is not None:
        return SigningKey.from_file(key_file, password)
    raise InvalidKeyError("no signing key configured (set a signing key file or a signing key PEM)")


def write_new_key(path: Path) -> SigningKey:
    """Generate a key and write its PEM to ``path`` with mode 0600, atomically and never over a file.

    The PEM is written to a temporary file in the same directory, fsynced, then hard-linked to
    ``path``: a reader sees no file or the whole key, and an existing key is never replaced.

    Args:
        path: Where to write the private key PEM; its parent is created if needed.

    Raises:
        FileExistsError: ``path`` already exists (use :func:`ensure_key_file` to load it instead).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = SigningKey.generate()
    create_exclusive(path, key.private_pem())
    return key


def ensure_key_file(path: Path) -> SigningKey:
    """Load the key at ``path``, generating it first if it does not exist (the embedded default).

    Two processes starting at once agree on one key: the loser of the race loads the winner's file.

    Args:
        path: The private key PEM file.

    Raises:
        InvalidKeyError: the existing file is unreadable or not an ECDSA P-256 key.
    """
    try:
        return write_new_key(path)
    except FileExistsError:
        return SigningKey.from_file(path)
