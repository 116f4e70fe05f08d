"""``modelreg witness``: run a C2SP tlog-witness for logs an auditor or another team watches (registry/witness.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from registry.cli._base import CliError, _say, app


@app.command("witness")
def witness(
    key: Path = typer.Option(..., "--key", help="The witness's Ed25519 cosigner key file (made by --init)."),
    log: Optional[list[str]] = typer.Option(None, "--log", help="A log it witnesses, ORIGIN=VERIFIER_KEY (repeat)."),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", help="Where the newest accepted checkpoint "
                                                                      "of each log is kept."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8790, "--port", help="Port to listen on."),
    max_connections: int = typer.Option(64, "--max-connections", min=1,
                                        help="Connections served at once; one more is answered 503."),
    request_deadline: float = typer.Option(10.0, "--request-deadline", min=0.1,
                                           help="Seconds one connection may take, from accept to answer."),
    init: Optional[str] = typer.Option(None, "--init", metavar="NAME",
                                       help="Create the key file for a witness named NAME (unless it exists), "
                                            "print its verifier key and exit."),
    as_json: bool = typer.Option(False, "--json", help="Print the verifier key (--init) or the startup "
                                                       "record as one JSON line."),
) -> None:
    """Cosign each log checkpoint that extends the last one it accepted (POST /add-checkpoint)."""
    from registry.domain.errors import RegistryError
    from registry.statefile import create_once
    from registry.tlog.checkpoint import CosignatureSigner
    from registry.tlog.note import parse_signer_key, parse_verifier_key
    from registry.witness import Witness, make_server

    if init is not None:
        skey = create_once(key, CosignatureSigner.generate(init).skey.encode()).decode().strip()
        vkey = parse_signer_key(skey, CosignatureSigner).verifier().vkey
        if as_json:
            typer.echo(json.dumps({"verifier_key": vkey}))
        else:
            _say(vkey)
        return
    if not key.exists():
        raise CliError(f"no key file {key}; make one with --init NAME")
    if state_dir is None or not log:
        raise CliError("name --state-dir and at least one --log ORIGIN=VERIFIER_KEY")
    signer = parse_signer_key(key.read_text().strip(), CosignatureSigner)
    logs = {}
    for item in log:
        origin, sep, vkey = item.partition("=")
        if not sep:
            raise CliError(f"--log {item!r}: write ORIGIN=VERIFIER_KEY")
        try:
            logs[origin] = parse_verifier_key(vkey)
        except RegistryError as err:
            raise CliError(f"--log {origin}: {err}") from None
        if logs[origin].name != origin:
            raise CliError(f"--log {origin}: the key names {logs[origin].name!r}, not the origin")
    state_dir.mkdir(parents=True, exist_ok=True)
    server = make_server(Witness(signer, logs, state_dir), host, port, max_connections=max_connections,
                         deadline=request_deadline)
    listening = f"http://{host}:{server.server_address[1]}"
    if as_json:
        typer.echo(json.dumps({"url": listening, "verifier_key": signer.verifier().vkey, "logs": sorted(logs)}))
    else:
        _say(f"witness {signer.verifier().vkey} on {listening}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
