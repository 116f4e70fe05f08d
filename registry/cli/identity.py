"""The ``modelreg`` command: whoami, tenants, principals, roles and tokens."""

from __future__ import annotations

from typing import Optional

import typer

from registry.cli._base import JsonOpt, TokenOpt, UrlOpt, _client, _emit, app, principal_app, tenant_app


@app.command()
def whoami(url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Show who the token belongs to and its roles."""
    with _client(url, token) as client:
        me = client.whoami()
    roles = ", ".join(f"{t}:{r['role']}{'/' + r['capacity'] if r['capacity'] else ''}"
                      for t, rs in me["roles"].items() for r in rs)
    _emit(me, as_json, f"{me['name']}{' (admin)' if me['is_admin'] else ''} {roles}".strip())


@tenant_app.command("create")
def tenant_create(name: str, url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    with _client(url, token) as client:
        created = client.create_tenant(name)
    _emit(created, as_json, f"created tenant {created['name']}")


@tenant_app.command("list")
def tenant_list(url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    with _client(url, token) as client:
        tenants = client.tenants()
    _emit(tenants, as_json, [t["name"] for t in tenants])


@principal_app.command("create")
def principal_create(
    name: str, admin: bool = typer.Option(False, "--admin"), url: str = UrlOpt, token: str = TokenOpt,
    as_json: bool = JsonOpt,
) -> None:
    with _client(url, token) as client:
        created = client.create_principal(name, admin=admin)
    _emit(created, as_json, f"created principal {created['name']}")


@principal_app.command("grant")
def principal_grant(
    name: str,
    tenant: str = typer.Option(..., "--tenant"),
    role: str = typer.Option(..., "--role", help="submitter, approver, auditor, node or admin"),
    capacity: str = typer.Option("", "--capacity", help="for approvers: security, legal, ml..."),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    with _client(url, token) as client:
        result = client.grant_role(name, tenant, role, capacity)
    _emit(result, as_json, f"granted {role}{'/' + capacity if capacity else ''} in {tenant} to {name}")


@principal_app.command("token")
def principal_token(
    name: str,
    days: Optional[int] = typer.Option(90, "--days", help="expiry in days"),
    description: str = typer.Option("", "--description"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Issue a token for NAME; the secret is printed once."""
    with _client(url, token) as client:
        issued = client.issue_token(name, description=description, expires_in_days=days)
    _emit(issued, as_json, issued["token"])
