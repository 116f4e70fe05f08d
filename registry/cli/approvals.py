"""The ``modelreg`` command: approvals, a version's status and the policy judged on demand."""

from __future__ import annotations

from typing import Any, Optional

import typer

from registry.cli._base import JsonOpt, TokenOpt, UrlOpt, _client, _emit, _split_model, app, policy_app


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


def _decide(decision: str, model: str, number: int, capacity: str, comment: str, files: list[str],
            url: Optional[str], token: Optional[str], as_json: bool) -> None:
    with _client(url, token) as client:
        status = client.decide(*_split_model(model), number, {"decision": decision, "capacity": capacity,
                                                              "comment": comment, "files": files})
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
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Approve a version awaiting approval; it becomes approved when the policy is satisfied."""
    _decide("approve", model, number, capacity, comment, files, url, token, as_json)


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
