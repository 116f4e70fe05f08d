"""Webhooks, the pure part: secrets, Standard Webhooks signatures, what a subscription selects, backoff.

A delivery is one CloudEvent in structured JSON mode, POSTed with the Standard Webhooks headers:
``webhook-id`` (the CloudEvent's id, so a redelivery carries the same one), ``webhook-timestamp`` (Unix
seconds) and ``webhook-signature``: ``v1,<base64 HMAC-SHA256 over "id.timestamp.body">`` for each valid
secret, space-separated (two while a rotation lets receivers move to the new secret).

Example:
    >>> secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    >>> signature(secret, "msg_1", 1700000000, b'{"a":1}')
    'v1,hVsFLpmw4Ib/Xm0eZLt3KqYBZdt0U8gdGeuz0EsGv78='
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import hmac
import random
import re
import secrets as _secrets
from typing import Iterable

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
TEST_TYPE = "dev.modelreg.webhook.test"
"""The CloudEvents type of a test ping (``POST /v1/webhooks/{id}/test``); never in the event stream."""
CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"

ACTIVE = "active"
PAUSED = "paused"

MAX_GLOB_LENGTH = 256
_GLOB = re.compile(r"\A[A-Za-z0-9._\-*?\[\]!/]+\Z")


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` and 32 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(_secrets.token_bytes(SECRET_BYTES)).decode()


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The Standard Webhooks ``v1`` signature of one delivery under one secret."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(message_id: str, timestamp: int, body: bytes, secrets: Iterable[str]) -> dict[str, str]:
    """The headers of one delivery, signed with every secret in ``secrets`` (the newest first)."""
    signatures = " ".join(signature(s, message_id, timestamp, body) for s in secrets)
    return {"webhook-id": message_id, "webhook-timestamp": str(timestamp), "webhook-signature": signatures,
            "Content-Type": CONTENT_TYPE, "User-Agent": "modelreg-webhooks/1"}


def check_glob(pattern: str | None) -> str | None:
    """A model-name glob (``llama-*``, ``team/[ab]*``) as stored, or None for every model.

    Raises:
        ValueError: too long, or with characters a model name cannot hold.
    """
    if pattern is None or pattern == "":
        return None
    if len(pattern) > MAX_GLOB_LENGTH or not _GLOB.match(pattern):
        raise ValueError(f"a model glob is at most {MAX_GLOB_LENGTH} characters of letters, digits, "
                         f"'._-/' and the glob characters '*?[]!'")
    return pattern


def selects_model(pattern: str | None, model: str | None) -> bool:
    """Whether an event about ``model`` (None: an event about no model) passes the glob."""
    if pattern is None:
        return True
    return model is not None and fnmatch.fnmatchcase(model, pattern)


def retry_delay(failed_attempts: int, base: float, longest: float, rng: random.Random | None = None) -> float:
    """Seconds before the next attempt after ``failed_attempts`` failures in a row: doubling from
    ``base`` up to ``longest``, with jitter (a half to the whole of it) so many webhooks failing
    together (the receiver's outage) do not come back at the same instant."""
    delay = min(longest, base * 2 ** max(0, failed_attempts - 1))
    return delay * (rng or random).uniform(0.5, 1.0)
