"""A node's trust: the pinned root, the rotations it has walked, the serials and log checkpoints it accepted.

The pinned root is the operator's and never written: a file (``--trust-root FILE``, often a read-only
ConfigMap), or the sha256 of root 1 (``--trust-root-sha256 HEX``; for a container that can mount no
file, such as KServe's storage initializer): root 1 is then fetched from the registry and trusted only
when exactly the bytes received hash to the pin (:func:`pinned_root`). Each root accepted since is kept
in the cache directory as ``trust/roots/<n>.json`` and, at every start, walked again from the pin (a
few signature checks), so a file planted in the cache cannot add trust the pin does not chain to. New
roots and serials are written by :meth:`NodeTrust.commit`, which the fetch calls only after DEST holds
the release: a root or a serial is never persisted for a fetch that failed (tough's CVE-2025-2888
cached one before its rollback check). The newest checkpoint of the verifiable log accepted with a
release (ADR 0011) is kept the same way, as ``trust/log/<origin hash>.checkpoint``: the next release's
checkpoint must extend it. Without a cache directory nothing is kept: every start walks from the pin, and
the serial and log checks have nothing earlier to compare with.

Example:
    >>> import datetime as dt, json, tempfile, pathlib
    >>> from registry.signing.keys import SigningKey
    >>> from registry.signing.trust_root import root_document, sign_root
    >>> key, d = SigningKey.generate(), pathlib.Path(tempfile.mkdtemp())
    >>> later = dt.datetime(2099, 1, 1, tzinfo=dt.timezone.utc)
    >>> _ = (d / "root.json").write_text(json.dumps(sign_root(root_document(1, [key.public_key], 1, later), [key])))
    >>> trust = NodeTrust.load(d / "root.json", d / "cache")
    >>> trust.root.version, trust.serial("acme/tiny", "prod")
    (1, None)
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from registry import statefile
from registry.domain.errors import InvalidInputError, RegistryError
from registry.domain.limits import MAX_ROOT_BYTES
from registry.node.log_proofs import WitnessPolicy
from registry.signing.trust_root import RootError, TrustRoot, parse_root, walk
from registry.tlog.checkpoint import parse_checkpoint
from registry.tlog.note import MAX_NOTE_BYTES, parse_note

PINNED_ROOT_VERSION = 1
"""The root a ``--trust-root-sha256`` pin names: the first the registry published."""


def _tree_size(signed: bytes) -> int:
    """The tree size of a kept checkpoint (-1 for one that does not parse: replaced by any)."""
    try:
        return parse_checkpoint(parse_note(signed).text).size
    except RegistryError:
        return -1


def read_file_bytes(path: Path, limit: int, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise InvalidInputError(f"cannot read {what} {path}: {exc.strerror}", path=str(path)) from None
    if len(data) > limit:
        raise InvalidInputError(f"{what} {path} is over {limit} bytes", path=str(path))
    return data


def read_json_file(path: Path, limit: int, what: str) -> Any:
    data = read_file_bytes(path, limit, what)
    try:
        return json.loads(data)
    except ValueError:
        raise InvalidInputError(f"{what} {path} is not JSON", path=str(path)) from None


def _parse_pinned(data: bytes, what: str) -> TrustRoot:
    try:
        envelope = json.loads(data)
    except ValueError:
        raise RootError(f"{what} is not JSON", reason="malformed") from None
    if not isinstance(envelope, dict):
        raise RootError(f"{what} is not a DSSE envelope", reason="malformed")
    return parse_root(envelope)


def load_pinned_root(path: Path) -> TrustRoot:
    """The root in the node's pinned file, trusted on its own signatures.

    Raises:
        InvalidInputError: unreadable or not JSON.
        RootError: not a root signed by a threshold of its own keys.
    """
    envelope = read_json_file(Path(path), MAX_ROOT_BYTES, "trust root file")
    if not isinstance(envelope, dict):
        raise RootError(f"trust root file {path} is not a DSSE envelope", reason="malformed")
    return parse_root(envelope)


def check_trust_options(file: Path | None, sha256: str | None) -> str | None:
    """The pin in lower case (None without one), once the options name a trust root at all.

    Raises:
        InvalidInputError: neither a file nor a pin, or a pin that is not 64 hex digits.
    """
    if file is None and not sha256:
        raise InvalidInputError("no trust root: pass --trust-root FILE or --trust-root-sha256 HEX "
                                "(MODELREG_TRUST_ROOT, MODELREG_TRUST_ROOT_SHA256)")
    if not sha256:
        return None
    if not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
        raise InvalidInputError(f"--trust-root-sha256 {sha256!r} is not a sha256 (64 hex digits)")
    return sha256.lower()


def pinned_root(file: Path | None, sha256: str | None,
                fetch_bytes: Callable[[int], bytes | None] | None = None) -> TrustRoot:
    """The node's pinned root: the ``--trust-root`` file, or root 1 from the registry by its sha256.

    With only ``sha256``: ``fetch_bytes(1)`` (the registry's ``GET /v1/trust-root/1`` body) must hash to
    it, byte for byte, before it is parsed. With both: the file must hash to it. With only the file:
    the file, as before.

    Raises:
        InvalidInputError: neither given, a pin that is not 64 hex digits, an unreadable file, or only a
            pin and no registry to fetch from.
        RootError: ``reason`` ``pin-mismatch`` (the bytes are not the pinned ones), ``not-found`` (the
            registry has no root 1), or a root not signed by a threshold of its own keys.
    """
    pin = check_trust_options(file, sha256)
    if pin is None:
        return load_pinned_root(Path(file))
    if file is not None:
        data, what = read_file_bytes(Path(file), MAX_ROOT_BYTES, "trust root file"), f"trust root file {file}"
    else:
        if fetch_bytes is None:
            raise InvalidInputError("--trust-root-sha256 without --trust-root needs the registry (--url) to "
                                    "fetch trust root 1 from")
        fetched = fetch_bytes(PINNED_ROOT_VERSION)
        if fetched is None:
            raise RootError(f"the registry has no trust root {PINNED_ROOT_VERSION} to check against "
                            "--trust-root-sha256", reason="not-found")
        data, what = fetched, f"the registry's trust root {PINNED_ROOT_VERSION}"
    actual = hashlib.sha256(data).hexdigest()
    if actual != pin:
        raise RootError(f"{what} hashes to sha256 {actual}, not the pinned {pin} (--trust-root-sha256): "
                        "refusing to trust it", reason="pin-mismatch", expected=pin, actual=actual)
    return _parse_pinned(data, what)


class NodeTrust:
    """The trusted root and accepted serials of one node cache directory.

    Nothing here is written until :meth:`commit`.
    """

    def __init__(self, root: TrustRoot, state_dir: Path | None, serials: dict[str, int]) -> None:
        self.root = root
        self.state_dir = state_dir
        self._serials = serials
        self._accepted: dict[str, int] = {}
        self._new_roots: dict[int, dict[str, Any]] = {}
        self._checkpoints: dict[str, bytes] = {}
        self.witness_policy: WitnessPolicy | None = None
        """The witnesses this node requires on its own (``--witness``), beside its trust root's."""

    @classmethod
    def load(cls, pinned: Path | TrustRoot, cache_dir: Path | None, *,
             now: dt.datetime | None = None) -> "NodeTrust":
        """The pinned root (a file, or a root :func:`pinned_root` gave), walked forward through the roots
        accepted before (kept in the cache; none without ``cache_dir``: then nothing is ever written).

        The stored chain is not checked for expiry here (the walk against the registry does that on
        the final root); a stored root that does not chain is ignored, with everything after it.
        """
        root = pinned if isinstance(pinned, TrustRoot) else load_pinned_root(pinned)
        if cache_dir is None:
            return cls(root, None, {})
        state_dir = Path(cache_dir) / "trust"
        stored = state_dir / "roots"

        def local(version: int) -> Mapping[str, Any] | None:
            path = stored / f"{version}.json"
            if not path.is_file():
                return None
            envelope = read_json_file(path, MAX_ROOT_BYTES, "stored trust root")
            return envelope if isinstance(envelope, dict) else None

        try:
            # Only that the stored chain holds; expiry is checked on the final root after the registry's walk.
            root = walk(root, local, now=dt.datetime.min.replace(tzinfo=dt.timezone.utc))
        except RootError:
            pass  # a stored chain that breaks is not trusted; the walk from the registry starts at the pin
        serials_file = state_dir / "serials.json"
        serials: dict[str, int] = {}
        if serials_file.is_file():
            loaded = read_json_file(serials_file, 16 << 20, "serial state")
            if isinstance(loaded, dict):
                serials = {k: v for k, v in loaded.items() if isinstance(k, str) and type(v) is int}
        return cls(root, state_dir, serials)

    def refresh(self, fetch: Callable[[int], Mapping[str, Any] | None], *, now: dt.datetime) -> TrustRoot:
        """Walk forward through the registry's rotations (``fetch(n)``: root n or None); check expiry.

        Raises:
            RootError: a rotation not signed by the previous root and itself, too many, or an expired
                final root.
        """
        fetched: dict[int, dict[str, Any]] = {}

        def recording(version: int) -> Mapping[str, Any] | None:
            envelope = fetch(version)
            if envelope is not None:
                fetched[version] = dict(envelope)
            return envelope

        newest = walk(self.root, recording, now=now)
        self._new_roots.update({v: e for v, e in fetched.items() if self.root.version < v <= newest.version})
        self.root = newest
        return newest

    def serial(self, model: str, ref: str) -> int | None:
        return self._serials.get(f"{model}@{ref}")

    def accept(self, model: str, ref: str, serial: int) -> None:
        """Remember ``serial`` for ``model@ref``; written by :meth:`commit`."""
        self._accepted[f"{model}@{ref}"] = serial

    def log_checkpoint(self, origin: str) -> bytes | None:
        """The newest checkpoint of the log ``origin`` this node accepted (kept beside the serials), or None."""
        if self.state_dir is None:
            return None
        path = self._checkpoint_path(origin)
        return read_file_bytes(path, MAX_NOTE_BYTES, "kept log checkpoint") if path.is_file() else None

    def accept_checkpoint(self, origin: str, signed: bytes) -> None:
        """Remember ``signed`` as the newest checkpoint of ``origin``; written by :meth:`commit`."""
        self._checkpoints[origin] = signed

    def _checkpoint_path(self, origin: str) -> Path:
        assert self.state_dir is not None
        return self.state_dir / "log" / f"{hashlib.sha256(origin.encode()).hexdigest()[:32]}.checkpoint"

    def commit(self) -> None:
        """Persist the roots walked, the serials and log checkpoints accepted (only after the fetch succeeded)."""
        if self.state_dir is None:
            self._new_roots, self._accepted, self._checkpoints = {}, {}, {}
            return
        stored = self.state_dir / "roots"
        for version, envelope in sorted(self._new_roots.items()):
            statefile.write_atomic(stored / f"{version}.json", json.dumps(envelope).encode(), make_parents=True)
        if self._accepted:
            import fcntl

            self.state_dir.mkdir(parents=True, exist_ok=True)
            # Another fetch may commit its own model's serial at the same time: merge under a lock.
            with open(self.state_dir / "serials.lock", "a+b") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                path = self.state_dir / "serials.json"
                current: dict[str, int] = {}
                if path.is_file():
                    loaded = read_json_file(path, 16 << 20, "serial state")
                    current = loaded if isinstance(loaded, dict) else {}
                for key, serial in self._accepted.items():
                    # Never lower: a slower fetch of an older release must not undo a newer one's serial.
                    if type(current.get(key)) is not int or current[key] < serial:
                        current[key] = serial
                statefile.write_atomic(path, json.dumps(current, sort_keys=True).encode(), make_parents=True)
            self._serials.update(current)
        if self._checkpoints:
            self._commit_checkpoints()
        self._new_roots, self._accepted, self._checkpoints = {}, {}, {}

    def _commit_checkpoints(self) -> None:
        import fcntl

        assert self.state_dir is not None
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / "serials.lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for origin, signed in self._checkpoints.items():
                # Never smaller: another fetch may have kept a larger tree (each was proven to extend the
                # one kept before it; the next fetch proves this one against whichever stays).
                stored = self.log_checkpoint(origin)
                if stored is None or _tree_size(stored) <= _tree_size(signed):
                    statefile.write_atomic(self._checkpoint_path(origin), signed, make_parents=True)

