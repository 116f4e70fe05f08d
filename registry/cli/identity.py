"""The ``modelreg`` command: whoami, tenants, principals, roles, tokens and node bindings."""

from __future__ import annotations

from typing import Optional

import typer

from registry.cli._base import (
    CliError,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    _client,
    _emit,
    app,
    node_app,
    principal_app,
    tenant_app,
)


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


@tenant_app.command("anonymous-pull")
def tenant_anonymous_pull(
    name: str = typer.Argument(..., metavar="TENANT"),
    setting: str = typer.Argument(..., metavar="on|off"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Let callers without credentials pull TENANT's released versions through /v2 (on), or stop them (off)."""
    if setting not in ("on", "off"):
        raise CliError(f"anonymous-pull is on or off, not {setting!r}")
    with _client(url, token) as client:
        tenant = client.set_oci_anonymous_pull(name, setting == "on")
    _emit(tenant, as_json, f"anonymous pull through /v2 is {'on' if tenant['oci_anonymous_pull'] else 'off'} "
                           f"for tenant {tenant['name']}")


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


# --- incident response: revoke roles and tokens, disable a principal ----------------------------------


@principal_app.command("revoke")
def principal_revoke(
    name: str,
    tenant: str = typer.Option(..., "--tenant"),
    role: str = typer.Option(..., "--role", help="submitter, approver, auditor, node or admin"),
    capacity: str = typer.Option("", "--capacity", help="for approvers: the capacity it was granted with"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Take a role back from NAME (the counterpart of ``principal grant``)."""
    with _client(url, token) as client:
        client.revoke_role(name, tenant, role, capacity)
    _emit({"principal": name, "tenant": tenant, "role": role, "capacity": capacity, "revoked": True}, as_json,
          f"revoked {role}{'/' + capacity if capacity else ''} in {tenant} from {name}")


@principal_app.command("tokens")
def principal_tokens(name: str, url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """List NAME's tokens (id, prefix, state); never their secrets."""
    with _client(url, token) as client:
        tokens = client.tokens(name)

    def state(t: dict) -> str:
        return f"revoked {t['revoked_at']}" if t["revoked_at"] else f"expires {t['expires_at'] or 'never'}"

    _emit(tokens, as_json, [f"{t['id']} {t['prefix']}... {state(t)} {t['description']}".rstrip() for t in tokens]
          or [f"{name} holds no tokens"])


@principal_app.command("revoke-token")
def principal_revoke_token(token_id: int = typer.Argument(..., min=1, help="the id (see `principal tokens`)"),
                           url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Revoke a token: refused from the next request on; the console sessions opened with it end."""
    with _client(url, token) as client:
        client.revoke_token(token_id)
    _emit({"token_id": token_id, "revoked": True}, as_json, f"revoked token {token_id}")


@principal_app.command("disable")
def principal_disable(name: str, url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Disable NAME: every token of theirs is refused from the next request on; their console sessions end."""
    with _client(url, token) as client:
        result = client.set_disabled(name, True)
    _emit(result, as_json, f"disabled principal {name}")


@principal_app.command("enable")
def principal_enable(name: str, url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Enable NAME again: their unrevoked tokens work again (ended console sessions stay ended)."""
    with _client(url, token) as client:
        result = client.set_disabled(name, False)
    _emit(result, as_json, f"enabled principal {name}")


# --- serving nodes by Kubernetes service account ------------------------------------------------------

_IssuerOpt = typer.Option(..., "--issuer", help="the trusted issuer's URL (the tokens' iss)")
_NamespaceOpt = typer.Option(..., "--namespace", help="the service account's namespace")
_AccountOpt = typer.Option(..., "--service-account", help="the service account's name")


@node_app.command("bind")
def node_bind(issuer: str = _IssuerOpt, namespace: str = _NamespaceOpt, service_account: str = _AccountOpt,
              tenant: str = typer.Option(..., "--tenant"),
              role: str = typer.Option("node", "--role", help="node (fetch TENANT's releases) or admission (the "
                                                              "admission webhook: ask admission reviews)"),
              url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Let pods of NAMESPACE/SERVICE-ACCOUNT fetch TENANT's releases with their projected token (--role admission:
    let the admission webhook running as it ask admission reviews)."""
    if role not in ("node", "admission"):
        raise CliError(f"--role {role!r}: node or admission")
    with _client(url, token) as client:
        bound = client.bind_node(issuer=issuer, namespace=namespace, service_account=service_account, tenant=tenant,
                                 role=role)
    _emit(bound, as_json, f"bound {namespace}/{service_account} of {issuer} to tenant {tenant} "
                          f"as {bound['principal']} (role {bound.get('role', role)})")


@node_app.command("unbind")
def node_unbind(issuer: str = _IssuerOpt, namespace: str = _NamespaceOpt, service_account: str = _AccountOpt,
                tenant: str = typer.Option(..., "--tenant"), url: str = UrlOpt, token: str = TokenOpt,
                as_json: bool = JsonOpt) -> None:
    """Remove a binding: the service account's tokens are refused in TENANT from the next request on."""
    with _client(url, token) as client:
        client.unbind_node(issuer=issuer, namespace=namespace, service_account=service_account, tenant=tenant)
    _emit({"issuer": issuer, "namespace": namespace, "service_account": service_account, "tenant": tenant,
           "unbound": True}, as_json, f"unbound {namespace}/{service_account} of {issuer} from tenant {tenant}")


@node_app.command("bindings")
def node_bindings(tenant: Optional[str] = typer.Option(None, "--tenant", help="only this tenant's"),
                  url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """List the service accounts bound as serving nodes or admission webhooks."""
    with _client(url, token) as client:
        bindings = client.node_bindings(tenant)
    _emit(bindings, as_json, [f"{b['tenant']} {b['namespace']}/{b['service_account']} {b['issuer']} "
                              f"({b['principal']}, role {b.get('role', 'node')})" for b in bindings]
          or ["no node bindings"])
