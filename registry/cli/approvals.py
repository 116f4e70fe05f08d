"""The ``modelreg`` command: approvals, a version's status and the policy judged on demand."""

from __future__ import annotations

import sys
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
    approval_app,
    policy_app,
)


def _unmet_lines(unmet: list[dict[str, Any]]) -> list[str]:
    return [f"  unmet: {u['code']}: {u['message']}" for u in unmet]


def _status_lines(s: dict[str, Any]) -> list[str]:
    lines = [f"{s['model']}@{s['version']}: {s['state']}"]
    if s.get("decision"):
        d = s["decision"]
        lines.append(f"  policy: {d['outcome']} (bundle {d['bundle_digest'][:12]}, input {d['input_digest'][:12]})")
    lines += _unmet_lines(s["unmet"])
    lines += [f"  met: {u['code']}: {u['message']}" for u in s["met"]]
    for a in s["approvals"]:
        named = f" files {', '.join(a['files'])}" if a["files"] else ""
        comment = f": {a['comment']}" if a["comment"] else ""
        lines.append(f"  {a['decision']} by {a['principal']} as {a['capacity']} at {a['at']}{named}{comment}")
    return lines


def _confirm_leaving(left: list[dict[str, Any]], yes: bool) -> None:
    """Go on only if the decision leaves nothing its capacity could satisfy, or the person says so.

    ``--yes`` says so in a script; on a terminal the person is asked; anything else is refused in one line.
    """
    if not left or yes:
        return
    what = "; ".join(f"{u['code']}: {u['message']}" for u in left)
    if sys.stdin.isatty():
        _say("This approval would leave unmet what it could satisfy:",
             *(f"  {u['code']}: {u['message']}" for u in left))
        if typer.confirm("Approve anyway?", default=False):
            return
        raise typer.Abort()
    raise CliError(f"this approval would leave unmet what it could satisfy: {what}; "
                   "name the files with --file, or pass --yes to approve anyway")


def _decide(decision: str, model: str, number: int, capacity: str, comment: str, files: list[str],
            url: Optional[str], token: Optional[str], as_json: bool, yes: bool = False) -> None:
    body = {"decision": decision, "capacity": capacity, "comment": comment, "files": files}
    with _client(url, token) as client:
        if decision == "approve":
            _confirm_leaving(client.preview_decision(*_split_model(model), number, body)["yours"], yes)
        status = client.decide(*_split_model(model), number, body)
    _emit(status, as_json, _status_lines(status))


@app.command()
def approve(
    model: str = typer.Argument(..., help="TENANT/NAME"),
    number: int = typer.Argument(..., metavar="VERSION"),
    capacity: str = typer.Option(..., "--capacity",
                                 help="the approver capacity you decide in: security, legal, ml..."),
    comment: str = typer.Option("", "--comment", help="why, for the record"),
    files: list[str] = typer.Option([], "--file", help="a suspicious file of the version this approval names "
                                                      "(repeatable)"),
    yes: bool = typer.Option(False, "--yes", help="approve even if this leaves unmet what your capacity "
                                                  "could satisfy (a suspicious file not named with --file)"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Approve a version awaiting approval; it becomes approved when the policy is satisfied.

    Before recording it, the policy is asked what the approval would leave unmet: when that includes what your
    capacity could satisfy (a suspicious file a security approval does not name), the approval is refused
    unless you pass --yes (on a terminal you are asked).
    """
    _decide("approve", model, number, capacity, comment, files, url, token, as_json, yes)


@approval_app.command("add-files")
def approval_add_files(
    model: str = typer.Argument(..., help="TENANT/NAME"),
    number: int = typer.Argument(..., metavar="VERSION"),
    files: list[str] = typer.Option(..., "--file",
                                    help="a suspicious file your approval vouches for (repeatable)"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Add file reviews to your own earlier approval of a version (audited); the policy judges it again."""
    with _client(url, token) as client:
        status = client.add_approval_files(*_split_model(model), number, files)
    _emit(status, as_json, _status_lines(status))


@app.command()
def reject(
    model: str = typer.Argument(..., help="TENANT/NAME"),
    number: int = typer.Argument(..., metavar="VERSION"),
    capacity: str = typer.Option(..., "--capacity", help="the approver capacity you decide in"),
    comment: str = typer.Option("", "--comment", help="why, for the record"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Reject a version awaiting approval: one reject rejects it."""
    _decide("reject", model, number, capacity, comment, [], url, token, as_json)


@app.command()
def status(
    model: str = typer.Argument(..., help="TENANT/NAME"),
    number: int = typer.Argument(..., metavar="VERSION"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """A version's state, what it still needs (unmet requirements), and the approvals so far."""
    with _client(url, token) as client:
        result = client.approval_status(*_split_model(model), number)
    _emit(result, as_json, _status_lines(result))


@policy_app.command("eval")
def policy_eval(
    model: str = typer.Argument(..., help="TENANT/NAME"),
    number: int = typer.Argument(..., metavar="VERSION"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Evaluate the approval policy on a version now: the decision and what is unmet; changes nothing."""
    with _client(url, token) as client:
        result = client.policy(*_split_model(model), number)
    d = result["decision"]
    head = (f"{result['model']}@{result['version']}: {result['state']}; policy says {d['outcome']}"
            f" (bundle {d['bundle_digest'][:12]}, input {d['input_digest'][:12]})")
    _emit(result, as_json, [head, *_unmet_lines(d["unmet"])])
