"""The ``modelreg provenance export`` command: a version's CycloneDX 1.6 ML-BOM or signed SLSA provenance."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

import typer

from registry import statefile
from registry.cli._base import CliError, JsonOpt, TokenOpt, UrlOpt, _client, _emit, _split_model
from registry.cli.provenance import provenance_app
from registry.domain.exports import ExportFormat


def _write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temporary file beside it, then a rename)."""
    statefile.write_atomic(path, data)


@provenance_app.command("export")
def export(
    model: str = typer.Argument(..., help="TENANT/NAME"),
    number: int = typer.Argument(..., metavar="VERSION"),
    fmt: ExportFormat = typer.Option(..., "--format", help="cyclonedx (CycloneDX 1.6 ML-BOM) or slsa "
                                                           "(in-toto SLSA provenance in a DSSE envelope)"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="write the document here "
                                                                       "(default: print it)"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Export a sealed version (auditors): its CycloneDX ML-BOM, or its SLSA provenance signed by the registry
    (verify with the key of `modelreg keys export`)."""
    tenant, name = _split_model(model)
    with _client(url, token) as client:
        data = client.export(tenant, name, number, fmt.value)
    try:
        document = json.loads(data)
    except ValueError:
        raise CliError(f"the registry's {fmt.value} export of {tenant}/{name}@{number} is not JSON") from None
    if output is None:
        # Re-encoded with every control and non-ASCII character escaped: nothing in it drives the terminal.
        typer.echo(json.dumps(document, indent=2))
        return
    _write(output, data)
    record = {"format": fmt.value, "model": f"{tenant}/{name}", "version": number, "path": str(output),
              "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    _emit(record, as_json, f"wrote the {fmt.value} export of {tenant}/{name}@{number} to {output} "
                           f"({len(data)} bytes, sha256 {record['sha256']})")
