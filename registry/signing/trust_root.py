"""The trust root: a versioned, signed list of the registry's public keys, and how a node walks rotations.

A root is a DSSE envelope (payload type ``application/vnd.modelreg.root+json``) over::

    {"_type": "https://modelreg.dev/root/v1", "version": 2, "expires": "2027-11-30T00:00:00+00:00",
     "threshold": 1, "keys": [{"key_id": "<sha256 of PEM>", "algorithm": "ecdsa-p256-sha256",
                               "public_key_pem": "-----BEGIN PUBLIC KEY-----..."}]}

A root may also name the registry's verifiable audit log (ADR 0011), which nodes then require every
release to be proven in::

     "log": {"origin": "models.example.com/log", "verifier_key": "<name>+<hex id>+<base64>",
             "witnesses": ["<witness vkey>", ...], "quorum": 1}

Root 1 is signed by a threshold of its own keys. Root N+1 must be signed by a threshold of root N's keys
*and* a threshold of its own, so a key holder can hand trust on only with the keys trusted before. A node
pins one root (a file) and :func:`walk` moves it forward one version at a time (as python-tuf's client
does), checking expiry on the final root only; the caller persists the new root only after every check
passed. Release manifests are verified with the final root's keys and threshold.

Example:
    >>> import datetime as dt
    >>> from registry.signing.keys import SigningKey
    >>> k1, k2 = SigningKey.generate(), SigningKey.generate()
    >>> later = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
    >>> one = sign_root(root_document(1, [k1.public_key], 1, later), [k1])
    >>> two = sign_root(root_document(2, [k1.public_key, k2.public_key], 1, later), [k1, k2])
    >>> walk(parse_root(one), {2: two}.get, now=later - dt.timedelta(days=1)).version
    2
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from registry.domain.errors import InvalidVerifierKeyError, SignatureError
from registry.signing.canonical import canonical_json
from registry.signing.dsse import sign_envelope, verify_envelope
from registry.signing.keys import SigningKey, VerifyingKey
from registry.tlog.checkpoint import CosignatureVerifier
from registry.tlog.note import Ed25519Verifier, parse_verifier_key

ROOT_PAYLOAD_TYPE = "application/vnd.modelreg.root+json"
ROOT_TYPE = "https://modelreg.dev/root/v1"
ALGORITHM = "ecdsa-p256-sha256"
MAX_ROTATIONS = 256
"""The most versions one walk moves forward (python-tuf's bound): a server cannot keep a node busy."""
MAX_KEYS = 16
MAX_WITNESSES = 16


class RootError(SignatureError):
    """A trust root that cannot be trusted: malformed, not signed by the keys it must be, the wrong
    version, or expired. ``reason`` says which."""

    code = "untrusted-root"


@dataclasses.dataclass(frozen=True)
class LogTrust:
    """The verifiable log a root names: its origin, the log key's verifier key string, the witnesses'
    cosignature verifier keys, and how many of them must cosign a checkpoint a node accepts."""

    origin: str
    verifier_key: str
    witnesses: tuple[str, ...] = ()
    quorum: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"origin": self.origin, "verifier_key": self.verifier_key, "witnesses": list(self.witnesses),
                "quorum": self.quorum}

    def log_verifier(self) -> Ed25519Verifier:
        return parse_verifier_key(self.verifier_key)

    def witness_verifiers(self) -> list[CosignatureVerifier]:
        return [parse_verifier_key(w, CosignatureVerifier) for w in self.witnesses]  # type: ignore[misc]


