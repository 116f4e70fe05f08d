"""The ``modelreg`` command.

Client commands talk to a registry over HTTP (``--url``/``MODELREG_URL``, ``--token``/``MODELREG_TOKEN``);
operator commands (``audit verify``, ``migrate``, ``scan``) work locally. ``serve`` and ``worker``
load the API app factory and the worker runner through the ``modelreg.components`` entry points,
so this package never imports ``api`` or ``workers``. Every command takes ``--json``; a failure prints one
readable line to stderr and exits non-zero (1 for errors, 2 for usage).
"""

from __future__ import annotations

import json
import os
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Optional

import click
import typer

from registry.domain.errors import RegistryError

app = typer.Typer(
    name="modelreg",
    help="Model supply-chain registry: mirror, hash, sign, scan, approve and serve model weights.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
tenant_app = typer.Typer(help="Tenants (administrators).", no_args_is_help=True)
principal_app = typer.Typer(help="Principals, roles and tokens (administrators).", no_args_is_help=True)
audit_app = typer.Typer(help="The audit log.", no_args_is_help=True)
version_app = typer.Typer(help="Model versions.", no_args_is_help=True)
keys_app = typer.Typer(help="Signing keys.", no_args_is_help=True)
app.add_typer(tenant_app, name="tenant")
app.add_typer(principal_app, name="principal")
app.add_typer(audit_app, name="audit")
app.add_typer(version_app, name="version")
app.add_typer(keys_app, name="keys")

UrlOpt = typer.Option(None, "--url", envvar="MODELREG_URL", help="Registry URL.")
TokenOpt = typer.Option(None, "--token", envvar="MODELREG_TOKEN", help="API token.")
JsonOpt = typer.Option(False, "--json", help="Print JSON.")


class CliError(RegistryError):
    code = "cli"


def _client(url: Optional[str], token: Optional[str]):
    from registry.client.http import RegistryClient

    if not url:
        raise CliError("no registry URL: pass --url or set MODELREG_URL (e.g. http://127.0.0.1:8080)")
    return RegistryClient(url, token)


def _emit(data: Any, as_json: bool, human: str | None = None) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        typer.echo(human if human is not None else json.dumps(data, indent=2, default=str))


def _split_model(model: str) -> tuple[str, str]:
    tenant, sep, name = model.partition("/")
    if not sep or not tenant or not name or "/" in name:
        raise CliError(f"model must be TENANT/NAME, got {model!r}")
    return tenant, name


# --- identity --------------------------------------------------------------------------------


@app.command()
def whoami(url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Show who the token belongs to and its roles."""
    with _client(url, token) as client:
        me = client.get("/v1/whoami")
    roles = ", ".join(f"{t}:{r['role']}{'/' + r['capacity'] if r['capacity'] else ''}"
                      for t, rs in me["roles"].items() for r in rs)
    _emit(me, as_json, f"{me['name']}{' (admin)' if me['is_admin'] else ''} {roles}".strip())


@tenant_app.command("create")
def tenant_create(name: str, url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    with _client(url, token) as client:
        created = client.post("/v1/tenants", json={"name": name})
    _emit(created, as_json, f"created tenant {created['name']}")


@tenant_app.command("list")
def tenant_list(url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    with _client(url, token) as client:
        tenants = client.get("/v1/tenants")
    _emit(tenants, as_json, "\n".join(t["name"] for t in tenants))


@principal_app.command("create")
def principal_create(
    name: str, admin: bool = typer.Option(False, "--admin"), url: str = UrlOpt, token: str = TokenOpt,
    as_json: bool = JsonOpt,
) -> None:
    with _client(url, token) as client:
        created = client.post("/v1/principals", json={"name": name, "is_admin": admin})
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
        result = client.post(f"/v1/principals/{name}/roles",
                             json={"tenant": tenant, "role": role, "capacity": capacity})
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
        issued = client.post(f"/v1/principals/{name}/tokens",
                             json={"description": description, "expires_in_days": days})
    _emit(issued, as_json, issued["token"])


# --- audit -----------------------------------------------------------------------------------


@audit_app.command("verify")
def audit_verify(
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="embedded registry directory"),
    as_json: bool = JsonOpt,
) -> None:
    """Recompute the audit chain in the database; name the first altered, removed or reordered event."""
    from registry import audit
    from registry.bootstrap import bootstrap, load_settings

    settings = load_settings(**({"data_dir": data_dir} if data_dir else {}))
    container = bootstrap(settings)
    try:
        with container.session_factory() as session:
            report = audit.verify(session)
    finally:
        container.dispose()
    _emit({"ok": True, "events": report.events, "head_hash": report.head_hash}, as_json,
          f"audit log intact: {report.events} events, head {report.head_hash}")


@app.command()
def migrate(data_dir: Optional[Path] = typer.Option(None, "--data-dir")) -> None:
    """Bring the database schema to the newest revision."""
    from registry.bootstrap import bootstrap, load_settings

    settings = load_settings(**({"data_dir": data_dir} if data_dir else {}))
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    bootstrap(settings, migrate=True).dispose()
    typer.echo("database schema is up to date")


# --- processes -------------------------------------------------------------------------------


def _component(name: str) -> Any:
    found = [ep for ep in entry_points(group="modelreg.components") if ep.name == name]
    if not found:
        raise CliError(f"component {name!r} is not installed (reinstall modelreg: pip install -e .)")
    return found[0].load()


@app.command()
def serve(
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="state directory (default ./.modelreg)"),
    host: Optional[str] = typer.Option(None, "--host"),
    port: Optional[int] = typer.Option(None, "--port"),
    workers: Optional[int] = typer.Option(None, "--workers", help="worker threads in this process"),
) -> None:
    """Run the API and N worker threads in one process (the embedded default: SQLite and local blobs)."""
    import threading

    import uvicorn

    from registry.bootstrap import bootstrap, ensure_initial_admin, load_settings, prepare_embedded

    overrides: dict[str, Any] = {}
    for key, value in (("data_dir", data_dir), ("host", host), ("port", port), ("workers", workers)):
        if value is not None:
            overrides[key] = value
    settings = load_settings(**overrides)
    prepare_embedded(settings)
    if settings.public_url is None:
        settings.public_url = f"http://{settings.host}:{settings.port}"
    container = bootstrap(settings, migrate=True)
    first = ensure_initial_admin(container)
    if first.created_admin:
        typer.echo(f"created tenant 'default' and principal 'admin'; admin token in {first.admin_token_file}")
    elif first.admin_token_file:
        typer.echo(f"admin token in {first.admin_token_file}")
    create_app = _component("api")
    start_workers = _component("workers")
    stop = threading.Event()
    threads = start_workers(container, settings.workers, stop)
    typer.echo(f"modelreg serving on {settings.public_url} with {len(threads)} worker threads")
    try:
        uvicorn.run(create_app(container), host=settings.host, port=settings.port, log_level="warning")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        container.dispose()


@app.command()
def worker(concurrency: int = typer.Option(1, "--concurrency", min=1, help="worker threads")) -> None:
    """Run background jobs (mirroring, sealing, scanning) until SIGTERM or SIGINT."""
    from registry.bootstrap import bootstrap, load_settings

    settings = load_settings()
    container = bootstrap(settings)
    try:
        _component("worker-process")(container, concurrency)
    finally:
        container.dispose()


def main(argv: list[str] | None = None) -> int:
    try:
        app(args=argv, prog_name="modelreg", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        typer.echo("aborted", err=True)
        return 130
    except click.ClickException as exc:
        typer.echo(f"error: {exc.format_message()}", err=True)
        return 2
    except RegistryError as exc:
        typer.echo(f"error: {exc}", err=True)
        return 1
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        typer.echo(f"error: {exc}", err=True)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
