"""The ``modelreg provenance`` group: auditors' answers about a version's history (commands register on it)."""

from __future__ import annotations

import typer

from registry.cli._base import app

provenance_app = typer.Typer(help="Answer provenance questions (auditors).", no_args_is_help=True)
app.add_typer(provenance_app, name="provenance")