def log_trust(doc: Any) -> LogTrust:
    """The ``log`` object of a root, checked: a log verifier key named by the origin (type 0x01), distinct
    witness cosignature keys (type 0x04), and a quorum between 0 and their number.

    Raises:
        RootError: any of those does not hold (``reason`` ``malformed``).
    """
    if not isinstance(doc, dict) or set(doc) - {"origin", "verifier_key", "witnesses", "quorum"}:
        raise RootError("the trust root's log is an object of origin, verifier_key, witnesses and quorum",
                        reason="malformed")
    origin, vkey, witnesses, quorum = doc.get("origin"), doc.get("verifier_key"), doc.get("witnesses", []), \
        doc.get("quorum", 0)
    try:
        verifier = parse_verifier_key(vkey) if isinstance(vkey, str) else None
    except InvalidVerifierKeyError as exc:
        raise RootError(f"the trust root's log key is not an Ed25519 verifier key: {exc.message}",
                        reason="malformed") from None
    if verifier is None or not isinstance(origin, str) or verifier.name != origin:
        raise RootError("the trust root's log key is not named by its origin", reason="malformed")
    if not isinstance(witnesses, list) or len(witnesses) > MAX_WITNESSES or not all(
            isinstance(w, str) for w in witnesses) or len(set(witnesses)) != len(witnesses):
        raise RootError(f"the trust root's witnesses are at most {MAX_WITNESSES} distinct key strings",
                        reason="malformed")
    try:
        named = {(w.name, w.key_id) for w in (parse_verifier_key(w, CosignatureVerifier) for w in witnesses)}
    except InvalidVerifierKeyError as exc:
        raise RootError(f"a trust root witness is not a cosignature verifier key: {exc.message}",
                        reason="malformed") from None
    if len(named) != len(witnesses):
        raise RootError("the trust root names a witness key twice", reason="malformed")
    if type(quorum) is not int or not 0 <= quorum <= len(witnesses):
        raise RootError("the trust root's witness quorum is not between 0 and its number of witnesses",
                        reason="malformed")
    return LogTrust(origin, vkey, tuple(witnesses), quorum)


@dataclasses.dataclass(frozen=True)
class TrustRoot:
    version: int
    expires: dt.datetime
    threshold: int
    keys: dict[str, VerifyingKey]
    envelope: dict[str, Any]
    log: LogTrust | None = None
    """The verifiable log every release must be proven in, when the root names one."""

    def is_expired(self, now: dt.datetime) -> bool:
        return now >= self.expires


def root_document(version: int, keys: Sequence[VerifyingKey], threshold: int,
                  expires: dt.datetime, log: LogTrust | None = None) -> dict[str, Any]:
    """The payload of root ``version`` (keys sorted by id, so the same root is the same bytes)."""
    doc = {"_type": ROOT_TYPE, "version": version, "expires": expires.astimezone(dt.timezone.utc).isoformat(),
           "threshold": threshold,
           "keys": [{"key_id": k.key_id, "algorithm": ALGORITHM, "public_key_pem": k.public_pem().decode()}
                    for k in sorted(set(keys), key=lambda k: k.key_id)]}
    if log is not None:
        doc["log"] = log_trust(log.as_dict()).as_dict()
    return doc


def sign_root(document: Mapping[str, Any], signers: Sequence[SigningKey]) -> dict[str, Any]:
    """The root envelope, signed by every key in ``signers`` (the new root's, and the previous root's)."""
    return sign_envelope(canonical_json(dict(document)), ROOT_PAYLOAD_TYPE, list(signers))


