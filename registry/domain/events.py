"""The event catalogue: what the audit log tells the world outside, as CloudEvents 1.0.

Every change that matters outside the registry is already an audit event, appended in the transaction
that makes the change (:mod:`registry.audit`). This module is the one list of those that are *events*
for consumers (webhooks, long-polls, node caches): each :class:`EventType` names the audit action it is
read from, its stable CloudEvents ``type`` (``dev.modelreg.version.approved``) and the few details its
``data`` may carry. Nothing else of an audit event leaves: ``data`` is built from a list of allowed keys,
never by copying the details, so a secret or file contents added to an audit event later cannot leak.

One audit event gives one CloudEvent, or two where the catalogue derives a second meaning from it (a
version scanned straight into ``awaiting_approval``, an alias promoted with a canary, a version failed
for its quota). The CloudEvent's ``id`` is the audit event's id (with the derived type's name after a
``.``), so consumers read the stream by audit id with a cursor, and a redelivered event has the id it had.

Example:
    >>> row = AuditRow(id=7, at="2026-12-02T01:00:00.000000Z", actor="mia", action="version.approved",
    ...                subject="acme/llama@3", tenant="acme", details={"state": "approved", "bundle_digest": "b"})
    >>> [e.type for e in events_of(row)]
    ['dev.modelreg.version.approved']
    >>> events_of(row)[0].data
    {'tenant': 'acme', 'model': 'llama', 'version': 3, 'actor': 'mia', 'state': 'approved'}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

SPEC_VERSION = "1.0"
TYPE_PREFIX = "dev.modelreg."
DATA_CONTENT_TYPE = "application/json"


@dataclass(frozen=True, slots=True)
class AuditRow:
    """What the catalogue reads of an audit event (the database row, without its hashes)."""

    id: int
    at: str
    actor: str
    action: str
    subject: str
    tenant: str | None
    details: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class EventType:
    """One kind of event consumers may subscribe to.

    Attributes:
        name: the short name (``version.approved``); the CloudEvents type is ``dev.modelreg.`` + name.
        action: the audit action it is read from.
        keys: the audit details its ``data`` may carry, beside what the subject names.
        when: for a derived type, whether an audit event of ``action`` means it.
        derived: True when the type is a second meaning of another type's audit event (its id gets a suffix).
    """

    name: str
    action: str
    keys: tuple[str, ...] = ()
    when: Callable[[Mapping[str, Any]], bool] = field(default=lambda details: True)
    derived: bool = False

    @property
    def type(self) -> str:
        return TYPE_PREFIX + self.name


def _entered(state: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda details: details.get("state") == state


def _failed_for_quota(details: Mapping[str, Any]) -> bool:
    return details.get("reason") == "quota_exceeded"


def _of_a_tenant(details: Mapping[str, Any]) -> bool:
    # A review of a namespace that serves no tenant is in the audit log only: as an event it would be global,
    # read by every principal.
    return bool(details.get("tenant"))


_ADMISSION_KEYS = ("namespace", "mode", "outcome", "object", "references", "answered")

APPROVED_ACTION = "version.approved"
"""The audit action of a version entering ``approved``: the event a release is proven by (ADR 0011)."""
ALIAS_MOVE_ACTIONS = ("alias.promoted", "alias.rolled_back")
"""The audit actions of an alias move: a release of an alias is proven by the newest of them too."""

CATALOGUE: tuple[EventType, ...] = (
    EventType("version.submitted", "version.submitted", ("source", "requested_revision", "declared_license")),
    EventType("version.sealed", "version.sealed", ("state", "manifest_digest", "files", "bytes")),
    EventType("version.scanned", "version.scanned", ("state",)),
    EventType("version.evaluated", "version.evaluated", ("state",)),
    EventType("version.awaiting_approval", "version.scanned", ("state",), _entered("awaiting_approval"), True),
    EventType("version.awaiting_approval", "version.evaluated", ("state",), _entered("awaiting_approval"), True),
    EventType("version.approved", "version.approved", ("state",)),
    EventType("version.rejected", "version.rejected", ("state", "capacity")),
    EventType("version.failed", "version.failed", ("state", "reason", "path")),
    EventType("quota.exceeded", "version.failed", ("used", "limit", "needed"), _failed_for_quota, True),
    EventType("version.revoked", "version.revoked", ("state", "reason", "aliases", "adapters", "adapters_total")),
    EventType("version.still_running", "version.still_running",
              ("program", "principal", "node", "place", "since", "last_reported_at",
               "more_places", "listed", "list_with")),
    EventType("version.deleted", "version.deleted", ("reason",)),
    EventType("alias.promoted", "alias.promoted", ("from", "to", "from_canary", "to_canary")),
    EventType("alias.canaried", "alias.promoted", ("from", "to", "from_canary", "to_canary"),
              lambda details: details.get("to_canary") is not None, True),
    EventType("alias.rolled_back", "alias.rolled_back", ("from", "to", "from_canary", "to_canary")),
    EventType("adapter.unservable", "adapter.unservable", ("reason", "adapter_version", "base", "base_version",
                                                          "weights_digest", "base_weights_digest", "canary")),
    EventType("trust_root.rotated", "trust_root.rotated", ("version", "key_ids", "threshold")),
    EventType("admission.decided", "admission.decided", _ADMISSION_KEYS, _of_a_tenant),
    EventType("admission.denied", "admission.denied", _ADMISSION_KEYS, _of_a_tenant),
)
"""Every event type, in the order a consumer reads about them; a type may be read from two actions."""

NAMES: frozenset[str] = frozenset(t.name for t in CATALOGUE)
TYPES: frozenset[str] = frozenset(t.type for t in CATALOGUE)
ACTIONS: frozenset[str] = frozenset(t.action for t in CATALOGUE)
"""The audit actions any event is read from: the stream reads no other rows."""

_BY_ACTION: dict[str, tuple[EventType, ...]] = {
    action: tuple(t for t in CATALOGUE if t.action == action) for action in ACTIONS
}
# tenant/model@3 (a version) or tenant/model@prod (an alias).
_REF = re.compile(r"^(?P<tenant>[^/@]+)/(?P<model>[^@]+)@(?P<at>[^@]+)$")


@dataclass(frozen=True, slots=True)
class Event:
    """One CloudEvent, in the structured JSON form (``as_cloudevent``)."""

    id: str
    type: str
    source: str
    subject: str
    time: str
    tenant: str | None
    data: dict[str, Any]
    cursor: int
    """The audit event id it was read from: resume the stream after it."""

    def as_cloudevent(self) -> dict[str, Any]:
        return {"specversion": SPEC_VERSION, "id": self.id, "type": self.type, "source": self.source,
                "subject": self.subject, "time": self.time, "datacontenttype": DATA_CONTENT_TYPE,
                "data": self.data}


def source_of(tenant: str | None) -> str:
    """The CloudEvents ``source``: the tenant's part of the registry, or the registry for global events."""
    return f"/modelreg/tenants/{tenant}" if tenant else "/modelreg"


