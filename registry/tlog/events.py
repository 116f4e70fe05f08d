"""What a leaf of modelreg's verifiable log commits to (ADR 0011): an audit event's canonical encoding.

An event's *body* is the JSON object of the fields its chain hash covers plus that hash (``id``, ``at``,
``actor``, ``action``, ``subject``, ``tenant``, ``details``, ``prev_hash``, ``hash``); its commitment is the
SHA-256 of the body's canonical JSON (keys sorted, no spaces, UTF-8), and its leaf hash
``merkle.leaf_hash(commitment)``. The server and a node holding the body compute it alike.

Example:
    >>> body = {"id": 1, "at": "2026-01-01T00:00:00.000000Z", "actor": "a", "action": "x", "subject": "s",
    ...         "tenant": None, "details": {}, "prev_hash": "0" * 64, "hash": "1" * 64}
    >>> commitment(body).hex()[:16]
    '81dce11ebaef0450'
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from registry.domain.errors import LogProofError

BODY_FIELDS = frozenset({"id", "at", "actor", "action", "subject", "tenant", "details", "prev_hash", "hash"})


def encode_body(body: Mapping[str, Any]) -> bytes:
    """The canonical JSON of an event body."""
    return json.dumps(dict(body), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def commitment(body: Mapping[str, Any]) -> bytes:
    """The 32-byte commitment of an event body.

    Raises:
        LogProofError: not an object of exactly the body's fields (``reason`` ``event``).
    """
    if not isinstance(body, Mapping) or set(body) != BODY_FIELDS or type(body["id"]) is not int:
        raise LogProofError("event", "an audit event body is an object of exactly "
                                     f"{', '.join(sorted(BODY_FIELDS))} (an integer id)")
    return hashlib.sha256(encode_body(body)).digest()
