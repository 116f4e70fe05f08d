"""The ``modelreg`` command: tenants' byte quotas, models' retention rules, and usage per tenant.

``quota set|show``, ``retention set|show|apply``, ``usage``; all through the registry's API.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Optional

import typer

from registry.cli._base import CliError, JsonOpt, TokenOpt, UrlOpt, _client, _emit, _split_model, app, parse_size

quota_app = typer.Typer(help="Byte quotas of tenants (set by administrators).", no_args_is_help=True)
retention_app = typer.Typer(help="Retention rules of models (administrators of the tenant).", no_args_is_help=True)
app.add_typer(quota_app, name="quota")
app.add_typer(retention_app, name="retention")


def _quota_line(q: dict[str, Any]) -> str:
    limit = "no quota" if q["limit"] is None else f"{q['limit']} bytes quota, {q['available']} available"
    return f"{q['tenant']}: {q['used']} bytes used, {limit}"


@quota_app.command("set")
def quota_set(
    tenant: str = typer.Argument(...),
    limit: str = typer.Argument(..., metavar="BYTES", help="the quota: bytes, or 500G, 2T...; `none` removes it"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Set TENANT's byte quota: what its blobs may take, each counted once."""
    if limit.lower() == "none":
        value = None
    else:
        value = parse_size(limit)
    with _client(url, token) as client:
        quota = client.set_quota(tenant, value)
    _emit(quota, as_json, _quota_line(quota))


@quota_app.command("show")
def quota_show(tenant: str = typer.Argument(...), url: str = UrlOpt, token: str = TokenOpt,
               as_json: bool = JsonOpt) -> None:
    """TENANT's quota and the bytes it uses."""
    with _client(url, token) as client:
        quota = client.quota(tenant)
    _emit(quota, as_json, _quota_line(quota))


def _retention_lines(doc: dict[str, Any], deleted: str) -> list[str]:
    rule = doc["rule"]
    if rule is None:
        return [f"{doc['model']}: no retention rule (every version is kept)"]
    within = (f", and those approved within {rule['approved_within_days']} days"
              if rule["approved_within_days"] is not None else "")
    lines = [f"{doc['model']}: keep the last {rule['keep_last']}, the aliased and the unfinished{within}"]
    lines += [f"  keep {k['version']:>6}  ({k['reason']})" for k in doc["kept"]]
    lines.append(f"  {deleted}: {', '.join(str(n) for n in doc['deleted']) or 'none'}")
    return lines


@retention_app.command("set")
def retention_set(
    model: str = typer.Argument(..., help="TENANT/NAME"),
    keep_last: int = typer.Option(..., "--keep-last", min=1, help="keep the newest N versions"),
    approved_within_days: Optional[int] = typer.Option(
        None, "--approved-within-days", min=0, help="also keep versions approved within D days"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Set MODEL's retention rule; nothing is deleted until `retention apply`."""
    tenant, name = _split_model(model)
    with _client(url, token) as client:
        doc = client.set_retention(tenant, name, keep_last, approved_within_days)
    _emit(doc, as_json, _retention_lines(doc, "apply would delete"))


@retention_app.command("show")
def retention_show(model: str = typer.Argument(..., help="TENANT/NAME"), url: str = UrlOpt, token: str = TokenOpt,
                   as_json: bool = JsonOpt) -> None:
    """MODEL's rule, what it keeps and why, and what `retention apply` would delete now."""
    tenant, name = _split_model(model)
    with _client(url, token) as client:
        doc = client.retention(tenant, name)
    _emit(doc, as_json, _retention_lines(doc, "apply would delete"))


@retention_app.command("apply")
def retention_apply(model: str = typer.Argument(..., help="TENANT/NAME"), url: str = UrlOpt, token: str = TokenOpt,
                    as_json: bool = JsonOpt) -> None:
    """Delete the versions MODEL's rule does not keep: their records and audit trail stay, their blobs
    go at the next `modelreg gc` once nothing else uses them."""
    tenant, name = _split_model(model)
    with _client(url, token) as client:
        doc = client.apply_retention(tenant, name)
    _emit(doc, as_json, _retention_lines(doc, "deleted"))


def _time(value: Optional[str], option: str) -> Optional[str]:
    if value is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"{option} is an ISO 8601 time (2026-11-01T00:00:00Z), not {value!r}") from None
    if parsed.tzinfo is None:
        raise CliError(f"{option} needs a time zone (2026-11-01T00:00:00Z)")
    return parsed.isoformat()


@app.command()
def usage(
    tenant: str = typer.Option(..., "--tenant"),
    since: Optional[str] = typer.Option(None, "--since", help="start (ISO 8601; default 30 days before --until)"),
    until: Optional[str] = typer.Option(None, "--until", help="end, excluded (ISO 8601; default now)"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """What TENANT stores, and mirrored, served and spent on evals over a period, by model and version
    (administrators and auditors of the tenant)."""
    with _client(url, token) as client:
        doc = client.usage(tenant, _time(since, "--since"), _time(until, "--until"))
    lines = [f"{doc['tenant']} from {doc['since']} to {doc['until']}",
             f"stored: {doc['stored']['bytes']} bytes"]
    for m in doc["stored"]["models"]:
        lines.append(f"  {m['model']}: {m['bytes']} bytes in {len(m['versions'])} version(s)")
    lines.append(f"mirrored: {doc['mirrored']['bytes']} bytes in {doc['mirrored']['files']} file(s)")
    served = doc["served"]
    lines.append(f"served: {served['manifests']} manifest(s) to {served['principals']} principal(s), "
                 f"{served['bytes']} bytes released")
    lines += [f"eval {e['suite']}: {e['runs']} run(s), {e['duration_ms'] / 1000:.1f} s" for e in doc["evals"]]
    _emit(doc, as_json, lines)
