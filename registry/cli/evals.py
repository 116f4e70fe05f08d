"""The ``modelreg`` command: a version's eval results and the eval sets (``evals``, ``evalset``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from registry.cli._base import (
    CliError,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    _client,
    _emit,
    _say,
    _split_model,
    app,
    evalset_app,
)


def _metric(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, (int, float)) else str(value)


def _eval_lines(result: dict[str, Any]) -> list[str]:
    lines = [f"{result['version']}: {result['state']}"]
    if not result["evals"]:
        lines.append("  no evals (no suite applies)")
    for e in result["evals"]:
        why = f" ({e['reason']}: {e['error']})" if e.get("reason") else ""
        took = f" in {e['duration_ms'] / 1000:.1f} s" if e.get("duration_ms") is not None else ""
        if e.get("isolated") is False:
            took += ", NOT isolated"
        lines.append(f"  {e['suite']}: {e['status']}{why}, {e['runner']} {e['runner_version']}{took}, "
                     f"{e['cases_failed']} of {e['cases_recorded']} cases failed")
        ran = e.get("ran_on")
        if isinstance(ran, dict):
            lines.append(f"    on base {ran.get('base_model')}@{ran.get('base_version')} "
                         f"(weights sha256:{ran.get('base_weights_digest')})")
        lines += [f"    {name} = {_metric(value)}" for name, value in sorted(e["metrics"].items())]
    return lines


def _case_lines(e: dict[str, Any]) -> list[str]:
    lines = [f"{e['suite']}: {e['status']}"]
    for c in e.get("cases", []):
        mark = {True: "pass", False: "FAIL", None: "-"}.get(c.get("passed"), "?")
        where = "/".join(str(c.get(k)) for k in ("evalset", "id") if c.get(k))
        detail = f": {c['detail']}" if c.get("detail") else ""
        lines.append(f"  {mark:4} {where} [{c.get('category', '')} {c.get('language', '')}]{detail}")
    return lines


@app.command("evals")
def evals_command(
    model: str = typer.Argument(..., help="TENANT/NAME"),
    number: int = typer.Argument(..., metavar="VERSION"),
    suite: Optional[str] = typer.Option(None, "--suite", help="one suite, with every case outcome"),
    log: bool = typer.Option(False, "--log", help="print the suite's runner log (with --suite)"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """A version's eval results: each suite's status, reason and metrics (or one suite's cases or log)."""
    if log and not suite:
        raise CliError("--log needs --suite")
    tenant, name = _split_model(model)
    with _client(url, token) as client:
        if suite and log:
            _say(*client.eval_log(tenant, name, number, suite).decode("utf-8", "replace").splitlines())
            return
        if suite:
            result = client.eval(tenant, name, number, suite)
            _emit(result, as_json, _case_lines(result))
            return
        result = client.evals(tenant, name, number)
    _emit(result, as_json, _eval_lines(result))


def _evalset_line(e: dict[str, Any]) -> str:
    categories = ", ".join(f"{k} {v}" for k, v in e["categories"].items())
    prompts = e.get("prompt_templates") or []
    renders = f", renders prompt templates {', '.join(prompts)}" if prompts else ""
    return f"{e['name']} version {e['number']}: {e['cases']} cases ({categories}){renders}, sha256:{e['digest']}"


@evalset_app.command("add")
def evalset_add(
    name: str = typer.Argument(..., help="the eval set's name (a lowercase slug)"),
    file: Path = typer.Argument(..., help="a JSONL file of cases", exists=True, dir_okay=False, readable=True),
    description: str = typer.Option("", "--description", help="what the set measures"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Add a version of an eval set (administrators); the same bytes again are the same version."""
    from registry.evals.cases import MAX_EVALSET_BYTES

    if file.stat().st_size > MAX_EVALSET_BYTES:
        raise CliError(f"{file} is over the {MAX_EVALSET_BYTES} bytes an eval set may hold")
    with _client(url, token) as client:
        result = client.add_evalset(name, file.read_bytes(), description)
    verb = "added" if result["created"] else "unchanged, already"
    _emit(result, as_json, f"{verb} {_evalset_line(result)}")


@evalset_app.command("list")
def evalset_list(url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """The newest version of every eval set."""
    with _client(url, token) as client:
        result = client.evalsets()
    _emit(result, as_json, [_evalset_line(e) for e in result["evalsets"]] or ["no eval sets"])


@evalset_app.command("show")
def evalset_show(
    name: str = typer.Argument(...),
    version: Optional[int] = typer.Option(None, "--version", help="a version (default: every version)"),
    cases: bool = typer.Option(False, "--cases", help="print the cases (JSONL) of --version"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """An eval set's versions, or one version (with --version), or its cases (with --cases)."""
    if cases and version is None:
        raise CliError("--cases needs --version")
    with _client(url, token) as client:
        if cases:
            _say(*client.evalset_cases(name, version).decode("utf-8", "replace").splitlines())
            return
        if version is not None:
            result = client.evalset(name, version)
            _emit(result, as_json, [_evalset_line(result), f"  languages: {result['languages']}",
                                    f"  added by {result['created_by']} at {result['created_at']}",
                                    f"  {result['description']}"])
            return
        result = client.evalset(name)
    _emit(result, as_json, [_evalset_line(e) for e in result["versions"]])
