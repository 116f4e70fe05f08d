"""Trust roots, server side: publish root 1, serve any root, rotate, pick the key releases are signed with.

The formats and the checks a node runs are in :mod:`registry.signing.trust_root`; this module stores
roots (``trust_roots``, one immutable row per version) and decides which of the registry's keys signs.

- Root 1 lists the registry's configured signing key, threshold 1, and is signed by it. It is made on
  first use (:func:`ensure_root`), by ``modelreg serve`` at start and by any request that needs a root.
- :func:`rotate` publishes root N+1 listing a new key (and root N's keys too with ``keep_old``), signed
  by a threshold of root N's keys and by the new root's own. By default the old keys are dropped: a
  rotation is what an operator does when a key may have leaked, and a root that still lists the old
  key would keep trusting it. ``keep_old`` is for a planned rotation across servers that restart one
  by one (each signs with a key the new root still lists); a later rotation drops them.
- :func:`publish_log` publishes root N+1 naming the verifiable log (its key, witnesses and quorum) when the
  newest root names another; nodes then require every release to be proven in that log.
- Release manifests are signed with a key of the newest root whose private key the registry holds
  (:func:`release_signer`), preferring the keys that root added.

Parsed roots are cached by their envelope (a root never changes), so serving one costs a query.

Usage (a sketch, not run as a doctest)::

    root, key = release_signer(session, container.keyring, expires_in=dt.timedelta(days=365),
                               clock=container.clock)
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Mapping
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError as SAIntegrityError
from sqlalchemy.orm import Session

from registry import audit
from registry.clock import Clock
from registry.db.models import TrustRootRecord
from registry.db.session import begin_write, is_postgres
from registry.domain.errors import ConflictError, InvalidKeyError, NotFoundError, ServiceUnavailableError
from registry.signing.keyring import KeyRing
from registry.signing.keys import SigningKey, VerifyingKey
from registry.signing.trust_root import LogTrust, TrustRoot, next_root, parse_root, root_document, sign_root


class TrustRootNotFoundError(NotFoundError):
    code = "trust-root-not-found"

    def __init__(self, version: int) -> None:
        super().__init__(f"there is no trust root version {version}", version=version)


class NoSigningKeyError(ServiceUnavailableError):
    """The newest trust root lists no key whose private key this registry holds (a rotation's new key
    not installed here yet): nothing it signed would verify, so it signs nothing."""

    code = "no-signing-key"

    def __init__(self, version: int) -> None:
        super().__init__(f"this registry holds the private key of none of trust root {version}'s keys; "
                         "install the key `modelreg keys rotate` wrote", version=version)


class RotationConflictError(ConflictError):
    """Another rotation published the same root version first."""

    code = "rotation-conflict"


_cache_lock = threading.Lock()
_parsed: dict[str, TrustRoot] = {}


def _parse(envelope: Mapping[str, Any]) -> TrustRoot:
    """The root of a stored envelope, parsed and self-verified once per process."""
    cache_key = json.dumps(envelope, sort_keys=True)
    found = _parsed.get(cache_key)
    if found is None:
        found = parse_root(envelope)
        with _cache_lock:
            if len(_parsed) > 1024:
                _parsed.clear()
            _parsed[cache_key] = found
    return found


def newest(session: Session) -> TrustRoot | None:
    """The newest published root, or None before root 1 exists."""
    row = session.scalar(select(TrustRootRecord).order_by(TrustRootRecord.version.desc()).limit(1))
    return None if row is None else _parse(row.envelope)


def published_keys(session: Session) -> dict[str, tuple[VerifyingKey, list[int]]]:
    """Every key any published root holds: key id -> (the key, the versions of the roots holding it)."""
    found: dict[str, tuple[VerifyingKey, list[int]]] = {}
    for record in session.scalars(select(TrustRootRecord).order_by(TrustRootRecord.version)):
        for key_id, key in _parse(record.envelope).keys.items():
            found.setdefault(key_id, (key, []))[1].append(record.version)
    return found


def get_root(session: Session, version: int) -> dict[str, Any]:
    """The envelope of root ``version``.

    Raises:
        TrustRootNotFoundError: no such root (a node walking forward stops at the first one).
    """
    envelope = session.scalar(select(TrustRootRecord.envelope).where(TrustRootRecord.version == version))
    if envelope is None:
        raise TrustRootNotFoundError(version)
    return envelope


def ensure_root(session: Session, primary: SigningKey, *, expires_in: dt.timedelta, clock: Clock) -> TrustRoot:
    """The newest root, publishing root 1 (``primary``, threshold 1, self-signed) first if there is none.

    Two processes starting at once publish one root 1: the second insert is a no-op and it reads the first's.
    Commits only when it wrote root 1.
    """
    found = newest(session)
    if found is not None:
        return found
    now = clock.now()
    envelope = sign_root(root_document(1, [primary.public_key], 1, now + expires_in), [primary])
    insert = postgresql_insert if is_postgres(session) else sqlite_insert
    begin_write(session)
    result = session.execute(insert(TrustRootRecord).values(version=1, envelope=envelope, created_at=now)
                             .on_conflict_do_nothing())
    if result.rowcount:
        audit.append(session, actor=audit.SYSTEM_ACTOR, action="trust_root.published", subject="trust-root/1",
                     details={"version": 1, "key_ids": [primary.key_id], "threshold": 1})
    session.commit()
    root = newest(session)
    assert root is not None
    return root


def release_signer(session: Session, keyring: KeyRing, *, expires_in: dt.timedelta, clock: Clock,
                   cache: dict[int, tuple[TrustRoot, SigningKey]] | None = None,
                   newest_version: int | None = None) -> tuple[TrustRoot, SigningKey]:
    """The newest root and the key release manifests are signed with now.

    The key is one the newest root lists and the registry holds: the keys that root added first (the
    rotation's new key), then the others, each by key id. With ``cache`` (one per database: a root
    never changes), a request costs one query for the newest version number, or none when the caller
    read it (``newest_version``) in a query of its own.

    Raises:
        NoSigningKeyError: the registry holds none of the newest root's keys.
    """
    if cache is not None:
        version = newest_version or session.scalar(select(func.max(TrustRootRecord.version)))
        if version in cache:
            return cache[version]
    root = ensure_root(session, keyring.primary, expires_in=expires_in, clock=clock)
    previous = _previous_keys(session, root)
    order = sorted(root.keys, key=lambda key_id: (key_id in previous, key_id))
    key = keyring.find(order)
    if key is None:
        raise NoSigningKeyError(root.version)
    if cache is not None and key.key_id == order[0]:
        # Only the first choice is kept: a preferred key installed later is picked up then.
        cache[root.version] = (root, key)
    return root, key


def _previous_keys(session: Session, root: TrustRoot) -> frozenset[str]:
    if root.version == 1:
        return frozenset()
    return frozenset(_parse(get_root(session, root.version - 1)).keys)


def rotate(session: Session, keyring: KeyRing, new_key: SigningKey, *, keep_old: bool = False,
           threshold: int = 1, expires_in: dt.timedelta, clock: Clock, actor: str = audit.SYSTEM_ACTOR) -> TrustRoot:
    """Publish root N+1 listing ``new_key`` (and root N's keys with ``keep_old``), and audit it.

    Signed by every key of root N the registry holds (a threshold of them at least) and by every key of
    the new root it holds (``new_key`` among them), then checked as a node will check it
    (:func:`registry.signing.trust_root.next_root`) before it is stored.

    Raises:
        InvalidKeyError: the registry holds fewer of root N's keys than its threshold, the new key is
            already in root N, or ``threshold`` is more than the new root's keys.
        RotationConflictError: another rotation published root N+1 first.
    """
    current = ensure_root(session, keyring.primary, expires_in=expires_in, clock=clock)
    if new_key.key_id in current.keys:
        raise InvalidKeyError(f"key {new_key.key_id[:16]}... is in trust root {current.version} already",
                              key_id=new_key.key_id)
    keys = [new_key.public_key, *(current.keys.values() if keep_old else ())]
    if not 1 <= threshold <= len(keys):
        raise InvalidKeyError(f"a threshold of {threshold} is not between 1 and the new root's {len(keys)} keys",
                              threshold=threshold)
    return _publish_next(session, keyring, current, keys, threshold, current.log, extra={new_key.key_id: new_key},
                         expires_in=expires_in, clock=clock, actor=actor, action="trust_root.rotated",
                         details={"kept_old_keys": keep_old})


def publish_log(session: Session, keyring: KeyRing, log: LogTrust, *, expires_in: dt.timedelta, clock: Clock,
                actor: str = audit.SYSTEM_ACTOR) -> TrustRoot:
    """Make the newest root name ``log`` (the verifiable log's key, witnesses and quorum, ADR 0011): when it
    names another (or none), publish root N+1 with the same keys and threshold and ``log``, signed as a
    rotation is. ``modelreg serve`` calls it at start, so a changed log key or witness setting reaches nodes
    as a trust-root update. Commits only when it published.

    Raises:
        InvalidKeyError: the registry holds fewer of root N's keys than its threshold.
        RotationConflictError: another process published root N+1 first.
    """
    current = ensure_root(session, keyring.primary, expires_in=expires_in, clock=clock)
    if current.log == log:
        return current
    return _publish_next(session, keyring, current, list(current.keys.values()), current.threshold, log,
                         expires_in=expires_in, clock=clock, actor=actor, action="trust_root.rotated",
                         details={"kept_old_keys": True, "log": log.as_dict()})


def _publish_next(session: Session, keyring: KeyRing, current: TrustRoot, keys: list[VerifyingKey], threshold: int,
                  log: LogTrust | None, *, extra: dict[str, SigningKey] | None = None, expires_in: dt.timedelta,
                  clock: Clock, actor: str, action: str, details: dict[str, Any]) -> TrustRoot:
    """Publish root N+1 (``keys``, ``threshold``, ``log``), signed by every key of root N the registry
    holds (a threshold at least) and every key of the new root it holds, checked as a node checks it."""
    keyring.rescan()
    held = keyring.held()
    held.update(extra or {})
    old_signers = [held[k] for k in sorted(current.keys) if k in held]
    if len(old_signers) < current.threshold:
        raise InvalidKeyError(f"this registry holds {len(old_signers)} of trust root {current.version}'s keys; "
                              f"a rotation needs {current.threshold} of them to sign",
                              held=len(old_signers), threshold=current.threshold)
    new_ids = {k.key_id for k in keys}
    signers = {k.key_id: k for k in old_signers}
    signers.update({k: held[k] for k in sorted(new_ids) if k in held})
    now = clock.now()
    version = current.version + 1
    envelope = sign_root(root_document(version, keys, threshold, now + expires_in, log), list(signers.values()))
    root = next_root(current, envelope)  # RootError: a bug here, never a root nodes would refuse
    begin_write(session)
    try:
        session.add(TrustRootRecord(version=version, envelope=envelope, created_at=now))
        session.flush()  # two replicas starting at once: the loser fails here, before its audit event
        audit.append(session, actor=actor, action=action, subject=f"trust-root/{version}",
                     details={"version": version, "key_ids": sorted(new_ids), "threshold": threshold,
                              "signed_by": sorted(signers), **details})  # a new root is a rotation to nodes
        session.commit()
    except SAIntegrityError:
        session.rollback()
        raise RotationConflictError(f"trust root {version} was published by another rotation first",
                                    version=version) from None
    return root

