"""The ``modelreg provenance`` commands: an auditor's questions, each one API call (paged lists followed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import typer

from registry.cli._base import CliError, JsonOpt, TokenOpt, UrlOpt, _client, _emit, _split_model, app

provenance_app = typer.Typer(help="Answer provenance questions (auditors).", no_args_is_help=True)
app.add_typer(provenance_app, name="provenance")

MAX_PAGES = 10_000
"""Most pages one command follows (a server sending cursors without end is stopped)."""


def _split_ref(text: str) -> tuple[str, str, str]:
    """``TENANT/NAME@REF`` (REF: an alias or a version number) as (tenant, name, ref)."""
    from registry.domain.errors import InvalidRefError
    from registry.domain.refs import parse_ref

    try:
        ref = parse_ref(text)
    except InvalidRefError as exc:
        raise CliError(exc.message) from None
    if ref.version is None and ref.alias is None:
        raise CliError(f"{text!r}: name a version or an alias, as TENANT/NAME@3 or TENANT/NAME@prod")
    return ref.tenant, ref.name, str(ref.version) if ref.version is not None else str(ref.alias)


def _all_pages(fetch: Callable[[Optional[str]], dict[str, Any]], key: str) -> dict[str, Any]:
    """Every page of a paged answer, its ``key`` lists joined (the first page's other fields kept)."""
    doc = fetch(None)
    rows = list(doc[key])
    for _ in range(MAX_PAGES):
        if not doc.get("next_cursor"):
            break
        doc = fetch(doc["next_cursor"])
        rows.extend(doc[key])
    return {**doc, key: rows, "next_cursor": None}


def _named(doc: dict[str, Any]) -> str:
    ref = doc["ref"]
    via = f" (alias {ref['alias']})" if ref["alias"] else ""
    canary = ref.get("canary")
    extra = f"; its canary is version {canary['version']} for {', '.join(canary['tenants'])}" if canary else ""
    return f"{doc['model']}@{doc['version']}{via}: {doc['state']}{extra}"


@provenance_app.command("origin")
def origin(ref: str = typer.Argument(..., help="TENANT/NAME@VERSION or TENANT/NAME@ALIAS"),
           url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Where a version came from: upstream, requested and resolved revision, submitter, time."""
    with _client(url, token) as client:
        doc = client.provenance_origin(*_split_ref(ref))
    src = doc["source"]
    _emit(doc, as_json, [_named(doc), f"  source: {src['kind']} {src['repo']}",
                         f"  revision: {doc['requested_revision'] or '(none requested)'} -> {doc['resolved_revision']}",
                         f"  submitted by {doc['submitted_by']} at {doc['submitted_at']}"])


@provenance_app.command("files")
def files(ref: str = typer.Argument(..., help="TENANT/NAME@VERSION or TENANT/NAME@ALIAS"),
          url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """A version's files (path, size, sha256) and the key that signed it."""
    tenant, name, r = _split_ref(ref)
    with _client(url, token) as client:
        doc = _all_pages(lambda c: client.provenance_files(tenant, name, r, cursor=c), "files")
    key = doc["signed_by"]
    signer = f"  signed by {key['key_id']} ({key['algorithm']})" if key else "  not signed (not sealed)"
    _emit(doc, as_json, [_named(doc), signer,
                         *(f"  {f['sha256']}  {f['size']:>12}  {f['path']}" for f in doc["files"])])


@provenance_app.command("scans")
def scan_results(ref: str = typer.Argument(..., help="TENANT/NAME@VERSION or TENANT/NAME@ALIAS"),
                 url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Scan results per file, with scanner names and versions."""
    tenant, name, r = _split_ref(ref)
    with _client(url, token) as client:
        doc = _all_pages(lambda c: client.provenance_scans(tenant, name, r, cursor=c), "files")
    lines = [_named(doc)]
    for f in doc["files"]:
        lines.append(f"  {f['path']}: {f['verdict']}")
        lines += [f"    {s['scanner']} {s['scanner_version']}: {s['verdict']}" for s in f["scans"]]
    _emit(doc, as_json, lines)


@provenance_app.command("evals")
def eval_results(ref: str = typer.Argument(..., help="TENANT/NAME@VERSION or TENANT/NAME@ALIAS"),
                 url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Eval results with suite and runner versions."""
    with _client(url, token) as client:
        doc = client.provenance_evals(*_split_ref(ref))
    _emit(doc, as_json, [_named(doc), *(
        f"  {e['suite']} ({e['suite_version'][:12]}) by {e['runner']} {e['runner_version']}: {e['status']}"
        for e in doc["evals"])])


@provenance_app.command("license")
def license_(ref: str = typer.Argument(..., help="TENANT/NAME@VERSION or TENANT/NAME@ALIAS"),
             url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """The license, where it was detected, and who approved it."""
    with _client(url, token) as client:
        doc = client.provenance_license(*_split_ref(ref))
    approved = ", ".join(f"{a['principal']} ({a['capacity']}, {a['at']})" for a in doc["approved_by"])
    _emit(doc, as_json, [_named(doc), f"  license: {doc['license']}"
                                      f"{' (allow-listed)' if doc['allow_listed'] else ''}",
                         *(f"  found in {f['source']}: {f['raw']!r} -> {f['normalized']}" for f in doc["findings"]),
                         f"  approved by: {approved or _no_license_approval(doc)}"])


def _no_license_approval(doc: dict) -> str:
    if doc["allow_listed"]:
        return "nobody needed to (the license is on the allow-list)"
    return "nobody"


@provenance_app.command("approvals")
def approvals(ref: str = typer.Argument(..., help="TENANT/NAME@VERSION or TENANT/NAME@ALIAS"),
              url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Approvals with capacity and time, and whether separation of duties held."""
    with _client(url, token) as client:
        doc = client.provenance_approvals(*_split_ref(ref))
    sod = doc["separation_of_duties"]
    _emit(doc, as_json, [_named(doc), *(f"  {a['decision']} by {a['principal']} as {a['capacity']} at {a['at']}"
                                        for a in doc["approvals"]),
                         f"  separation of duties: {'held' if sod['held'] else 'NOT held'}",
                         *(f"    {reason}" for reason in sod["reasons"])])


@provenance_app.command("alias")
def alias(model: str = typer.Argument(..., help="TENANT/NAME"), name: str = typer.Argument(..., metavar="ALIAS"),
          at: Optional[str] = typer.Option(None, "--at", help="ISO 8601 time with a zone: what it pointed at then"),
          url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """An alias's history (promotions, canaries, rollbacks: who, when, from, to); --at: its version then."""
    tenant, model_name = _split_model(model)
    with _client(url, token) as client:
        doc = _all_pages(lambda c: client.provenance_alias(tenant, model_name, name, at=at, cursor=c), "moves")
    lines = [f"{doc['model']}@{doc['alias']} -> {doc['version']}"]
    lines += [f"  {m['at']} {m['action']} by {m['by']}: {m['from_version'] or '-'} -> {m['to_version']}"
              f"{' canary ' + str(m['to_canary']['version']) if m['to_canary'] else ''}" for m in doc["moves"]]
    if doc.get("at"):
        lines.append(f"  at {doc['at']['at']}: version {doc['at']['version']}")
    _emit(doc, as_json, lines)


@provenance_app.command("nodes")
def nodes(ref: str = typer.Argument(..., help="TENANT/NAME@VERSION or TENANT/NAME@ALIAS"),
          url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Which principals received a version: release manifests, /hf downloads and OCI pulls (first and last time,
    how many)."""
    tenant, name, r = _split_ref(ref)
    with _client(url, token) as client:
        doc = _all_pages(lambda c: client.provenance_nodes(tenant, name, r, cursor=c), "nodes")
    _emit(doc, as_json, [_named(doc), *(f"  {n['principal']}: {n['count']} manifests, {n.get('hf_downloads', 0)} /hf "
                                        f"downloads, {n.get('oci_pulls', 0)} OCI pulls, from {n['first_at']} to "
                                        f"{n['last_at']}" for n in doc["nodes"])])


def _describe_place(p: dict[str, Any]) -> str:
    place = p["place"]
    if place.get("where") == "pod":
        where = f"pod {place.get('namespace')}/{place.get('pod')} volume {place.get('volume')}"
    elif place.get("where") == "bucket":
        where = f"bucket {place.get('bucket')}/{place.get('prefix') or ''} on {place.get('node')}"
    else:
        where = f"{place.get('path')} on {place.get('node')}"
    stale = " (STALE: its reporter went quiet)" if p["stale"] else ""
    return (f"{where}: {p['program']} as {p['principal']}, since {p['since']}, "
            f"last reported {p['last_reported_at']}{stale}")


@provenance_app.command("running")
def running(ref: str = typer.Argument(..., help="TENANT/NAME@VERSION or TENANT/NAME@ALIAS"),
            by: str = typer.Option("node", "--by", help="group by node, namespace or pod"),
            url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Where a version runs now: every place holding it (node programs, cluster watch, admitted pods), grouped,
    with since when; places whose reporter went quiet are shown stale."""
    if by not in ("node", "namespace", "pod"):
        raise CliError(f"--by {by[:40]!r}: one of node, namespace, pod")
    tenant, name, r = _split_ref(ref)
    pages: list[dict[str, Any]] = []
    with _client(url, token) as client:

        def page(cursor: Optional[str]) -> dict[str, Any]:
            pages.append(client.provenance_running(tenant, name, r, by=by, cursor=cursor))
            return pages[-1]

        doc = _all_pages(page, "places")
    groups: dict[Any, dict[str, Any]] = {}
    for page in pages:
        for g in page["groups"]:
            into = groups.setdefault(g["key"], {**g, "places": []})
            into["since"], into["stale"] = min(into["since"], g["since"]), into["stale"] and g["stale"]
            into["places"].extend(g["places"])
    doc["groups"] = list(groups.values())
    lines = [_named(doc) + (f" (revoked {doc['revocation']['at']})" if doc.get("revocation") else "")]
    for g in doc["groups"]:
        lines.append(f"  {by} {g['key'] if g['key'] is not None else '(not a pod)'}: since {g['since']}"
                     + (" (stale)" if g["stale"] else ""))
        lines.extend(f"    {_describe_place(p)}" for p in g["places"])
    _emit(doc, as_json, lines if doc["places"] else [*lines, "  held nowhere, as far as any node reports"])


@provenance_app.command("revoked-nodes")
def revoked_nodes(tenant: str = typer.Option(..., "--tenant", help="the tenant whose models to look at"),
                  url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Principals whose last received version of a model of the tenant is revoked now."""
    with _client(url, token) as client:
        doc = _all_pages(lambda c: client.provenance_revoked_nodes(tenant, cursor=c), "nodes")
    _emit(doc, as_json, [*(f"{n['principal']}: {n['model']}@{n['version']} (revoked {n['revocation']['at']}), "
                           f"last received {n['last_received_at']}" for n in doc["nodes"]),
                         *(f"still held: {p['model']}@{p['version']} at {_describe_place(p)}"
                           for p in doc.get("holding", ()))] or ["none"])


@provenance_app.command("blob")
def blob(digest: str = typer.Argument(..., help="sha256:<64 hex digits>"),
         url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Which versions, of the tenants you audit, hold a blob, and under which path."""
    from registry.domain.files import SHA256_RE

    hex_digest = digest.removeprefix("sha256:")
    if not digest.startswith("sha256:") or not SHA256_RE.match(hex_digest):
        raise CliError(f"{digest[:80]!r}: name a blob as sha256:<64 lower-case hex digits>")
    with _client(url, token) as client:
        doc = _all_pages(lambda c: client.provenance_blob(hex_digest, cursor=c), "versions")
    _emit(doc, as_json, [f"{v['model']}@{v['version']} ({v['state']}): {v['path']}" for v in doc["versions"]]
          or ["no version you audit holds it"])


def _component_digest(client: Any, target: str, component: Optional[str]) -> tuple[str, Optional[str]]:
    """The hex digest (and the component it is of, if named) that ``provenance component`` asks about: given as
    ``sha256:HEX``, or the ``component`` of ``TENANT/NAME@REF``."""
    from registry.domain.files import SHA256_RE

    if target.startswith("sha256:"):
        hex_digest = target.removeprefix("sha256:")
        if not SHA256_RE.match(hex_digest):
            raise CliError(f"{target[:80]!r}: name a component digest as sha256:<64 lower-case hex digits>")
        return hex_digest, component
    if component is None:
        raise CliError(f"{target[:80]!r}: name a digest (sha256:...) or a version and its component, "
                       "as TENANT/NAME@prod weights")
    doc = client.provenance_components(*_split_ref(target))
    digest = next((c["digest"] for c in doc["components"] if c["name"] == component), None)
    if digest is None:
        held = ", ".join(c["name"] for c in doc["components"]) or "none (not sealed)"
        raise CliError(f"{doc['model']}@{doc['version']} has no {component[:40]!r} component; it has: {held}")
    return digest, component


@provenance_app.command("component")
def component(target: str = typer.Argument(..., help="sha256:<digest>, or TENANT/NAME@REF"),
              name: Optional[str] = typer.Argument(None, metavar="[COMPONENT]",
                                                   help="weights, tokenizer, chat_templates, ... (with a ref: "
                                                        "the component whose digest to look for)"),
              url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Which versions, of the tenants you audit, share a release-unit component ("which units share these
    weights"): by its digest, or by a version's component (acme/llm@prod weights)."""
    with _client(url, token) as client:
        hex_digest, named = _component_digest(client, target, name)
        doc = _all_pages(lambda c: client.provenance_component(hex_digest, component=named, cursor=c), "versions")
    _emit(doc, as_json, [f"{v['model']}@{v['version']} ({v['state']}): {v['component']}"
                         f"{'' if v['derived_from'] is None else ', derived from ' + str(v['derived_from'])}"
                         for v in doc["versions"]])


@provenance_app.command("component-history")
def component_history(model: str = typer.Argument(..., help="TENANT/NAME"),
                      alias: str = typer.Argument(..., metavar="ALIAS"),
                      name: str = typer.Argument(..., metavar="COMPONENT",
                                                 help="weights, tokenizer, chat_templates, prompt_templates, ..."),
                      url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """When the component an alias serves changed (each move that changed its digest: when, by whom, from which
    version to which) and who approved the version that brought the change."""
    tenant, model_name = _split_model(model)
    with _client(url, token) as client:
        doc = _all_pages(lambda c: client.provenance_component_history(tenant, model_name, alias, name, cursor=c),
                         "changes")
    now = doc["digest"][:12] if doc["digest"] else "(none)"
    lines = [f"{doc['model']}@{doc['alias']} -> {doc['version']}: {doc['component']} {now}"]
    for c in doc["changes"]:
        lines.append(f"  {c['at']} {c['action']} by {c['by']}: {c['from_version'] or '-'} -> {c['to_version']} "
                     f"({(c['from_digest'] or '(none)')[:12]} -> {(c['to_digest'] or '(none)')[:12]})")
        lines += [f"    {a['decision']} by {a['principal']} as {a['capacity']} at {a['at']}" for a in c["approvals"]]
        if not c["security_approvals"]:
            lines.append(f"    no {doc['security_capacity']} approval")
    if not doc["changes"]:
        lines.append(f"  no move of {doc['alias']} changed its {doc['component']}")
    _emit(doc, as_json, lines)


@provenance_app.command("adapters")
def adapters(target: str = typer.Argument(..., help="sha256:<weights digest>, or TENANT/NAME@REF (its weights)"),
             url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Which adapters, of the tenants you audit, are bound to a base's weights: by the weights component's digest,
    or by a base version or alias (acme/llm@prod)."""
    with _client(url, token) as client:
        hex_digest, _ = _component_digest(client, target, None if target.startswith("sha256:") else "weights")
        doc = _all_pages(lambda c: client.provenance_adapters(hex_digest, cursor=c), "adapters")
    _emit(doc, as_json, [f"{a['model']}@{a['version']} ({a['state']}): bound to {a['base']['model']}@"
                         f"{a['base']['version']} (asked for {a['requested']})" for a in doc["adapters"]]
          or [f"no adapter you audit is bound to weights {doc['digest']}"])


@provenance_app.command("adapter-base")
def adapter_base(ref: str = typer.Argument(..., help="TENANT/NAME@ALIAS or TENANT/NAME@VERSION of an adapter"),
                 at: Optional[str] = typer.Option(None, "--at", help="ISO 8601 time with a zone: of the version "
                                                                     "the alias served then"),
                 url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Which base an adapter (the version an alias serves, now or --at a time) is bound to, its weights digest, and
    the eval results that ran on it."""
    tenant, name, r = _split_ref(ref)
    with _client(url, token) as client:
        doc = client.provenance_adapter_base(tenant, name, r, at=at)
    when = f" at {doc['at']}" if doc["at"] else ""
    if doc["version"] is None:
        _emit(doc, as_json, f"{doc['model']}@{r}{when}: the alias pointed at no version then")
        return
    base = doc["base"]
    lines = [f"{_named(doc)}{when}",
             f"  bound to {base['model']}@{base['version']}: weights sha256:{base['weights_digest']}"
             + (f" ({base['state']})" if base["state"] else "")]
    lines += [f"  {e['suite']}: {e['status']} on it, {e['runner']} {e['runner_version']}" for e in doc["evals"]]
    lines += [f"  {e['suite']}: {e['status']}, NOT on this base (it covers nothing)" for e in doc["elsewhere"]]
    if not doc["evals"]:
        lines.append("  no eval result ran on it")
    _emit(doc, as_json, lines)


@provenance_app.command("audit-log")
def audit_log(checkpoints: Path = typer.Option(..., "--checkpoints",
                                               help="JSON file of checkpoints saved "
                                                    "earlier (`modelreg audit checkpoints --json`)"),
              url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Whether the audit log is intact through your saved checkpoints and since them; exits 1 if not."""
    from registry.cli.operations import _read_checkpoints

    saved = _read_checkpoints(checkpoints)
    with _client(url, token) as client:
        doc = client.provenance_audit_log(saved)
    if doc["intact"]:
        _emit(doc, as_json, f"audit log intact: {doc['events']} events, {doc['checkpoints']} checkpoint(s) hold, "
                            f"{doc['events_since_checkpoint']} event(s) since the newest")
        return
    _emit(doc, as_json, f"audit log BROKEN at event {doc['broken']['event_id']}: {doc['broken']['detail']}")
    raise typer.Exit(1)
