"""The ``modelreg`` command: the app, its sub-commands' groups, shared options and output helpers.

Client commands talk to a registry over HTTP (``--url``/``MODELREG_URL``, ``--token``/``MODELREG_TOKEN``, or
``--token-file``/``MODELREG_TOKEN_FILE`` for a rotated token file);
operator commands (``audit verify``, ``migrate``, ``scan``) work locally. ``serve`` and ``worker``
load the API app factory and the worker runner through the ``modelreg.components`` entry points,
so this package never imports ``api`` or ``workers``. Every command takes ``--json``; a failure prints one
readable line to stderr and exits non-zero (1 for errors, 2 for usage).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Optional

import typer

from registry.domain.errors import RegistryError
from registry.domain.text import printable

app = typer.Typer(
    name="modelreg",
    help="Model supply-chain registry: mirror, hash, sign, scan, approve and serve model weights.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
tenant_app = typer.Typer(help="Tenants (administrators).", no_args_is_help=True)
principal_app = typer.Typer(help="Principals, roles and tokens (administrators).", no_args_is_help=True)
node_app = typer.Typer(help="Serving nodes by Kubernetes service account (administrators).", no_args_is_help=True)
audit_app = typer.Typer(help="The audit log.", no_args_is_help=True)
version_app = typer.Typer(help="Model versions.", no_args_is_help=True)
keys_app = typer.Typer(help="Signing keys.", no_args_is_help=True)
policy_app = typer.Typer(help="Release policies.", no_args_is_help=True)
alias_app = typer.Typer(help="Aliases of a model (prod, canary...).", no_args_is_help=True)
evalset_app = typer.Typer(help="Eval sets: JSONL cases that suites score models on.", no_args_is_help=True)
app.add_typer(tenant_app, name="tenant")
app.add_typer(principal_app, name="principal")
app.add_typer(node_app, name="node")
app.add_typer(audit_app, name="audit")
app.add_typer(version_app, name="version")
app.add_typer(keys_app, name="keys")
app.add_typer(policy_app, name="policy")
app.add_typer(alias_app, name="alias")
app.add_typer(evalset_app, name="evalset")
approval_app = typer.Typer(help="Your approvals of a version.", no_args_is_help=True)
app.add_typer(approval_app, name="approval")

UrlOpt = typer.Option(None, "--url", envvar="MODELREG_URL", help="Registry URL.")
TokenOpt = typer.Option(None, "--token", envvar="MODELREG_TOKEN", help="API token.")
TokenFileOpt = typer.Option(
    None, "--token-file", envvar="MODELREG_TOKEN_FILE",
    help="Read the token from this file on each request (a pod's projected service-account token, rotated "
         "by the kubelet); wins over --token.")
JsonOpt = typer.Option(False, "--json", help="Print JSON.")


class CliError(RegistryError):
    code = "cli"


def _client(url: Optional[str], token: Optional[str], token_file: Optional[str] = None):
    from registry.client.api import RegistryApi
    from registry.client.token_file import token_source

    if not url:
        raise CliError("no registry URL: pass --url or set MODELREG_URL (e.g. http://127.0.0.1:8080)")
    if not token and not token_file and not os.environ.get("MODELREG_TOKEN_FILE"):
        from registry.client.logins import stored_token

        token = stored_token(url)  # what `modelreg login` kept for this registry, while it lasts
    return RegistryApi(url, token_source(token, token_file))


def _say(*lines: str, err: bool = False) -> None:
    """Print lines for a person, each with its control and bidirectional characters escaped visibly.

    What the CLI prints comes from a server, an upstream or a scanned file: a value must not drive the
    terminal (ESC), reorder what is read (U+202E) or forge a line ("\\n"), so lines are passed apart.
    """
    typer.echo("\n".join(printable(line) for line in lines), err=err)


def _emit(data: Any, as_json: bool, human: str | list[str] | None = None) -> None:
    """Print ``data`` as JSON (which escapes every control and non-ASCII character), or as ``human`` lines."""
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    elif human is None:
        typer.echo(json.dumps(data, indent=2, default=str))
    else:
        _say(*([human] if isinstance(human, str) else human))


def _seg(value: str) -> str:
    """One URL path segment: a name can never add a segment (``../tenants``) to the path it goes in."""
    from urllib.parse import quote

    return quote(value, safe="")


def _split_model(model: str) -> tuple[str, str]:
    from registry.domain.errors import InvalidRefError
    from registry.domain.refs import parse_model

    try:
        ref = parse_model(model)
    except InvalidRefError as exc:
        raise CliError(exc.message) from None
    return ref.tenant, ref.name


_SIZE_RE = re.compile(r"\A([0-9]+)([KMGT]i?)?B?\Z", re.IGNORECASE)


def parse_size(text: str | None) -> int | None:
    """``10G`` -> bytes (K, M, G, T are powers of 1024)."""
    if text is None or text == "":
        return None
    match = _SIZE_RE.match(text.strip())
    if match is None:
        raise CliError(f"not a size: {text!r} (use bytes, or 500M, 50G...)")
    unit = (match.group(2) or "")[:1].upper()
    return int(match.group(1)) * 1024 ** " KMGT".index(unit or " ")
