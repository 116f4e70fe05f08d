"""The log's witnesses (ADR 0011, Witnesses): submit each new checkpoint to the configured witnesses
(C2SP tlog-witness ``add-checkpoint``) and keep the cosignatures they return.

For each witness with a URL that has not cosigned the newest checkpoint, :func:`submit_checkpoint` sends
``old`` (the size that witness last cosigned here, else 0), the consistency proof from the stored tiles and
the signed checkpoint; a 409 names the size the witness holds and is retried once from it. A witness's
answer is hostile input: it is read up to a bound, and a line is stored only when it is that witness's key's
valid cosignature over this exact checkpoint's text. A witness that is down, slow or refusing costs at most
``timeout`` seconds a request and is logged; it never fails the caller (integration has committed already).

:func:`registry.services.tlog.served_checkpoint` serves the newest checkpoint with the cosignature lines
collected for it at ``/log/checkpoint``.
"""

from __future__ import annotations

import datetime as dt
import logging

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from registry.db.models import LogCosignature
from registry.domain.errors import RegistryError
from registry.services import tlog
from registry.settings import LogWitness, Settings
from registry.tlog.checkpoint import Checkpoint, CosignatureVerifier, parse_checkpoint
from registry.tlog.note import open_note, parse_note, parse_verifier_key
from registry.witness import SIZE_CONTENT_TYPE, add_checkpoint_body

log = logging.getLogger(__name__)

#: The most bytes read from a witness's answer (a few cosignature lines).
MAX_ANSWER_BYTES = 8 * 1024
DEFAULT_TIMEOUT = 5.0


def submit_checkpoint(session_factory: sessionmaker[Session], witnesses: list[LogWitness], *,
                      now: dt.datetime, timeout: float = DEFAULT_TIMEOUT) -> int:
    """Submit the newest checkpoint to each witness with a URL that lacks a cosignature on it.

    Returns:
        How many new cosignatures were stored.
    """
    with session_factory() as session:
        note = tlog.latest_checkpoint(session)
    if note is None:
        return 0
    checkpoint = parse_checkpoint(parse_note(note.encode()).text)
    stored = 0
    with httpx.Client(timeout=timeout, follow_redirects=False) as client:
        for witness in witnesses:
            if witness.url is None:
                continue
            try:
                stored += _submit_to(session_factory, client, witness, note, checkpoint, now)
            except (httpx.HTTPError, RegistryError, ValueError) as err:
                log.warning("log witness %s did not cosign checkpoint %d: %s", witness.url, checkpoint.size, err)
    return stored


def collect_cosignatures(session_factory: sessionmaker[Session], settings: Settings, *,
                         timeout: float = DEFAULT_TIMEOUT, now: dt.datetime | None = None) -> str | None:
    """Submit the newest checkpoint to the configured witnesses that lack a cosignature on it, then return
    the checkpoint as served (with every cosignature collected for it), or None before the first."""
    submit_checkpoint(session_factory, settings.log_witnesses, timeout=timeout,
                      now=now or dt.datetime.now(dt.timezone.utc))
    with session_factory() as session:
        return tlog.served_checkpoint(session)


def _submit_to(session_factory: sessionmaker[Session], client: httpx.Client, witness: LogWitness, note: str,
               checkpoint: Checkpoint, now: dt.datetime) -> int:
    verifier = parse_verifier_key(witness.verifier_key, CosignatureVerifier)
    with session_factory() as session:
        have = session.get(LogCosignature, (checkpoint.size, checkpoint.root_hash, witness.verifier_key))
        if have is not None:
            return 0
        old = session.scalar(select(func.max(LogCosignature.checkpoint_size))
                             .where(LogCosignature.witness_key == witness.verifier_key,
                                    LogCosignature.checkpoint_size <= checkpoint.size)) or 0
    for attempt in range(2):
        with session_factory() as session:
            proof = tlog.consistency(session, first=old, second=checkpoint.size)["hashes"]
        status, content_type, body = _post(client, witness.url.rstrip("/") + "/add-checkpoint",
                                           add_checkpoint_body(old, proof, note.encode()))
        if status == 409 and attempt == 0 and content_type.startswith(SIZE_CONTENT_TYPE):
            held = body.decode("ascii", "replace").strip()
            if not held.isdigit() or int(held) > checkpoint.size or int(held) == old:
                raise ValueError(f"answered 409 with size {held[:40]!r}")
            old = int(held)
            continue
        if status != 200:
            raise ValueError(f"answered {status}: {body[:200].decode('utf-8', 'replace').strip()}")
        line = _verified_line(note, body, verifier)
        with session_factory() as session:
            session.merge(LogCosignature(checkpoint_size=checkpoint.size, root=checkpoint.root_hash,
                                         witness_key=witness.verifier_key, line=line, collected_at=now))
            session.commit()
        return 1
    raise ValueError("answered 409 twice")


def _post(client: httpx.Client, url: str, body: bytes) -> tuple[int, str, bytes]:
    """POST ``body``; the status, content type and at most ``MAX_ANSWER_BYTES`` of the answer."""
    with client.stream("POST", url, content=body, headers={"Content-Type": "text/plain"}) as response:
        data = b""
        for chunk in response.iter_bytes():
            data += chunk
            if len(data) > MAX_ANSWER_BYTES:
                raise ValueError(f"answered more than {MAX_ANSWER_BYTES} bytes")
        return response.status_code, response.headers.get("content-type", ""), data


def _verified_line(note: str, body: bytes, verifier: CosignatureVerifier) -> str:
    """The line of ``body`` that is ``verifier``'s valid cosignature over ``note``'s checkpoint.

    Raises:
        ValueError: no such line (garbage, another key's, or a cosignature over another checkpoint).
    """
    text = body.decode("utf-8", "replace")
    for line in text.splitlines()[:16]:
        candidate = line + "\n"
        try:
            opened = open_note((note + candidate).encode(), [verifier], require=[verifier.name])
        except RegistryError:
            continue
        if any(s.key_id == verifier.key_id for s in opened.verified):
            return candidate
    raise ValueError("no valid cosignature from the witness's key over this checkpoint")
