"""The ``modelreg webhook`` commands: tenant admins' subscriptions to the registry's events.

``webhook add|list|show|remove|deliveries|redeliver|test|rotate-secret``, all through the API
(see ``docs/webhooks.md``).
"""

from __future__ import annotations

import time
from typing import Any, Optional

import typer

from registry.cli._base import JsonOpt, TokenOpt, UrlOpt, _client, _emit, app

webhook_app = typer.Typer(help="Webhooks: events POSTed to your URL (tenant admins).", no_args_is_help=True)
app.add_typer(webhook_app, name="webhook")

#: How often ``webhook test`` asks whether its ping was sent.
POLL_SECONDS = 0.5


def _line(w: dict[str, Any]) -> str:
    state = w["state"] if w["state"] == "active" else f"PAUSED ({w['paused_reason']})"
    failing = f", failing since {w['failing_since']}: {w['last_error']}" if w.get("failing_since") else ""
    glob = f" models {w['model_glob']}" if w.get("model_glob") else ""
    return f"{w['id']}  {w['tenant']}  {w['url']}  [{', '.join(w['types'])}]{glob}  {state}{failing}"


@webhook_app.command("add")
def webhook_add(
    tenant: str = typer.Option(..., "--tenant"),
    target: str = typer.Argument(..., metavar="URL", help="http(s) URL the events are POSTed to"),
    types: list[str] = typer.Option(..., "--type", help="event type (version.approved...), repeatable; * for all"),
    model_glob: Optional[str] = typer.Option(None, "--models", help="only events about models matching this glob"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Subscribe URL to TENANT's events from now on; prints the signing secret, shown this once."""
    with _client(url, token) as client:
        w = client.add_webhook({"tenant": tenant, "url": target, "types": types, "model_glob": model_glob})
    _emit(w, as_json, [_line(w), f"secret (shown once): {w['secret']}"])


@webhook_app.command("list")
def webhook_list(tenant: Optional[str] = typer.Option(None, "--tenant"), url: str = UrlOpt, token: str = TokenOpt,
                 as_json: bool = JsonOpt) -> None:
    """The webhooks you manage; a paused one says why."""
    with _client(url, token) as client:
        found = client.webhooks(tenant)
    _emit(found, as_json, [_line(w) for w in found] or ["no webhooks"])


@webhook_app.command("show")
def webhook_show(webhook_id: int = typer.Argument(..., min=1), url: str = UrlOpt, token: str = TokenOpt,
                 as_json: bool = JsonOpt) -> None:
    """One webhook, its cursor and its state."""
    with _client(url, token) as client:
        w = client.webhook(webhook_id)
    _emit(w, as_json, [_line(w), f"cursor: audit id {w['cursor']}"])


@webhook_app.command("remove")
def webhook_remove(webhook_id: int = typer.Argument(..., min=1), url: str = UrlOpt, token: str = TokenOpt,
                   as_json: bool = JsonOpt) -> None:
    """Delete a webhook and its delivery records."""
    with _client(url, token) as client:
        client.remove_webhook(webhook_id)
    _emit({"removed": webhook_id}, as_json, f"removed webhook {webhook_id}")


@webhook_app.command("deliveries")
def webhook_deliveries(webhook_id: int = typer.Argument(..., min=1),
                       limit: int = typer.Option(50, "--limit", min=1, max=500),
                       url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Delivery attempts, newest first."""
    with _client(url, token) as client:
        found = client.webhook_deliveries(webhook_id, limit)
    _emit(found, as_json, [f"{d['at']}  {d['event_id']}  {d['event_type']}  attempt {d['attempt']}  {d['state']}  "
                           f"{d['status_code'] or '-'}  {d['duration_ms']} ms  {d['error'] or ''}".rstrip()
                           for d in found] or ["no deliveries"])


@webhook_app.command("redeliver")
def webhook_redeliver(webhook_id: int = typer.Argument(..., min=1),
                      from_event: Optional[str] = typer.Option(None, "--from", help="event id to send again from"),
                      url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Resume a paused or failing webhook now; with --from, send that event and all after it again."""
    with _client(url, token) as client:
        w = client.redeliver_webhook(webhook_id, from_event)
    _emit(w, as_json, _line(w))


@webhook_app.command("test")
def webhook_test(webhook_id: int = typer.Argument(..., min=1),
                 wait: float = typer.Option(60.0, "--wait", min=0,
                                            help="seconds to wait for the workers to send it (0: print the "
                                                 "pending delivery and return)"),
                 url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Queue a dev.modelreg.webhook.test ping (the delivery workers send it) and wait for its answer;
    exits 1 unless the receiver answered 2xx (or, with --wait 0, unless it was queued)."""
    with _client(url, token) as client:
        d = client.test_webhook(webhook_id)
        deadline = time.monotonic() + wait
        while wait and d["state"] == "pending" and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
            d = client.webhook_delivery(webhook_id, d["id"]) or d
    if d["state"] == "pending":
        _emit(d, as_json, f"delivery {d['id']} ({d['event_id']}): pending; read it with "
                          f"`modelreg webhook deliveries {webhook_id}`")
        if wait:
            raise typer.Exit(1)
        return
    _emit(d, as_json, f"{d['event_id']}: {d['status_code'] or '-'} in {d['duration_ms']} ms {d['error'] or ''}")
    if d["state"] != "delivered":
        raise typer.Exit(1)


@webhook_app.command("rotate-secret")
def webhook_rotate(webhook_id: int = typer.Argument(..., min=1),
                   keep_old_hours: float = typer.Option(24.0, "--keep-old-hours", min=0, max=720,
                                                        help="hours the current secret keeps signing too (0: drop)"),
                   url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """A new signing secret (shown once); deliveries carry both signatures while the old one is kept."""
    with _client(url, token) as client:
        w = client.rotate_webhook_secret(webhook_id, keep_old_hours * 3600)
    _emit(w, as_json, [f"new secret (shown once): {w['secret']}",
                       f"old secret valid until: {w['previous_secret_valid_until'] or 'dropped'}"])
