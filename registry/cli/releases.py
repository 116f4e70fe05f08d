"""The ``modelreg`` command: aliases, promotion, rollback, revocation and the registry's keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from registry import statefile
from registry.cli._base import (
    CliError,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    _client,
    _emit,
    _split_model,
    alias_app,
    app,
    keys_app,
)


def _alias_lines(a: dict[str, Any]) -> list[str]:
    canary = a.get("canary")
    head = f"{a['name']} -> {a['version']}"
    if canary:
        head += f" (canary {canary['version']} for {', '.join(canary['tenants'])})"
    lines = [head]
    for m in a.get("history", []):
        moved = f"{m['from_version'] if m['from_version'] is not None else '-'} -> {m['to_version']}"
        if m["to_canary"]:
            moved += f" (canary {m['to_canary']['version']})"
        why = f": {m['comment']}" if m["comment"] else ""
        lines.append(f"  {m['at']}  {m['action']:8} {moved}  by {m['by']}{why}")
    return lines


@app.command()
def promote(
    model: str = typer.Argument(..., help="TENANT/NAME"),
    alias: str = typer.Argument(..., help="alias to move: prod, canary, staging..."),
    version: int = typer.Argument(..., help="an approved version"),
    canary_version: Optional[int] = typer.Option(None, "--canary-version",
                                                 help="a second version, for a few tenants"),
    canary_tenants: list[str] = typer.Option([], "--canary-tenant",
                                             help="a tenant that gets the canary version (repeatable)"),
    comment: str = typer.Option("", "--comment", help="why"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Point ALIAS of MODEL at VERSION (with an optional canary), if the promotion policy allows."""
    tenant, name = _split_model(model)
    if (canary_version is None) != (not canary_tenants):
        raise CliError("--canary-version and --canary-tenant go together")
    body: dict[str, Any] = {"version": version, "comment": comment}
    if canary_version is not None:
        body["canary"] = {"version": canary_version, "tenants": canary_tenants}
    with _client(url, token) as client:
        moved = client.promote(tenant, name, alias, body)
    _emit(moved, as_json, _alias_lines({**moved, "history": moved["history"][:1]}))


@app.command()
def rollback(
    model: str = typer.Argument(..., help="TENANT/NAME"), alias: str = typer.Argument(...),
    comment: str = typer.Option("", "--comment", help="why"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Move ALIAS back to the version it pointed at before its newest move."""
    tenant, name = _split_model(model)
    with _client(url, token) as client:
        moved = client.rollback(tenant, name, alias, comment)
    _emit(moved, as_json, _alias_lines({**moved, "history": moved["history"][:1]}))


@alias_app.command("list")
def alias_list(
    model: str = typer.Argument(..., help="TENANT/NAME"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Every alias of MODEL, with its history (who, when, from, to, why)."""
    tenant, name = _split_model(model)
    with _client(url, token) as client:
        found = client.aliases(tenant, name)
    _emit(found, as_json, [line for a in found for line in _alias_lines(a)] or ["(no aliases)"])


@app.command()
def revoke(
    model: str = typer.Argument(..., help="TENANT/NAME"), number: int = typer.Argument(..., help="version"),
    reason: str = typer.Option(..., "--reason", help="why it must never be released again"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Revoke a version (administrators and security approvers): aliases pointing at it stop resolving."""
    tenant, name = _split_model(model)
    with _client(url, token) as client:
        version = client.revoke(tenant, name, number, reason)
    _emit(version, as_json, f"{version['model']}@{version['version']}: revoked ({reason})")


@keys_app.command("list")
def keys_list(url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """The registry's public signing keys."""
    with _client(url, token) as client:
        keys = client.keys()
    _emit(keys, as_json, [f"{k['key_id']}  {k['algorithm']}" for k in keys["keys"]])


@keys_app.command("export")
def keys_export(output: Path = typer.Option(Path("registry.pub"), "--output", "-o"),
                log_output: Optional[Path] = typer.Option(
                    None, "--log-output", help="also write the audit log's verifier key (one line) here"),
                url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Write the registry's public key PEM (for `model_signing verify key --public_key`), and print the
    audit log's signed-note verifier key (`<origin>+<hex id>+<base64>`, for `audit verify --checkpoint`)."""
    with _client(url, token) as client:
        keys = client.keys()
    statefile.write_atomic(output, keys["keys"][0]["public_key_pem"].encode(), mode=0o644)
    log = keys.get("log") or {}
    if log_output is not None and log:
        statefile.write_atomic(log_output, (log["verifier_key"] + "\n").encode(), mode=0o644)
    lines = [f"wrote {output}", *([f"log key {log['verifier_key']}"] if log else [])]
    _emit({"written": str(output), "key_id": keys["keys"][0]["key_id"],
           "log_origin": log.get("origin"), "log_verifier_key": log.get("verifier_key")}, as_json, lines)


@keys_app.command("rotate")
def keys_rotate(
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="embedded registry directory"),
    new_key: Optional[Path] = typer.Option(
        None, "--new-key", help="the new private key PEM: used if it exists, else generated there (0600); "
                                "default DATA_DIR/keys/signing-key-<N+1>.pem, where the server finds it"),
    keep_old: bool = typer.Option(False, "--keep-old", help="list root N's keys in root N+1 too (a planned "
                                                            "rotation across servers restarting one by one)"),
    threshold: int = typer.Option(1, "--threshold", min=1, help="signatures root N+2 and releases need"),
    as_json: bool = JsonOpt,
) -> None:
    """Publish trust root N+1 with a new signing key, signed by root N's keys and the new one.

    Works on the registry's database and key files (an operator command, like `audit checkpoint`).
    Nodes walk from root N to N+1; new releases are signed with the new key. A server configured with
    MODELREG_SIGNING_KEY_FILE signs with the new key once it is in DATA_DIR/keys/ or the setting names it.
    """
    import datetime as dt

    from registry.bootstrap import bootstrap, prepare_embedded
    from registry.cli.operations import _local_settings
    from registry.services import trust_roots
    from registry.signing.keys import SigningKey, write_new_key

    settings = _local_settings(data_dir)
    if settings.database_url is None:
        prepare_embedded(settings)
    container = bootstrap(settings)
    expires_in = dt.timedelta(days=settings.trust_root_expiry_days)
    try:
        with container.session_factory() as session:
            current = trust_roots.ensure_root(session, container.keyring.primary, expires_in=expires_in,
                                              clock=container.clock)
            path = new_key or settings.data_dir.resolve() / "keys" / f"signing-key-{current.version + 1}.pem"
            key = SigningKey.from_file(path) if path.exists() else write_new_key(path)
            root = trust_roots.rotate(session, container.keyring, key, keep_old=keep_old, threshold=threshold,
                                      expires_in=expires_in, clock=container.clock)
    finally:
        container.dispose()
    record = {"version": root.version, "key_id": key.key_id, "key_file": str(path),
              "keys": sorted(root.keys), "threshold": root.threshold, "expires": root.expires.isoformat()}
    lines = [f"published trust root {root.version}: new key {key.key_id} in {path}",
             f"  keys {', '.join(k[:16] for k in sorted(root.keys))}; threshold {root.threshold}; "
             f"expires {root.expires.isoformat()}"]
    if settings.signing_key_file is not None and path.resolve().parent != settings.data_dir.resolve() / "keys":
        lines.append(f"  set MODELREG_SIGNING_KEY_FILE={path} and restart the registry to sign with it")
    _emit(record, as_json, lines)