def _parse_payload(envelope: Mapping[str, Any]) -> tuple[dict[str, Any], TrustRoot]:
    import base64

    try:
        doc = json.loads(base64.b64decode(envelope["payload"], validate=True))
    except (KeyError, TypeError, ValueError):
        raise RootError("the trust root's payload is not base64 JSON", reason="malformed") from None
    if not isinstance(doc, dict) or doc.get("_type") != ROOT_TYPE:
        raise RootError(f"the trust root is not a {ROOT_TYPE} document", reason="malformed")
    version, threshold, keys = doc.get("version"), doc.get("threshold"), doc.get("keys")
    if type(version) is not int or version < 1:
        raise RootError("the trust root's version is not a positive integer", reason="malformed")
    if not isinstance(keys, list) or not 1 <= len(keys) <= MAX_KEYS:
        raise RootError(f"the trust root lists 1 to {MAX_KEYS} keys", reason="malformed")
    parsed: dict[str, VerifyingKey] = {}
    for entry in keys:
        if not isinstance(entry, dict) or entry.get("algorithm") != ALGORITHM:
            raise RootError(f"a trust root key is not {ALGORITHM}", reason="malformed")
        try:
            key = VerifyingKey.from_pem(entry["public_key_pem"])
        except Exception:  # noqa: BLE001 - any unparsable key is a malformed root
            raise RootError("a trust root key is not a P-256 public key PEM", reason="malformed") from None
        if entry.get("key_id") != key.key_id:
            raise RootError("a trust root key's id is not the sha256 of its PEM", reason="malformed")
        parsed[key.key_id] = key
    if type(threshold) is not int or not 1 <= threshold <= len(parsed):
        raise RootError("the trust root's threshold is not between 1 and its number of keys", reason="malformed")
    try:
        expires = dt.datetime.fromisoformat(doc["expires"])
    except (KeyError, TypeError, ValueError):
        raise RootError("the trust root's expiry is not an ISO 8601 time", reason="malformed") from None
    if expires.tzinfo is None:
        raise RootError("the trust root's expiry has no time zone", reason="malformed")
    log = log_trust(doc["log"]) if "log" in doc else None
    return doc, TrustRoot(version, expires, threshold, parsed, dict(envelope), log)


def _verify(envelope: Mapping[str, Any], keys: dict[str, VerifyingKey], threshold: int, who: str) -> None:
    try:
        verify_envelope(envelope, keys, ROOT_PAYLOAD_TYPE, threshold=threshold)
    except SignatureError as e:
        raise RootError(f"the trust root is not signed by {who}: {e.message}", reason="signature") from None


def parse_root(envelope: Mapping[str, Any]) -> TrustRoot:
    """A root trusted on its own signatures (the root a node is given, pinned by whoever installed it).

    Raises:
        RootError: malformed, or not signed by a threshold of its own keys.
    """
    _, root = _parse_payload(envelope)
    _verify(envelope, root.keys, root.threshold, f"a threshold ({root.threshold}) of its own keys")
    return root


def next_root(trusted: TrustRoot, envelope: Mapping[str, Any]) -> TrustRoot:
    """Root ``trusted.version + 1``, accepted only when signed by a threshold of ``trusted``'s keys and of its own.

    Raises:
        RootError: another version, or a signature missing.
    """
    _, candidate = _parse_payload(envelope)
    if candidate.version != trusted.version + 1:
        raise RootError(f"expected trust root version {trusted.version + 1}, got {candidate.version}",
                        reason="version")
    _verify(envelope, trusted.keys, trusted.threshold, f"root {trusted.version}'s keys")
    _verify(envelope, candidate.keys, candidate.threshold, "its own keys")
    return candidate


def walk(trusted: TrustRoot, fetch: Callable[[int], Mapping[str, Any] | None], *, now: dt.datetime,
         max_steps: int = MAX_ROTATIONS) -> TrustRoot:
    """From ``trusted``, accept each next root ``fetch(version)`` returns, until it returns None.

    Intermediate roots may have expired; the final one may not. Nothing is persisted here: the caller
    stores the returned root only after using it successfully.

    Raises:
        RootError: a root that does not chain, more than ``max_steps`` rotations, or an expired final root.
    """
    current = trusted
    for _ in range(max_steps):
        envelope = fetch(current.version + 1)
        if envelope is None:
            break
        current = next_root(current, envelope)
    else:
        if fetch(current.version + 1) is not None:
            raise RootError(f"more than {max_steps} trust root rotations at once", reason="version")
    if current.is_expired(now):
        raise RootError(f"trust root {current.version} expired at {current.expires.isoformat()}", reason="expired")
    return current
