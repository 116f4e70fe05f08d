"""The registry tokens ``modelreg login`` keeps, one per registry URL, in ``<config dir>/logins.json``.

The config dir is ``$MODELREG_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/modelreg``, else ``~/.config/modelreg``;
the file is mode 0600 and written atomically. Every client command reads it (:func:`stored_token`) when no
other token is given; only ``modelreg login`` writes it (:func:`store`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

from registry.statefile import write_atomic

LOGINS_FILE = "logins.json"
MAX_LOGINS_FILE = 1 << 20


def config_dir() -> Path:
    if os.environ.get("MODELREG_CONFIG_DIR"):
        return Path(os.environ["MODELREG_CONFIG_DIR"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "modelreg"


def _read_logins() -> dict[str, Any]:
    path = config_dir() / LOGINS_FILE
    try:
        if path.stat().st_size > MAX_LOGINS_FILE:
            return {}
        logins = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return logins if isinstance(logins, dict) else {}


def stored_token(url: str) -> str | None:
    """The token ``modelreg login`` kept for ``url``, while it has not expired (else None)."""
    entry = _read_logins().get(url.rstrip("/"))
    if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
        return None
    try:
        expires = dt.datetime.fromisoformat(str(entry.get("expires_at")))
    except ValueError:
        return None
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=dt.timezone.utc)
    return entry["token"] if expires > dt.datetime.now(dt.timezone.utc) else None


def store(url: str, token: str, principal: str, expires_at: str) -> Path:
    logins = _read_logins()
    logins[url.rstrip("/")] = {"token": token, "principal": principal, "expires_at": expires_at}
    path = config_dir() / LOGINS_FILE
    write_atomic(path, json.dumps(logins, indent=2).encode(), mode=0o600, make_parents=True)
    return path


