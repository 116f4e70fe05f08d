"""The ``modelreg`` command.

Client commands talk to a registry over HTTP (``--url``/``MODELREG_URL``, ``--token``/``MODELREG_TOKEN``);
operator commands (``audit verify``, ``migrate``, ``scan``) work locally. ``serve`` and ``worker``
load the API app factory and the worker runner through the ``modelreg.components`` entry points,
so this package never imports ``api`` or ``workers``. Every command takes ``--json``; a failure prints one
readable line to stderr and exits non-zero (1 for errors, 2 for usage).

One module per area registers its commands on the one ``app`` (``_base``): ``identity``, ``versions``,
``releases``, ``approvals``, ``evals``, ``operations``, ``quotas`` (quotas, retention, usage), ``fetch``
(serving nodes), ``provenance`` and ``provenance_export`` (auditors), ``webhooks`` (tenant admins), ``witness``
(a log witness an auditor runs).
"""

from __future__ import annotations

import sys

import typer
from click.exceptions import ClickException

from registry.cli import (  # noqa: F401 (commands)
    admission,
    approvals,
    cluster,
    evals,
    fetch,
    identity,
    login,
    operations,
    provenance,
    provenance_export,
    quotas,
    releases,
    versions,
    webhooks,
    witness,
)
from registry.cli._base import _say, app
from registry.domain.errors import RegistryError

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> int:
    try:
        # Without standalone mode click returns a command's exit code instead of raising it.
        code = app(args=argv, prog_name="modelreg", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 130
    except ClickException as exc:
        # Usage errors (unknown command, missing argument, bad option value): one line, exit 2.
        _say(f"error: {' '.join(exc.format_message().split())}", err=True)
        return 2
    except RegistryError as exc:
        _say(f"error: {' '.join(str(exc).split())}", err=True)
        return 1
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        _say(f"error: {exc}", err=True)
        return 1
    return code if isinstance(code, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
