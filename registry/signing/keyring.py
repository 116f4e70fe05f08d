"""The private keys this registry holds: its configured signing key and those rotations wrote.

A rotation (``modelreg keys rotate``) writes its new key into the data directory's ``keys/`` folder
(0600), beside the embedded default key. A running server finds it there the first time the newest
trust root names a key it does not hold yet (:meth:`KeyRing.find` scans again when its first choice is missing), so the
embedded registry rotates without a restart. A deployment that sets ``MODELREG_SIGNING_KEY_FILE``
points it at the new key (or keeps the new key in the data directory's ``keys/``) and restarts.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from registry.signing.keys import SigningKey, write_new_key
    >>> primary, folder = SigningKey.generate(), Path(tempfile.mkdtemp())
    >>> ring = KeyRing(primary, folder)
    >>> rotated = write_new_key(folder / "signing-key-2.pem")
    >>> ring.find([rotated.key_id]).key_id == rotated.key_id
    True
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from registry.domain.errors import InvalidKeyError
from registry.signing.keys import SigningKey

log = logging.getLogger(__name__)

RESCAN_SECONDS = 5.0


class KeyRing:
    """The configured ``primary`` key and every private key PEM (``*.pem``) in ``directory``.

    Args:
        primary: The registry's configured signing key (``MODELREG_SIGNING_KEY_FILE`` or ``_PEM``).
        directory: The data directory's ``keys/`` folder (None: only ``primary``).
    """

    def __init__(self, primary: SigningKey, directory: Path | None) -> None:
        self.primary = primary
        self._directory = directory
        self._lock = threading.Lock()
        self._keys: dict[str, SigningKey] = {primary.key_id: primary}
        self._seen: set[Path] = set()
        self._missed: dict[str, float] = {}
        self.rescan()

    def rescan(self) -> None:
        """Load the key files of the directory not loaded yet; a file that is no key is skipped (logged)."""
        if self._directory is None or not self._directory.is_dir():
            return
        with self._lock:
            for path in sorted(self._directory.glob("*.pem")):
                if path in self._seen:
                    continue
                self._seen.add(path)
                try:
                    key = SigningKey.from_file(path)
                except InvalidKeyError as err:
                    log.warning("skipping %s in the key directory: %s", path, err.message)
                    continue
                self._keys.setdefault(key.key_id, key)

    def held(self) -> dict[str, SigningKey]:
        """Key id -> private key, for every key loaded so far."""
        return dict(self._keys)

    def find(self, key_ids: Iterable[str]) -> SigningKey | None:
        """The first of ``key_ids`` (in order of preference) whose private key is held; None if none is.

        When the first choice is not held, the directory is scanned again (for a given key at most once
        every ``RESCAN_SECONDS``, so a server lacking a key does not list the directory per request).
        """
        wanted = list(key_ids)
        if wanted and wanted[0] not in self._keys:
            now = time.monotonic()
            last = self._missed.get(wanted[0])
            if last is None or now - last >= RESCAN_SECONDS:
                self._missed[wanted[0]] = now
                self.rescan()
        for key_id in wanted:
            if key_id in self._keys:
                return self._keys[key_id]
        return None
