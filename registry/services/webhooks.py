"""Webhooks: tenant admins subscribe a URL to catalogue events; workers deliver them in order, at least once.

Who: administrators, and whoever holds the tenant's ``admin`` permission, manage a tenant's webhooks;
nobody else sees that they exist (a subscription they may not manage is "not found").

Delivery (``deliver``, the ``deliver_webhook`` job, one per subscription): each subscription has a durable
cursor into the audit log (:mod:`registry.services.events`), starting at the stream's head when it is
made. The job sends the events after the cursor one at a time, in order, in batches: it reads up to
:data:`EVENTS_PER_BATCH` events in one query, sends them one after another on one kept-alive connection
(:class:`registry.net.egress.Poster`; a request starts only once the one before was answered 2xx), then
records every attempt and moves the cursor past the ones answered 2xx in one transaction, by a
compare-and-set. So a worker killed mid-batch leaves the cursor where it was and those events are sent
again with the same ``webhook-id`` (at least once, in order, never skipped). A failed event ends its batch;
it is tried again after an exponential delay with jitter, the same event, until ``retry_for`` has passed
since its first failure; then the subscription is paused with the reason (``webhook.paused`` in the audit
log) and waits for ``redeliver``. The network work happens outside any transaction, through the egress
guard (:mod:`registry.net.egress`), which is checked at subscription time and again at every batch (its
requests all go to the address checked then).

Noticing new events (``arm_due``): workers call it every ``webhook_poll_seconds``. It moves the cursor of
each subscription with nothing to read in its tenant up to the head (one statement), and queues the job of
each active subscription still behind whose retry is due (one query, then one statement per such
subscription), and the job of each subscription with a test ping waiting. Nothing of this happens in an
API request.

Test pings (``send_test``): the request only records a pending delivery holding the ping's CloudEvent and
queues the subscription's job, which sends its pings first (paused or failing, too) and records each
answer on that delivery; a tenant has at most :data:`MAX_PINGS_IN_FLIGHT` waiting, so no API thread and
no unbounded share of the workers waits on a slow receiver.

Usage (a sketch, not run as a doctest)::

    sub, secret = create(session, admin, tenant="acme", url="https://hooks.example/modelreg",
                         types=["version.approved"], egress=policy, clock=clock)
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, exists, func, null, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from registry import audit
from registry.auth import AuthenticatedPrincipal, Permission, get_tenant, require
from registry.clock import Clock
from registry.db.models import AuditEvent, Job, Tenant, WebhookDelivery, WebhookSubscription
from registry.db.session import begin_write
from registry.domain import events as catalogue
from registry.domain import webhooks as hooks
from registry.domain.errors import (
    InvalidInputError,
    LimitExceededError,
    WebhookNotFoundError,
    WebhookPingsInFlightError,
)
from registry.jobs import DEAD, QUEUED, SUCCEEDED, JobKind, enqueue_job, job_key
from registry.net import egress
from registry.services.events import head, row_of

MAX_SUBSCRIPTIONS_PER_TENANT = 100
MAX_PINGS_IN_FLIGHT = 5
"""The most test pings a tenant may have waiting to be sent (``send_test``)."""
MAX_DELIVERIES_PAGE = 500
EVENTS_PER_RUN = 1000
"""The most events one job run delivers: then it ends, and the next tick queues it again."""
RUN_SECONDS = 30.0
"""...or after this long, so a worker thread turns to other subscriptions now and then."""
EVENTS_PER_BATCH = 100
"""The most events sent between two records: read in one query, recorded in one transaction."""
BATCH_SECONDS = 1.0
"""A batch sends no new event after this long, so the records (and the cursor) lag the receiver by about this
at most (and one exchange: ``webhook_timeout_seconds``)."""
_PAGE = 200
_MAX_PAGES = 10


@dataclass(frozen=True)
class DeliveryConfig:
    """How deliveries are made: the guard, the bounds of one exchange, and the retry schedule."""

    egress: egress.EgressPolicy
    connect_timeout: float = 5.0
    total_timeout: float = 10.0
    max_response_bytes: int = 65536
    retry_for: float = 86400.0
    backoff_base: float = 5.0
    backoff_max: float = 1800.0

    @classmethod
    def from_settings(cls, settings: Any) -> DeliveryConfig:
        return cls(egress=egress.EgressPolicy.from_entries(settings.egress_allow),
                   connect_timeout=settings.webhook_connect_timeout_seconds,
                   total_timeout=settings.webhook_timeout_seconds,
                   max_response_bytes=settings.webhook_max_response_bytes,
                   retry_for=settings.webhook_retry_for_seconds,
                   backoff_base=settings.webhook_backoff_base_seconds,
                   backoff_max=settings.webhook_backoff_max_seconds)


# --- managing subscriptions ------------------------------------------------------------------------


def _manageable(session: Session, principal: AuthenticatedPrincipal, subscription_id: int) -> WebhookSubscription:
    sub = session.get(WebhookSubscription, subscription_id)
    if sub is None or Permission.ADMIN not in principal.permissions(sub.tenant):
        raise WebhookNotFoundError(subscription_id)
    return sub


def _types(names: list[str]) -> list[str]:
    if not names:
        raise InvalidInputError("name at least one event type (or '*' for all)", field="types")
    if len(names) > 2 * len(catalogue.NAMES):
        raise LimitExceededError("too many event types", field="types")
    if "*" in names:
        return sorted(catalogue.NAMES)
    try:
        return sorted(catalogue.parse_types(names))
    except ValueError as exc:
        raise InvalidInputError(str(exc), field="types") from None


def create(session: Session, principal: AuthenticatedPrincipal, *, tenant: str, url: str, types: list[str],
           model_glob: str | None = None, egress_policy: egress.EgressPolicy, clock: Clock
           ) -> tuple[WebhookSubscription, str]:
    """Subscribe ``url`` to ``tenant``'s events of ``types``; commits. The secret is returned once.

    Raises:
        PermissionDeniedError: not an admin of the tenant.
        TenantNotFoundError: no such tenant.
        EgressRefusedError: the egress guard refuses the URL.
        InvalidInputError: unknown types, a bad glob; LimitExceededError: the tenant has too many.
    """
    require(principal, tenant, Permission.ADMIN)
    begin_write(session)
    get_tenant(session, tenant)
    chosen = _types(types)
    try:
        glob = hooks.check_glob(model_glob)
    except ValueError as exc:
        raise InvalidInputError(str(exc), field="model_glob") from None
    egress_policy.check(url)
    count = session.scalar(select(func.count()).where(WebhookSubscription.tenant == tenant)) or 0
    if count >= MAX_SUBSCRIPTIONS_PER_TENANT:
        raise LimitExceededError(f"tenant {tenant!r} has {count} webhooks, the most it may have",
                                 tenant=tenant, limit=MAX_SUBSCRIPTIONS_PER_TENANT)
    secret = hooks.new_secret()
    now = clock.now()
    # No replay of history: the new subscription hears of what happens from now on.
    sub = WebhookSubscription(tenant=tenant, url=url, types=chosen, model_glob=glob, secret=secret,
                              cursor=head(session), cursor_part=0, status=hooks.ACTIVE, failed_attempts=0,
                              created_by=principal.name, created_at=now)
    session.add(sub)
    session.flush()
    audit.append(session, actor=principal.name, action="webhook.created", subject=f"webhook/{sub.id}",
                 tenant=tenant, details={"url": url, "types": chosen, "model_glob": glob, "cursor": sub.cursor})
    session.commit()
    return sub, secret


def list_subscriptions(session: Session, principal: AuthenticatedPrincipal,
                       tenant: str | None = None) -> list[WebhookSubscription]:
    """The webhooks the caller manages (of ``tenant`` only, if given), oldest first.

    Raises:
        PermissionDeniedError: ``tenant`` given and the caller is not its admin.
    """
    query = select(WebhookSubscription).order_by(WebhookSubscription.id)
    if tenant is not None:
        require(principal, tenant, Permission.ADMIN)
        query = query.where(WebhookSubscription.tenant == tenant)
    elif not principal.is_admin:
        mine = sorted(t for t in principal.roles if Permission.ADMIN in principal.permissions(t))
        query = query.where(WebhookSubscription.tenant.in_(mine))
    return list(session.scalars(query.limit(MAX_SUBSCRIPTIONS_PER_TENANT * 10)))


def show(session: Session, principal: AuthenticatedPrincipal, subscription_id: int) -> WebhookSubscription:
    """One webhook. Raises: WebhookNotFoundError (none, or not the caller's to manage)."""
    return _manageable(session, principal, subscription_id)


def remove(session: Session, principal: AuthenticatedPrincipal, subscription_id: int) -> None:
    """Delete a webhook and its delivery records; commits. Its queued job finds nothing and ends."""
    begin_write(session)
    sub = _manageable(session, principal, subscription_id)
    audit.append(session, actor=principal.name, action="webhook.removed", subject=f"webhook/{sub.id}",
                 tenant=sub.tenant, details={"url": sub.url})
    session.execute(delete(WebhookDelivery).where(WebhookDelivery.subscription_id == sub.id))
    session.delete(sub)
    session.commit()


def deliveries(session: Session, principal: AuthenticatedPrincipal, subscription_id: int, *,
               limit: int = 100, before: int | None = None) -> list[WebhookDelivery]:
    """The webhook's delivery attempts, newest first (before the delivery id ``before``, if given)."""
    if not 1 <= limit <= MAX_DELIVERIES_PAGE:
        raise InvalidInputError(f"limit must be within 1..{MAX_DELIVERIES_PAGE}", field="limit")
    sub = _manageable(session, principal, subscription_id)
    query = select(WebhookDelivery).where(WebhookDelivery.subscription_id == sub.id)
    if before is not None:
        query = query.where(WebhookDelivery.id < before)
    return list(session.scalars(query.order_by(WebhookDelivery.id.desc()).limit(limit)))


def _event_audit_id(event_id: str) -> int:
    head_part = event_id.split(".", 1)[0]
    if not head_part.isdigit() or len(head_part) > 18 or int(head_part) < 1:
        raise InvalidInputError(f"{event_id!r} is no event id (an audit id, as a CloudEvent id starts)",
                                field="from_event")
    return int(head_part)


def redeliver(session: Session, principal: AuthenticatedPrincipal, subscription_id: int, *,
              from_event: str | None = None, clock: Clock) -> WebhookSubscription:
    """Resume a webhook (paused or failing: its next attempt is now), from ``from_event`` if given
    (that event and every one after it are sent again, with their ids); commits.

    Raises:
        InvalidInputError: ``from_event`` is not an event id, or past the stream's head.
    """
    begin_write(session)
    sub = _manageable(session, principal, subscription_id)
    details: dict[str, Any] = {"was": sub.status}
    if from_event is not None:
        audit_id = _event_audit_id(from_event)
        if audit_id > head(session):
            raise InvalidInputError(f"event {from_event!r} is past the newest event", field="from_event")
        sub.cursor, sub.cursor_part = audit_id - 1, 0
        details["from_event"] = from_event
    sub.status = hooks.ACTIVE
    sub.paused_reason = sub.paused_at = sub.failing_since = sub.next_attempt_at = None
    sub.failed_attempts = 0
    audit.append(session, actor=principal.name, action="webhook.resumed", subject=f"webhook/{sub.id}",
                 tenant=sub.tenant, details=details)
    arm(session, sub.id, sub.tenant, clock.now())
    session.commit()
    return sub


def rotate_secret(session: Session, principal: AuthenticatedPrincipal, subscription_id: int, *,
                  keep_previous_seconds: float = 86400.0, clock: Clock) -> tuple[WebhookSubscription, str]:
    """A new signing secret (returned once); the current one keeps signing too for
    ``keep_previous_seconds`` (0: dropped now), so receivers can move without losing a delivery; commits.
    """
    if not 0 <= keep_previous_seconds <= 30 * 86400:
        raise InvalidInputError("keep_previous_seconds must be within 0..2592000", field="keep_previous_seconds")
    begin_write(session)
    sub = _manageable(session, principal, subscription_id)
    secret = hooks.new_secret()
    now = clock.now()
    if keep_previous_seconds > 0:
        sub.previous_secret = sub.secret
        sub.previous_secret_expires_at = now + dt.timedelta(seconds=keep_previous_seconds)
    else:
        sub.previous_secret = sub.previous_secret_expires_at = None
    sub.secret = secret
    audit.append(session, actor=principal.name, action="webhook.secret_rotated", subject=f"webhook/{sub.id}",
                 tenant=sub.tenant, details={"previous_valid_until": sub.previous_secret_expires_at.isoformat()
                                             if sub.previous_secret_expires_at else None})
    session.commit()
    return sub, secret


def signing_secrets(sub: WebhookSubscription, now: dt.datetime) -> list[str]:
    """The secrets a delivery is signed with now: the current one, and the previous one while valid."""
    out = [sub.secret]
    if sub.previous_secret and sub.previous_secret_expires_at and sub.previous_secret_expires_at > now:
        out.append(sub.previous_secret)
    return out


def public(sub: WebhookSubscription) -> dict[str, Any]:
    """What the API shows of a subscription (never a secret)."""

    def at(t: Any) -> str | None:
        return t.isoformat() if t else None

    return {"id": sub.id, "tenant": sub.tenant, "url": sub.url, "types": list(sub.types),
            "model_glob": sub.model_glob, "state": sub.status, "paused_reason": sub.paused_reason,
            "paused_at": at(sub.paused_at), "cursor": sub.cursor, "failing_since": at(sub.failing_since),
            "failed_attempts": sub.failed_attempts, "next_attempt_at": at(sub.next_attempt_at),
            "last_error": sub.last_error, "previous_secret_valid_until": at(sub.previous_secret_expires_at),
            "created_by": sub.created_by, "created_at": at(sub.created_at)}


def delivery_public(d: WebhookDelivery) -> dict[str, Any]:
    """What the API shows of a delivery; ``state`` is ``pending`` (a ping not sent yet), ``delivered``
    (answered 2xx) or ``failed``."""
    if d.pending_event is not None:
        state = "pending"
    else:
        state = "delivered" if d.error is None and d.status_code is not None and 200 <= d.status_code < 300 \
            else "failed"
    return {"id": d.id, "event_id": d.event_id, "event_type": d.event_type, "attempt": d.attempt, "state": state,
            "status_code": d.status_code, "error": d.error, "duration_ms": d.duration_ms, "at": d.at.isoformat()}


# --- sending ---------------------------------------------------------------------------------------


def body_of(cloudevent: dict[str, Any]) -> bytes:
    return json.dumps(cloudevent, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def _poster(config: DeliveryConfig) -> egress.Poster:
    return egress.Poster(connect_timeout=config.connect_timeout, total_timeout=config.total_timeout,
                         max_response_bytes=config.max_response_bytes)


def _checked(url: str, config: DeliveryConfig) -> egress.Target | egress.Answer:
    """The URL checked by the guard now, or the refusal as a failed answer."""
    try:
        return config.egress.check(url)
    except egress.EgressRefusedError as exc:
        return egress.Answer(None, b"", f"refused by the egress guard: {exc}"[:1000], 0.0)


def _send(poster: egress.Poster, target: egress.Target, message_id: str, body: bytes, secrets: list[str],
          clock: Clock) -> egress.Answer:
    """One signed POST (signed now: the timestamp is this attempt's)."""
    signed = hooks.headers(message_id, int(clock.now().timestamp()), body, secrets)
    return poster.post(target, body, signed)


def _delivery_row(sub_id: int, event_id: str, event_type: str, attempt: int, answer: egress.Answer,
                  at: dt.datetime) -> WebhookDelivery:
    error = answer.error
    if error is None and not answer.ok:
        error = f"answered {answer.status}"
    return WebhookDelivery(subscription_id=sub_id, event_id=event_id, event_type=event_type, attempt=attempt,
                           status_code=answer.status, error=error[:1000] if error else None,
                           duration_ms=int(answer.duration * 1000), at=at)


def send_test(session: Session, principal: AuthenticatedPrincipal, subscription_id: int, *,
              clock: Clock) -> WebhookDelivery:
    """Queue a ``dev.modelreg.webhook.test`` ping: a pending delivery that the subscription's delivery job
    sends (through the guard and its bounds, paused or not) and records like any delivery; it moves no
    cursor. Commits; no network work here. Returns the pending delivery (read its result by its id).

    Raises:
        WebhookNotFoundError: no such webhook, or not the caller's to manage.
        WebhookPingsInFlightError: the tenant has :data:`MAX_PINGS_IN_FLIGHT` pings pending already.
    """
    begin_write(session)
    sub = _manageable(session, principal, subscription_id)
    # The tenant's row lock serializes the count and the insert (PostgreSQL; SQLite's write lock already).
    session.execute(select(Tenant.id).where(Tenant.name == sub.tenant).with_for_update())
    in_flight = session.scalar(
        select(func.count()).select_from(WebhookDelivery).join(WebhookSubscription)
        .where(WebhookSubscription.tenant == sub.tenant, WebhookDelivery.pending_event.is_not(None))) or 0
    if in_flight >= MAX_PINGS_IN_FLIGHT:
        raise WebhookPingsInFlightError(sub.tenant, MAX_PINGS_IN_FLIGHT)
    now = clock.now()
    event = {"specversion": catalogue.SPEC_VERSION, "id": f"test-{uuid.uuid4().hex}", "type": hooks.TEST_TYPE,
             "source": catalogue.source_of(sub.tenant), "subject": f"webhook/{sub.id}",
             "time": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "datacontenttype": catalogue.DATA_CONTENT_TYPE,
             "data": {"tenant": sub.tenant, "webhook": sub.id, "actor": principal.name}}
    delivery = WebhookDelivery(subscription_id=sub.id, event_id=event["id"], event_type=hooks.TEST_TYPE, attempt=1,
                               status_code=None, error=None, duration_ms=0, at=now, pending_event=event)
    session.add(delivery)
    arm(session, sub.id, sub.tenant, now)
    session.commit()
    return delivery


def _send_pings(session_factory: sessionmaker[Session], subscription_id: int, *, poster: egress.Poster,
                config: DeliveryConfig, clock: Clock) -> int:
    """Send the subscription's pending test pings, oldest first, and record each answer; returns how many.
    A ping sent twice (a run killed before recording it) carries the same ``webhook-id``."""
    sent = 0
    for _ in range(MAX_PINGS_IN_FLIGHT):
        with session_factory() as session:
            sub = session.get(WebhookSubscription, subscription_id)
            ping = session.scalars(select(WebhookDelivery).where(WebhookDelivery.subscription_id == subscription_id,
                                                                 WebhookDelivery.pending_event.is_not(None))
                                   .order_by(WebhookDelivery.id).limit(1)).first()
            if sub is None or ping is None:
                return sent
            ping_id, event, url, secrets = ping.id, ping.pending_event, sub.url, signing_secrets(sub, clock.now())
            session.rollback()
        target = _checked(url, config)
        answer = target if isinstance(target, egress.Answer) else \
            _send(poster, target, event["id"], body_of(event), secrets, clock)
        error = answer.error if answer.error is not None or answer.ok else f"answered {answer.status}"
        with session_factory() as session:
            begin_write(session)
            session.execute(update(WebhookDelivery)
                            .where(WebhookDelivery.id == ping_id, WebhookDelivery.pending_event.is_not(None))
                            .values(status_code=answer.status, error=error[:1000] if error else None,
                                    duration_ms=int(answer.duration * 1000), at=clock.now(),
                                    pending_event=null()))  # SQL NULL, not JSON null
            session.commit()
        sent += 1
    return sent


@dataclass(frozen=True, slots=True)
class _Pending:
    """An undelivered event of a subscription, and where its cursor goes once it is delivered."""

    event: catalogue.Event
    cursor: int
    part: int


def _selected(sub: WebhookSubscription, row: AuditEvent) -> list[catalogue.Event]:
    types = set(sub.types)
    return [e for e in catalogue.events_of(row_of(row))
            if e.type.removeprefix(catalogue.TYPE_PREFIX) in types
            and hooks.selects_model(sub.model_glob, e.data.get("model"))]


def _next_events(session: Session, sub: WebhookSubscription, limit: int) -> tuple[list[_Pending], int]:
    """Up to ``limit`` undelivered events after the cursor, in order, each with the cursor after it; and, when
    there are none, the cursor to move to (past rows that select nothing, up to the head).

    An audit row may mean several events: after one that is not its row's last the cursor is (the row's id
    less one, the index of the next), so the row is read again from there.
    """
    actions = sorted({t.action for t in catalogue.CATALOGUE if t.name in set(sub.types)})
    newest = head(session)
    after, skip = sub.cursor, sub.cursor_part
    found: list[_Pending] = []
    for _ in range(_MAX_PAGES):
        rows = list(session.scalars(
            select(AuditEvent).where(AuditEvent.id > after, AuditEvent.action.in_(actions),
                                     or_(AuditEvent.tenant == sub.tenant, AuditEvent.tenant.is_(None)))
            .order_by(AuditEvent.id).limit(_PAGE)))
        for row in rows:
            chosen = _selected(sub, row)
            for part in range(skip, len(chosen)):
                last = part + 1 == len(chosen)
                found.append(_Pending(chosen[part], row.id if last else row.id - 1, 0 if last else part + 1))
                if len(found) == limit:
                    return found, found[-1].cursor
            # The cursor's part counts in the first row after it that selects anything.
            skip = 0 if chosen else skip
        if found:
            return found, found[-1].cursor
        if len(rows) < _PAGE:
            return found, max(after, newest, rows[-1].id if rows else 0)
        after = rows[-1].id
    return found, after


def _move_cursor(session: Session, subscription_id: int, old: tuple[int, int], new: tuple[int, int],
                 **values: Any) -> bool:
    """Compare-and-set: a second run of the job (a lease that ran out) never moves the cursor twice."""
    result = session.execute(
        update(WebhookSubscription)
        .where(WebhookSubscription.id == subscription_id, WebhookSubscription.cursor == old[0],
               WebhookSubscription.cursor_part == old[1])
        .values(cursor=new[0], cursor_part=new[1], **values))
    return result.rowcount == 1


@dataclass(frozen=True, slots=True)
class _Sent:
    """One attempt of a batch: the event, its attempt number, the answer and when it came."""

    pending: _Pending
    attempt: int
    answer: egress.Answer
    at: dt.datetime


def _send_batch(poster: egress.Poster, url: str, batch: list[_Pending], secrets: list[str], first_attempt: int,
                config: DeliveryConfig, clock: Clock) -> list[_Sent]:
    """Send ``batch`` in order, each once its predecessor was answered 2xx; stop at the first failure or after
    :data:`BATCH_SECONDS`. Returns the attempts made (all answered 2xx but perhaps the last)."""
    target = _checked(url, config)
    if isinstance(target, egress.Answer):
        return [_Sent(batch[0], first_attempt, target, clock.now())]
    sent: list[_Sent] = []
    started = time.monotonic()
    for pending in batch:
        event = pending.event
        answer = _send(poster, target, event.id, body_of(event.as_cloudevent()), secrets, clock)
        sent.append(_Sent(pending, first_attempt if not sent else 1, answer, clock.now()))
        if not answer.ok or time.monotonic() - started >= BATCH_SECONDS:
            break
    return sent


def deliver(session_factory: sessionmaker[Session], subscription_id: int, *, config: DeliveryConfig,
            clock: Clock) -> int:
    """The ``deliver_webhook`` job: send the subscription's events after its cursor, in order, in batches,
    until it is caught up, an event fails (its retry is scheduled, or the subscription paused), or the run's
    share (:data:`EVENTS_PER_RUN`, :data:`RUN_SECONDS`) is used. Idempotent; returns the events delivered."""
    delivered = 0
    started = time.monotonic()
    with _poster(config) as poster:
        _send_pings(session_factory, subscription_id, poster=poster, config=config, clock=clock)
        while delivered < EVENTS_PER_RUN and time.monotonic() - started < RUN_SECONDS:
            with session_factory() as session:
                begin_write(session)
                sub = session.get(WebhookSubscription, subscription_id)
                now = clock.now()
                if sub is None or sub.status != hooks.ACTIVE or (sub.next_attempt_at and sub.next_attempt_at > now):
                    return delivered
                old = (sub.cursor, sub.cursor_part)
                batch, cursor = _next_events(session, sub, min(EVENTS_PER_BATCH, EVENTS_PER_RUN - delivered))
                if not batch:
                    if cursor > sub.cursor:
                        _move_cursor(session, subscription_id, old, (cursor, 0))
                    session.commit()
                    return delivered
                url, first_attempt, secrets = sub.url, sub.failed_attempts + 1, signing_secrets(sub, now)
                session.rollback()
            sent = _send_batch(poster, url, batch, secrets, first_attempt, config, clock)
            ok = [s for s in sent if s.answer.ok]
            with session_factory() as session:
                begin_write(session)
                session.add_all([_delivery_row(subscription_id, s.pending.event.id, s.pending.event.type, s.attempt,
                                               s.answer, s.at) for s in sent])
                if ok:
                    moved = (ok[-1].pending.cursor, ok[-1].pending.part)
                    if _move_cursor(session, subscription_id, old, moved, failing_since=None, failed_attempts=0,
                                    next_attempt_at=None, last_error=None):
                        delivered += len(ok)
                        old = moved
                if len(ok) < len(sent):
                    failed = sent[-1]
                    _failed(session, subscription_id, old, failed.pending.event, failed.answer, config, failed.at)
                session.commit()
            if len(ok) < len(sent):
                return delivered
    return delivered


def _failed(session: Session, subscription_id: int, old: tuple[int, int], event: catalogue.Event,
            answer: egress.Answer, config: DeliveryConfig, now: dt.datetime) -> None:
    """Schedule the failed event's retry, or pause the subscription once it has failed for ``retry_for``."""
    sub = session.get(WebhookSubscription, subscription_id, with_for_update=True)
    if sub is None or (sub.cursor, sub.cursor_part) != old or sub.status != hooks.ACTIVE:
        return  # another run moved on (or it was paused, removed) meanwhile: its outcome counts
    error = (answer.error or f"answered {answer.status}")[:900]
    sub.failing_since = sub.failing_since or now
    sub.failed_attempts += 1
    sub.last_error = error
    give_up_at = sub.failing_since + dt.timedelta(seconds=config.retry_for)
    if now >= give_up_at:
        sub.status = hooks.PAUSED
        sub.paused_at = now
        sub.next_attempt_at = None
        sub.paused_reason = (f"event {event.id} ({event.type}) undelivered after {sub.failed_attempts} attempts "
                             f"over {config.retry_for:g}s: {error}")[:1000]
        audit.append(session, actor="system", action="webhook.paused", subject=f"webhook/{sub.id}",
                     tenant=sub.tenant, details={"event_id": event.id, "attempts": sub.failed_attempts,
                                                 "reason": error})
        return
    delay = hooks.retry_delay(sub.failed_attempts, config.backoff_base, config.backoff_max)
    # The last attempt is made when the time is up, so a receiver back just then is not paused.
    sub.next_attempt_at = min(now + dt.timedelta(seconds=delay), give_up_at)


# --- noticing work -------------------------------------------------------------------------------


def arm(session: Session, subscription_id: int, tenant: str, now: dt.datetime) -> None:
    """Queue the subscription's delivery job unless it is queued or running already (in the caller's
    transaction). The job keeps one key for ever: a finished one is queued again."""
    key = job_key(JobKind.DELIVER_WEBHOOK.value, subscription_id)
    revived = session.execute(
        update(Job).where(Job.idempotency_key == key, Job.state.in_([SUCCEEDED, DEAD]))
        .values(state=QUEUED, attempts=0, run_after=now, last_error=None, finished_at=None, lease_expires_at=None,
                locked_by=None))
    if revived.rowcount == 0:
        enqueue_job(session, JobKind.DELIVER_WEBHOOK, {"subscription_id": subscription_id}, subscription_id,
                    tenant=tenant, run_after=now)


def arm_due(session: Session, *, clock: Clock) -> int:
    """Queue the job of every active subscription with events to read whose retry (if any) is due; commits.

    Returns:
        How many subscriptions' jobs were looked at.
    """
    begin_write(session)
    now = clock.now()
    newest = head(session)
    sub = WebhookSubscription
    # Subscriptions whose tenant has no catalogue event after their cursor: straight to the head.
    something = (exists().where(AuditEvent.id > sub.cursor, AuditEvent.id <= newest,
                                AuditEvent.action.in_(sorted(catalogue.ACTIONS)),
                                or_(AuditEvent.tenant == sub.tenant, AuditEvent.tenant.is_(None)))
                 .correlate(sub))
    session.execute(update(sub).where(sub.status == hooks.ACTIVE, sub.cursor < newest, sub.cursor_part == 0,
                                      ~something).values(cursor=newest).execution_options(synchronize_session=False))
    due = session.execute(
        select(sub.id, sub.tenant).where(sub.status == hooks.ACTIVE,
                                         or_(sub.cursor < newest, sub.cursor_part > 0),
                                         or_(sub.next_attempt_at.is_(None), sub.next_attempt_at <= now))
        .order_by(sub.id).limit(10_000)).all()
    # A ping queued while its subscription's job was past its ping phase waits for this tick.
    pinged = session.execute(
        select(sub.id, sub.tenant).where(exists().where(WebhookDelivery.subscription_id == sub.id,
                                                        WebhookDelivery.pending_event.is_not(None)))
        .order_by(sub.id).limit(10_000)).all()
    due = sorted(set(due) | set(pinged))
    for subscription_id, tenant in due:
        arm(session, subscription_id, tenant, now)
    session.commit()
    return len(due)