def _subject_data(row: AuditRow) -> dict[str, Any]:
    """What the subject names: tenant, model and version number or alias."""
    match = _REF.match(row.subject)
    if match is None:
        return {"tenant": row.tenant} if row.tenant else {}
    at = match["at"]
    named: dict[str, Any] = {"tenant": match["tenant"], "model": match["model"]}
    if at.isdigit():
        named["version"] = int(at)
    else:
        named["alias"] = at
    return named


def events_of(row: AuditRow) -> list[Event]:
    """The CloudEvents one audit event means (none for an action outside the catalogue)."""
    out: list[Event] = []
    for kind in _BY_ACTION.get(row.action, ()):
        if not kind.when(row.details):
            continue
        data = {**_subject_data(row), "actor": row.actor}
        data.update((k, row.details[k]) for k in kind.keys if k in row.details)
        out.append(Event(id=f"{row.id}.{kind.name}" if kind.derived else str(row.id), type=kind.type,
                         source=source_of(row.tenant), subject=row.subject, time=row.at, tenant=row.tenant,
                         data=data, cursor=row.id))
    return out


def parse_types(names: list[str] | tuple[str, ...]) -> frozenset[str]:
    """Event type names a consumer asked for (short or CloudEvents form), checked against the catalogue.

    Raises:
        ValueError: naming the first unknown type, or more names than each type in both forms.
    """
    if len(names) > 2 * len(NAMES):
        raise ValueError(f"{len(names)} event types named; at most {2 * len(NAMES)}")
    chosen: set[str] = set()
    for name in names:
        short = name.removeprefix(TYPE_PREFIX)
        if short not in NAMES:
            raise ValueError(f"unknown event type {name!r}; known: {', '.join(sorted(NAMES))}")
        chosen.add(short)
    return frozenset(chosen)
