"""Who may read the audit log: its events, its verification and its signed checkpoints.

Events are read by the auditors of their tenant, and all of them by administrators; recomputing the
whole chain is for administrators. Checkpoints sign the whole chain and carry only event ids and hashes, so an auditor
of any tenant may read them: an auditor needs them to hold the registry to its chain later (``modelreg audit
verify --checkpoints``). So may the verifiable log's checkpoint and who signed it (:func:`log_status`);
an event's inclusion proof (:func:`log_inclusion`) is for those who may read the event.
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any

from sqlalchemy.orm import Session

from registry import audit
from registry.auth import AuthenticatedPrincipal, Permission, require, require_admin
from registry.db.models import AuditCheckpoint, AuditEvent
from registry.domain.errors import LogProofError, NoteSignatureError, PermissionDeniedError, RegistryError
from registry.services import tlog
from registry.tlog import merkle
from registry.tlog.checkpoint import CosignatureVerifier, parse_checkpoint
from registry.tlog.note import open_note, parse_note, parse_verifier_key


def list_checkpoints(
    session: Session, actor: AuthenticatedPrincipal, *, after: int, limit: int,
) -> list[AuditCheckpoint]:
    """Signed checkpoints after a checkpoint id, for administrators and the auditors of any tenant.

    Raises:
        PermissionDeniedError: the caller audits no tenant.
    """
    _require_auditor(actor)
    return audit.checkpoints(session, after=after, limit=limit)


def _require_auditor(actor: AuthenticatedPrincipal) -> None:
    # An administrator holds every permission in any tenant, "" included.
    if not any(Permission.AUDIT in actor.permissions(t) for t in (*actor.roles, "")):
        raise PermissionDeniedError(
            f"{actor.name!r} is not an auditor of any tenant", principal=actor.name, permission="audit",
        )


def log_status(session: Session, actor: AuthenticatedPrincipal, *, log_key: str,
               witnesses: list[str]) -> dict[str, Any] | None:
    """The verifiable log's newest checkpoint as served, and who signed it: the log key and which of the
    named ``witnesses`` (verifier keys) cosigned it, each signature verified; lines of keys not named are
    counted as unknown. For auditors of any tenant (a checkpoint reveals no tenant's events). None before
    the first checkpoint.
    """
    _require_auditor(actor)
    note = tlog.served_checkpoint(session)
    if note is None:
        return None
    checkpoint = parse_checkpoint(parse_note(note.encode()).text)
    log = parse_verifier_key(log_key)
    known = [log, *(parse_verifier_key(w, CosignatureVerifier) for w in witnesses)]
    status: dict[str, Any] = {"origin": checkpoint.origin, "size": checkpoint.size,
                              "root": base64.b64encode(checkpoint.root_hash).decode(), "note": note,
                              "log_signed": False, "cosigners": [], "unknown": 0, "error": None}
    try:
        opened = open_note(note.encode(), known)
    except (NoteSignatureError, RegistryError) as err:
        status["error"] = err.message
        return status
    names = {(s.name, s.key_id) for s in opened.verified}
    status["log_signed"] = (log.name, log.key_id) in names
    status["cosigners"] = sorted(name for name, key_id in names if (name, key_id) != (log.name, log.key_id))
    status["unknown"] = len(opened.unverified)
    return status


def log_inclusion(session: Session, actor: AuthenticatedPrincipal, event_id: int) -> dict[str, Any]:
    """Event ``event_id``, its commitment and leaf, and its inclusion proof in the newest checkpoint's tree,
    verified here: for the auditors of the event's tenant (administrators: any event). A missing event and
    another tenant's answer alike, so the page is no oracle of which ids exist.

    Raises:
        PermissionDeniedError: no such event, or one the caller may not read.
    """
    event = session.get(AuditEvent, event_id)
    allowed = event is not None and (actor.is_admin or (
        event.tenant is not None and Permission.AUDIT in actor.permissions(event.tenant)))
    if not allowed:
        raise PermissionDeniedError(f"{actor.name!r} may not read audit event {event_id}", principal=actor.name,
                                    permission="audit")
    commitment = audit.event_commitment(event)
    out: dict[str, Any] = {"event": event, "commitment": commitment.hex(), "index": event.id - 1,
                           "covered": False, "verified": False, "detail": None}
    proof = tlog.release_proof(session, [event])
    if proof is None:
        out["detail"] = "no checkpoint covers this event yet"
        return out
    checkpoint = parse_checkpoint(parse_note(proof["checkpoint"].encode()).text)
    hashes = [base64.b64decode(h) for h in proof["entries"][0]["inclusion_proof"]]
    out.update(covered=True, size=checkpoint.size, proof=proof["entries"][0]["inclusion_proof"])
    try:
        merkle.verify_inclusion(merkle.leaf_hash(commitment), event.id - 1, checkpoint.size, hashes,
                                checkpoint.root_hash)
        out["verified"] = True
    except LogProofError as err:
        out["detail"] = err.message
    return out



def list_events(
    session: Session, actor: AuthenticatedPrincipal, *, tenant: str | None, after: int, limit: int,
    by: str | None = None, action: str | None = None, since: dt.datetime | None = None,
    until: dt.datetime | None = None,
) -> list[AuditEvent]:
    """Events after an id: of one tenant for its auditors, of every tenant for administrators.

    ``by`` (an actor's name), ``action``, ``since`` and ``until`` narrow them (see :func:`registry.audit.events`).

    Raises:
        PermissionDeniedError: ``actor`` audits no such tenant (or, with no tenant, is no administrator).
    """
    if tenant is None:
        require_admin(actor)
    else:
        require(actor, tenant, Permission.AUDIT)
    return audit.events(session, tenant=tenant, after=after, limit=limit, actor=by, action=action, since=since,
                        until=until)


def verify_chain(session: Session, actor: AuthenticatedPrincipal) -> audit.ChainReport:
    """Recompute the whole chain (administrators).

    Raises:
        PermissionDeniedError: ``actor`` is no administrator.
        AuditChainError: naming the first altered, removed or reordered event.
    """
    require_admin(actor)
    return audit.verify(session)
