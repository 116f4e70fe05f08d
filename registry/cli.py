"""The ``modelreg`` command.

Client commands talk to a registry over HTTP (``--url``/``MODELREG_URL``, ``--token``/``MODELREG_TOKEN``);
operator commands (``audit verify``, ``migrate``, ``scan``) work locally. ``serve`` and ``worker``
load the API app factory and the worker runner through the ``modelreg.components`` entry points,
so this package never imports ``api`` or ``workers``. Every command takes ``--json``; a failure prints one
readable line to stderr and exits non-zero (1 for errors, 2 for usage).
"""

from __future__ import annotations

import json
import os
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Optional

import httpx
import typer
from typer.exceptions import TyperException

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
audit_app = typer.Typer(help="The audit log.", no_args_is_help=True)
version_app = typer.Typer(help="Model versions.", no_args_is_help=True)
keys_app = typer.Typer(help="Signing keys.", no_args_is_help=True)
policy_app = typer.Typer(help="Release policies.", no_args_is_help=True)
alias_app = typer.Typer(help="Aliases of a model (prod, canary...).", no_args_is_help=True)
evalset_app = typer.Typer(help="Eval sets: JSONL cases that suites score models on.", no_args_is_help=True)
app.add_typer(tenant_app, name="tenant")
app.add_typer(principal_app, name="principal")
app.add_typer(audit_app, name="audit")
app.add_typer(version_app, name="version")
app.add_typer(keys_app, name="keys")
app.add_typer(policy_app, name="policy")
app.add_typer(alias_app, name="alias")
app.add_typer(evalset_app, name="evalset")

UrlOpt = typer.Option(None, "--url", envvar="MODELREG_URL", help="Registry URL.")
TokenOpt = typer.Option(None, "--token", envvar="MODELREG_TOKEN", help="API token.")
JsonOpt = typer.Option(False, "--json", help="Print JSON.")


class CliError(RegistryError):
    code = "cli"


def _client(url: Optional[str], token: Optional[str]):
    from registry.client.http import RegistryClient

    if not url:
        raise CliError("no registry URL: pass --url or set MODELREG_URL (e.g. http://127.0.0.1:8080)")
    return RegistryClient(url, token)


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


# --- identity --------------------------------------------------------------------------------


@app.command()
def whoami(url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Show who the token belongs to and its roles."""
    with _client(url, token) as client:
        me = client.get("/v1/whoami")
    roles = ", ".join(f"{t}:{r['role']}{'/' + r['capacity'] if r['capacity'] else ''}"
                      for t, rs in me["roles"].items() for r in rs)
    _emit(me, as_json, f"{me['name']}{' (admin)' if me['is_admin'] else ''} {roles}".strip())


@tenant_app.command("create")
def tenant_create(name: str, url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    with _client(url, token) as client:
        created = client.post("/v1/tenants", json={"name": name})
    _emit(created, as_json, f"created tenant {created['name']}")


@tenant_app.command("list")
def tenant_list(url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    with _client(url, token) as client:
        tenants = client.get("/v1/tenants")
    _emit(tenants, as_json, [t["name"] for t in tenants])


@principal_app.command("create")
def principal_create(
    name: str, admin: bool = typer.Option(False, "--admin"), url: str = UrlOpt, token: str = TokenOpt,
    as_json: bool = JsonOpt,
) -> None:
    with _client(url, token) as client:
        created = client.post("/v1/principals", json={"name": name, "is_admin": admin})
    _emit(created, as_json, f"created principal {created['name']}")


@principal_app.command("grant")
def principal_grant(
    name: str,
    tenant: str = typer.Option(..., "--tenant"),
    role: str = typer.Option(..., "--role", help="submitter, approver, auditor, node or admin"),
    capacity: str = typer.Option("", "--capacity", help="for approvers: security, legal, ml..."),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    with _client(url, token) as client:
        result = client.post(f"/v1/principals/{_seg(name)}/roles",
                             json={"tenant": tenant, "role": role, "capacity": capacity})
    _emit(result, as_json, f"granted {role}{'/' + capacity if capacity else ''} in {tenant} to {name}")


@principal_app.command("token")
def principal_token(
    name: str,
    days: Optional[int] = typer.Option(90, "--days", help="expiry in days"),
    description: str = typer.Option("", "--description"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Issue a token for NAME; the secret is printed once."""
    with _client(url, token) as client:
        issued = client.post(f"/v1/principals/{_seg(name)}/tokens",
                             json={"description": description, "expires_in_days": days})
    _emit(issued, as_json, issued["token"])


# --- versions --------------------------------------------------------------------------------

# `submit --wait` waits until the version needs a person (approval) or has ended.
WAIT_DONE_STATES = {"failed", "rejected", "revoked", "approved", "awaiting_approval"}


@app.command()
def submit(
    source: str = typer.Argument(..., help="hf://org/repo, s3://bucket/prefix, or a local directory"),
    model: str = typer.Option(..., "--model", help="TENANT/NAME"),
    revision: Optional[str] = typer.Option(None, "--revision", help="branch, tag or commit"),
    include: list[str] = typer.Option([], "--include", help="glob of files to mirror (repeatable)"),
    exclude: list[str] = typer.Option([], "--exclude", help="glob of files to leave out (repeatable)"),
    hf_endpoint: Optional[str] = typer.Option(None, "--hf-endpoint", help="Hugging Face-compatible hub URL"),
    license: Optional[str] = typer.Option(
        None, "--license", help="the license you declare: an SPDX id or expression, a Hub id, or other:NAME"),
    upload: bool = typer.Option(
        True, "--upload/--no-upload",
        help="send a local directory's files through the API (default); --no-upload makes the server read "
             "the path itself, which it allows only under its MODELREG_LOCAL_SOURCE_ROOTS"),
    wait: bool = typer.Option(False, "--wait", help="wait until the version is scanned (awaiting approval) or failed"),
    timeout: float = typer.Option(3600.0, "--timeout", help="seconds --wait waits at most"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Submit a model version; with --wait, show progress and exit non-zero if it fails."""
    tenant, name = _split_model(model)
    if license is not None:
        # Checked here too, so a directory is not uploaded for a submission the registry will refuse.
        from registry.domain.licenses import normalize_license

        declared = normalize_license(license)
        if declared.id is None:
            raise CliError(f"license {license!r} is not recognized: {declared.problem}")
    local = "://" not in source or source.startswith("file://")
    if local and "://" not in source:
        # A relative directory is resolved here: the server has another working directory.
        source = str(Path(source).resolve())
    with _client(url, token) as client:
        if local and upload:
            body = _upload_directory(client, tenant, source, include, exclude, quiet=as_json)
        else:
            body = {"source": source, "revision": revision, "include": include, "exclude": exclude,
                    "hf_endpoint": hf_endpoint}
        if license is not None:
            body["license"] = license
        # The registry pins the revision before it answers: listing a hub is quick, but hashing a
        # large local directory to name its revision can take minutes.
        version = client.post(f"/v1/models/{_seg(tenant)}/{_seg(name)}/versions", json=body,
                              timeout=httpx.Timeout(30.0, read=3600.0))
        if wait:
            version = _wait_for(client, version, timeout, show_progress=not as_json)
    if as_json:
        _emit(version, True)
    else:
        _print_version(version)
    if version["state"] == "failed":
        raise typer.Exit(1)


def _upload_directory(client: Any, tenant: str, source: str, include: list[str], exclude: list[str],
                      quiet: bool) -> dict[str, Any]:
    """Hash a local directory here, upload the blobs the registry lacks, and describe the version."""
    from registry.sources.local import LocalDirectorySource
    from registry.client.http import RemoteError

    directory = Path(source.removeprefix("file://"))
    src = LocalDirectorySource(str(directory), include=include, exclude=exclude)
    snapshot = src.resolve(None)
    for f in snapshot.files:
        try:
            client.request("HEAD", f"/v1/blobs/sha256/{f.sha256}", params={"tenant": tenant})
            continue
        except RemoteError as exc:
            if exc.status != 404:
                raise
        if not quiet:
            _say(f"uploading {f.path} ({f.size} bytes)", err=True)
        with open(directory / f.path, "rb") as data:
            client.request("PUT", f"/v1/blobs/sha256/{f.sha256}", params={"tenant": tenant}, content=data,
                           headers={"Content-Length": str(f.size)})
    return {"source": f"upload:{directory.name}",
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in snapshot.files]}


def _wait_for(client: Any, version: dict[str, Any], timeout: float, show_progress: bool) -> dict[str, Any]:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    path = f"/v1/models/{version['model']}/versions/{version['version']}"
    deadline = time.monotonic() + timeout
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TextColumn("{task.fields[files]}"), disable=not show_progress, transient=True) as progress:
        task = progress.add_task(version["state"], total=None, files="")
        while version["state"] not in WAIT_DONE_STATES:
            if time.monotonic() > deadline:
                raise CliError(f"timed out after {timeout:.0f}s waiting for {version['model']}@{version['version']} "
                               f"(state {version['state']})")
            p = version.get("progress") or {}
            progress.update(task, description=version["state"], total=p.get("bytes") or None,
                            completed=p.get("bytes_mirrored", 0),
                            files=f"{p.get('files_mirrored', 0)}/{p.get('files', 0)} files")
            time.sleep(0.3)
            version = client.get(path)
    return version


def _print_version(v: dict[str, Any]) -> None:
    lines = [f"{v['model']}@{v['version']}: {v['state']}"]
    if v.get("failure_reason"):
        detail = (v.get("failure_detail") or {}).get("message", "")
        lines.append(f"  failed: {v['failure_reason']}: {detail}")
    src = v["source"]
    lines.append(f"  source: {src['kind']} {src['repo']}"
                 f" {v.get('requested_revision') or ''} -> {v.get('resolved_revision') or '?'}")
    if "licenses" in v:  # absent from servers older than the license findings
        lines += _license_lines(v["licenses"])
    for f in v.get("files", []):
        lines.append(f"  {f['sha256'] or '(pending)':64}  {f['size']:>12}  {f['path']}")
    _say(*lines)


def _license_lines(licenses: dict[str, Any]) -> list[str]:
    """The license block of ``version show``: resolved, each finding (where from), gated access."""
    lines = [f"  license: {licenses.get('resolved') or '(none recognized)'}"
             + (f" (declared {licenses['declared']})" if licenses.get("declared") else "")]
    for f in licenses.get("findings", []):
        if f["source"] == "conflict":
            lines.append(f"    conflict: {f['problem']}")
        else:
            outcome = f["normalized"] or f"unrecognized: {f['problem']}"
            lines.append(f"    {f['source']}: {outcome}")
    access = licenses.get("access")
    if licenses.get("gated"):
        who = (access or {}).get("identity") or (access or {}).get("fingerprint") or "no token"
        lines.append(f"  gated ({licenses['gated']}): terms accepted by {(access or {}).get('token')} token {who}")
    return lines


@version_app.command("show")
def version_show(
    model: str = typer.Argument(..., help="TENANT/NAME"), number: int = typer.Argument(...),
    context: Optional[int] = typer.Option(None, "--context", min=1,
                                          help="tokens per sequence: estimate the GPU memory to serve it"),
    sequences: Optional[int] = typer.Option(None, "--sequences", min=1,
                                            help="sequences held at once (with --context; default 1)"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Show a version: state, source, pinned revision, files, model facts (and a capacity estimate)."""
    from registry.domain.capacity import estimate_capacity

    if sequences is not None and context is None:
        raise CliError("--sequences needs --context (the tokens each sequence holds)")
    tenant, name = _split_model(model)
    with _client(url, token) as client:
        version = client.get(f"/v1/models/{_seg(tenant)}/{_seg(name)}/versions/{number}")
    facts = version.get("facts")
    estimate = None
    if context is not None:
        if not isinstance(facts, dict):
            raise CliError(f"{model}@{number} has no facts recorded (state {version['state']}): "
                           "no capacity estimate")
        estimate = estimate_capacity(facts, context, sequences or 1)
    if as_json:
        _emit({**version, "capacity": estimate.as_dict()} if estimate else version, True)
    else:
        _print_version(version)
        # A registry older than facts sends no key at all: nothing to say then.
        _say(*(_facts_lines(facts) if "facts" in version else ()), *(_capacity_lines(estimate) if estimate else ()))


def _cell(cell: Any) -> str:
    """A fact for reading: its value, or ``? (why)``."""
    if not isinstance(cell, dict):
        return "?"
    if cell.get("value") is None and "unknown" in cell:
        return f"? ({cell['unknown']})"
    value = cell.get("value")
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "-"
    return "-" if value is None else str(value)


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _size(n: Any) -> str:
    return f"{n / 2**30:.2f} GiB ({n} bytes)" if isinstance(n, int) else "?"


def _facts_lines(facts: Any) -> list[str]:
    if not isinstance(facts, dict):
        return ["  facts: not recorded"]
    w, a, q, t = (_obj(facts.get(k)) for k in ("weights", "architecture", "quantization", "tokenizer"))
    from registry.domain.capacity import estimate_capacity

    per_token = estimate_capacity(facts)
    kv = per_token.kv_bytes_per_token
    return [
        f"  facts (reader {facts.get('reader_version')}):",
        f"    weights: {_cell(w.get('formats'))}; parameters {_cell(w.get('parameters'))}; "
        f"tensor bytes {_cell(w.get('tensor_bytes'))}; dtypes {_cell(w.get('dtypes'))}",
        f"    architecture: {_cell(a.get('model_type'))} ({_cell(a.get('architectures'))}); "
        f"layers {_cell(a.get('num_hidden_layers'))}, hidden {_cell(a.get('hidden_size'))}, "
        f"heads {_cell(a.get('num_attention_heads'))}, KV heads {_cell(a.get('num_key_value_heads'))}, "
        f"head dim {_cell(a.get('head_dim'))}",
        f"    vocabulary {_cell(a.get('vocab_size'))}; context {_cell(a.get('max_position_embeddings'))}; "
        f"rope scaling {_cell(a.get('rope_scaling'))}; dtype {_cell(a.get('torch_dtype'))}",
        f"    quantization: {_cell(q.get('method'))}, bits {_cell(q.get('bits'))}, "
        f"group size {_cell(q.get('group_size'))}, tool {_cell(q.get('tool'))}; "
        f"GGUF file type {_cell(q.get('gguf_file_type'))}",
        f"    tokenizer: {_cell(t.get('class'))}; bos {_cell(t.get('bos_token'))}, eos {_cell(t.get('eos_token'))}, "
        f"pad {_cell(t.get('pad_token'))}, unk {_cell(t.get('unk_token'))}",
        f"    chat template sha256: {_cell(t.get('chat_template_sha256'))}",
        "    KV cache per token: " + (f"{kv['fp16']} bytes fp16, {kv['fp8']} bytes fp8 ({per_token.attention})"
                                     if kv else f"? ({'; '.join(f'{k}: {v}' for k, v in per_token.unknown.items())})"),
    ]


def _capacity_lines(est: Any) -> list[str]:
    head = f"  capacity at {est.context} tokens x {est.sequences} sequence(s):"
    if est.kv_cache_bytes is None:
        return [head, "    ? (" + "; ".join(f"{k}: {v}" for k, v in est.unknown.items()) + ")"]
    lines = [head, f"    weights {_size(est.weight_bytes)}"]
    for dtype, kv in est.kv_cache_bytes.items():
        total = est.total_bytes[dtype] if est.total_bytes else None
        lines.append(f"    KV cache {dtype}: {_size(kv)}; GPU memory needed {_size(total)}")
    lines += [f"    note: {n}" for n in est.notes]
    lines.append("    not counted: " + "; ".join(est.not_counted))
    return lines


@version_app.command("signature")
def version_signature(
    model: str = typer.Argument(..., help="TENANT/NAME"), number: int = typer.Argument(...),
    output: Path = typer.Option(Path("model.sig"), "--output", "-o"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Save the version's OpenSSF model-signing bundle (verify with `model_signing verify key`)."""
    tenant, name = _split_model(model)
    with _client(url, token) as client:
        bundle = client.get(f"/v1/models/{_seg(tenant)}/{_seg(name)}/versions/{number}/signature")
    output.write_text(json.dumps(bundle))
    _emit({"written": str(output), "key_id": bundle["verificationMaterial"]["publicKey"]["hint"]}, as_json,
          f"wrote {output}")


@app.command()
def scan(
    path: Path = typer.Argument(..., exists=True, help="a model file or directory"),
    as_json: bool = JsonOpt,
) -> None:
    """Scan local files for serialization attacks, with no server. Exit 0 safe, 1 unsafe or suspicious, 2 error."""
    from registry.scanning import Verdict, scan_directory, scan_file

    results = scan_directory(path) if path.is_dir() else [scan_file(path)]
    worst = Verdict.worst([r.verdict for r in results])
    if as_json:
        _emit({"verdict": worst.value, "files": [r.as_dict() for r in results]}, True)
    else:
        for r in results:
            _say(f"{r.verdict.value:10} {r.format:14} {r.path}",
                 *(f"    {f.severity.value:10} {f.rule_id}  {f.location}: {f.message}" for f in r.findings))
        _say(f"{len(results)} file(s): {worst.value}")
    code = {Verdict.SAFE: 0, Verdict.SUSPICIOUS: 1, Verdict.UNSAFE: 1, Verdict.ERROR: 2}[worst]
    if code:
        raise typer.Exit(code)


@app.command()
def rescan(
    all_files: bool = typer.Option(False, "--all", help="every stored file (required)"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Rescan stored files with the current scanner version (administrators)."""
    if not all_files:
        raise CliError("say --all: rescan queues a scan of every stored file not yet scanned by this version")
    with _client(url, token) as client:
        result = client.post("/v1/scans/rescan")
    _emit(result, as_json, f"queued {result['queued']} scan(s) with {result['scanner']} {result['scanner_version']}")


@version_app.command("scans")
def version_scans(
    model: str = typer.Argument(..., help="TENANT/NAME"), number: int = typer.Argument(...),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Per-file scan verdicts of a version."""
    tenant, name = _split_model(model)
    with _client(url, token) as client:
        result = client.get(f"/v1/models/{_seg(tenant)}/{_seg(name)}/versions/{number}/scans")
    lines = [f"{result['model']}@{result['version']}: {result['state']}"]
    for f in result["files"]:
        lines.append(f"  {f['verdict'] or '(pending)':10} {f['format'] or '':14} {f['path']}")
    _emit(result, as_json, lines)


# --- releases --------------------------------------------------------------------------------


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
        moved = client.put(f"/v1/models/{_seg(tenant)}/{_seg(name)}/aliases/{_seg(alias)}", json=body)
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
        moved = client.post(f"/v1/models/{_seg(tenant)}/{_seg(name)}/aliases/{_seg(alias)}/rollback",
                            json={"comment": comment})
    _emit(moved, as_json, _alias_lines({**moved, "history": moved["history"][:1]}))


@alias_app.command("list")
def alias_list(
    model: str = typer.Argument(..., help="TENANT/NAME"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Every alias of MODEL, with its history (who, when, from, to, why)."""
    tenant, name = _split_model(model)
    with _client(url, token) as client:
        found = client.get(f"/v1/models/{_seg(tenant)}/{_seg(name)}/aliases")
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
        version = client.post(f"/v1/models/{_seg(tenant)}/{_seg(name)}/versions/{number}/revoke",
                              json={"reason": reason})
    _emit(version, as_json, f"{version['model']}@{version['version']}: revoked ({reason})")


@keys_app.command("list")
def keys_list(url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """The registry's public signing keys."""
    with _client(url, token) as client:
        keys = client.get("/v1/keys")
    _emit(keys, as_json, [f"{k['key_id']}  {k['algorithm']}" for k in keys["keys"]])


@keys_app.command("export")
def keys_export(output: Path = typer.Option(Path("registry.pub"), "--output", "-o"),
                url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Write the registry's public key PEM (for `model_signing verify key --public_key`)."""
    with _client(url, token) as client:
        keys = client.get("/v1/keys")
    output.write_text(keys["keys"][0]["public_key_pem"])
    _emit({"written": str(output), "key_id": keys["keys"][0]["key_id"]}, as_json, f"wrote {output}")


# --- approvals -------------------------------------------------------------------------------


def _versions_path(model: str, number: int) -> str:
    tenant, name = _split_model(model)
    return f"/v1/models/{_seg(tenant)}/{_seg(name)}/versions/{number}"


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
        status = client.post(f"{_versions_path(model, number)}/approvals",
                             json={"decision": decision, "capacity": capacity, "comment": comment,
                                   "files": files})
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
        result = client.get(f"{_versions_path(model, number)}/approvals")
    _emit(result, as_json, _status_lines(result))


# --- evals -----------------------------------------------------------------------------------------


def _metric(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, (int, float)) else str(value)


def _eval_lines(result: dict[str, Any]) -> list[str]:
    lines = [f"{result['version']}: {result['state']}"]
    if not result["evals"]:
        lines.append("  no evals (no suite applies)")
    for e in result["evals"]:
        why = f" ({e['reason']}: {e['error']})" if e.get("reason") else ""
        took = f" in {e['duration_ms'] / 1000:.1f} s" if e.get("duration_ms") is not None else ""
        lines.append(f"  {e['suite']}: {e['status']}{why}, {e['runner']} {e['runner_version']}{took}, "
                     f"{e['cases_failed']} of {e['cases_recorded']} cases failed")
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
    path = f"{_versions_path(model, number)}/evals"
    with _client(url, token) as client:
        if suite and log:
            _say(*client.get_bytes(f"{path}/{_seg(suite)}/log").decode("utf-8", "replace").splitlines())
            return
        if suite:
            result = client.get(f"{path}/{_seg(suite)}")
            _emit(result, as_json, _case_lines(result))
            return
        result = client.get(path)
    _emit(result, as_json, _eval_lines(result))


def _evalset_line(e: dict[str, Any]) -> str:
    categories = ", ".join(f"{k} {v}" for k, v in e["categories"].items())
    return f"{e['name']} version {e['number']}: {e['cases']} cases ({categories}), sha256:{e['digest']}"


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
        result = client.put(f"/v1/evalsets/{_seg(name)}", content=file.read_bytes(),
                            params={"description": description},
                            headers={"Content-Type": "application/x-ndjson"})
    verb = "added" if result["created"] else "unchanged, already"
    _emit(result, as_json, f"{verb} {_evalset_line(result)}")


@evalset_app.command("list")
def evalset_list(url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """The newest version of every eval set."""
    with _client(url, token) as client:
        result = client.get("/v1/evalsets")
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
            _say(*client.get_bytes(f"/v1/evalsets/{_seg(name)}/versions/{version}/cases")
                 .decode("utf-8", "replace").splitlines())
            return
        if version is not None:
            result = client.get(f"/v1/evalsets/{_seg(name)}/versions/{version}")
            _emit(result, as_json, [_evalset_line(result), f"  languages: {result['languages']}",
                                    f"  added by {result['created_by']} at {result['created_at']}",
                                    f"  {result['description']}"])
            return
        result = client.get(f"/v1/evalsets/{_seg(name)}")
    _emit(result, as_json, [_evalset_line(e) for e in result["versions"]])


@policy_app.command("eval")
def policy_eval(
    model: str = typer.Argument(..., help="TENANT/NAME"),
    number: int = typer.Argument(..., metavar="VERSION"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Evaluate the approval policy on a version now: the decision and what is unmet; changes nothing."""
    with _client(url, token) as client:
        result = client.get(f"{_versions_path(model, number)}/policy")
    d = result["decision"]
    head = (f"{result['model']}@{result['version']}: {result['state']}; policy says {d['outcome']}"
            f" (bundle {d['bundle_digest'][:12]}, input {d['input_digest'][:12]})")
    _emit(result, as_json, [head, *_unmet_lines(d["unmet"])])


# --- audit -----------------------------------------------------------------------------------


@audit_app.command("verify")
def audit_verify(
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="embedded registry directory"),
    checkpoints: Optional[Path] = typer.Option(
        None, "--checkpoints",
        help="JSON file of checkpoints saved earlier (`modelreg audit checkpoints --json`)"),
    public_keys: list[Path] = typer.Option(
        [], "--public-key", help="registry public key PEM the checkpoints must be signed with (repeatable; "
                                 "default: the registry's own signing key)"),
    as_json: bool = JsonOpt,
) -> None:
    """Recompute the audit chain in the database; name the first altered, removed or reordered event.

    With --checkpoints, also check each checkpoint's signature and that the chain still reaches every
    checkpointed event with the signed hash: a cut or recomputed chain fails.
    """
    from registry import audit
    from registry.bootstrap import bootstrap

    settings = _local_settings(data_dir)
    saved = _read_checkpoints(checkpoints) if checkpoints is not None else []
    keys = _checkpoint_keys(settings, public_keys) if saved else []
    container = bootstrap(settings)
    try:
        with container.session_factory() as session:
            report = audit.verify(session, checkpoints=saved, keys=keys)
    finally:
        container.dispose()
    held = f", {report.checkpoints} checkpoint(s) hold" if checkpoints is not None else ""
    _emit({"ok": True, "events": report.events, "head_hash": report.head_hash,
           "checkpoints": report.checkpoints},
          as_json, f"audit log intact: {report.events} events, head {report.head_hash}{held}")


def _local_settings(data_dir: Optional[Path]) -> Any:
    """Settings of a registry whose database this command opens itself; the embedded one must exist."""
    from registry.bootstrap import load_settings

    settings = load_settings(**({"data_dir": data_dir} if data_dir else {}))
    if settings.database_url is None and not (settings.data_dir / "registry.db").is_file():
        raise CliError(f"no embedded registry in {settings.data_dir} (no registry.db): pass --data-dir, "
                       "or set MODELREG_DATABASE_URL")
    return settings


def _read_checkpoints(path: Path) -> list[Any]:
    """A saved list of checkpoints (or one checkpoint, as `audit checkpoint --json` prints it)."""
    try:
        data = json.loads(path.read_text())
    except ValueError as err:
        raise CliError(f"{path} is not JSON: {err}") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise CliError(f"{path} holds no list of checkpoints")
    return data


def _checkpoint_keys(settings: Any, files: list[Path]) -> list[Any]:
    from registry.signing.keys import SigningKey, VerifyingKey, load_signing_key

    if files:
        return [VerifyingKey.from_file(f) for f in files]
    pem = settings.signing_key_pem.get_secret_value() if settings.signing_key_pem else None
    if settings.signing_key_file is not None or pem:
        return [load_signing_key(settings.signing_key_file, pem).public_key]
    embedded = settings.data_dir / "keys" / "signing-key.pem"
    if not embedded.exists():
        raise CliError("no registry key to check the checkpoints with: pass --public-key "
                       "(the PEM of `modelreg keys export`)")
    return [SigningKey.from_file(embedded).public_key]


@audit_app.command("checkpoint")
def audit_checkpoint(
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="embedded registry directory"),
    as_json: bool = JsonOpt,
) -> None:
    """Sign the audit chain's head now (event id, chain hash, time) and store the checkpoint."""
    from registry import audit
    from registry.bootstrap import bootstrap, prepare_embedded

    settings = _local_settings(data_dir)
    if settings.database_url is None:
        prepare_embedded(settings)
    container = bootstrap(settings)
    try:
        with container.session_factory() as session:
            made = audit.checkpoint(session, container.signing_key)
            if made is None:
                raise CliError("the audit log is empty: there is nothing to checkpoint yet")
            record = made.as_dict()
    finally:
        container.dispose()
    _emit(record, as_json,
          f"checkpoint of event {record['event_id']} ({record['event_hash']}) at {record['at']}")


@audit_app.command("checkpoints")
def audit_checkpoints(url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt) -> None:
    """Every signed audit checkpoint (auditors, administrators); save the --json output for `audit verify`."""
    found: list[dict[str, Any]] = []
    with _client(url, token) as client:
        while True:
            page = client.get("/v1/audit/checkpoints", params={"after": found[-1]["id"] if found else 0,
                                                               "limit": 1000})
            found.extend(page)
            if len(page) < 1000:
                break
    _emit(found, as_json, "\n".join(f"{c['event_id']:>10}  {c['event_hash']}  {c['at']}" for c in found))


@app.command()
def migrate(data_dir: Optional[Path] = typer.Option(None, "--data-dir"), as_json: bool = JsonOpt) -> None:
    """Bring the database schema to the newest revision."""
    from registry.bootstrap import bootstrap, ensure_data_dir, load_settings

    settings = load_settings(**({"data_dir": data_dir} if data_dir else {}))
    ensure_data_dir(settings)
    container = bootstrap(settings, migrate=True)
    from alembic.migration import MigrationContext

    with container.engine.connect() as conn:
        head = MigrationContext.configure(conn).get_current_revision()
    container.dispose()
    _emit({"ok": True, "revision": head}, as_json, f"database schema is up to date (revision {head})")


@app.command()
def gc(
    older_than_hours: float = typer.Option(24.0, "--older-than-hours", min=0.0,
                                           help="only what was left at least this long ago"),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir"),
    as_json: bool = JsonOpt,
) -> None:
    """Sweep the blob store: temporary files and unfinished multipart uploads of crashed writers."""
    import datetime as dt

    from registry.bootstrap import bootstrap, load_settings, prepare_embedded

    settings = load_settings(**({"data_dir": data_dir} if data_dir else {}))
    if settings.database_url is None:
        prepare_embedded(settings)
    container = bootstrap(settings)
    try:
        swept = container.blob_store.sweep_incomplete(dt.timedelta(hours=older_than_hours))
    finally:
        container.dispose()
    _emit({"swept": swept}, as_json, f"swept {swept} incomplete upload(s)")


# --- processes -------------------------------------------------------------------------------


def _component(name: str) -> Any:
    found = [ep for ep in entry_points(group="modelreg.components") if ep.name == name]
    if not found:
        raise CliError(f"component {name!r} is not installed (reinstall modelreg: pip install -e .)")
    return found[0].load()


@app.command()
def serve(
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="state directory (default ./.modelreg)"),
    host: Optional[str] = typer.Option(None, "--host"),
    port: Optional[int] = typer.Option(None, "--port"),
    workers: Optional[int] = typer.Option(None, "--workers", help="worker threads in this process"),
    as_json: bool = typer.Option(False, "--json", help="print the startup record as one JSON line"),
) -> None:
    """Run the API and N worker threads in one process (the embedded default: SQLite and local blobs)."""
    import threading

    import uvicorn

    from registry.bootstrap import bootstrap, ensure_initial_admin, load_settings, prepare_embedded

    overrides: dict[str, Any] = {}
    for key, value in (("data_dir", data_dir), ("host", host), ("port", port), ("workers", workers)):
        if value is not None:
            overrides[key] = value
    settings = load_settings(**overrides)
    prepare_embedded(settings)
    if settings.public_url is None:
        settings.public_url = f"http://{settings.host}:{settings.port}"
    container = bootstrap(settings, migrate=True)
    first = ensure_initial_admin(container)
    create_app = _component("api")
    start_workers = _component("workers")
    stop = threading.Event()
    threads = start_workers(container, settings.workers, stop)
    if as_json:
        typer.echo(json.dumps({"url": settings.public_url, "workers": len(threads),
                               "admin_token_file": str(first.admin_token_file) if first.admin_token_file else None,
                               "created_admin": first.created_admin}))
    else:
        if first.created_admin:
            typer.echo(f"created tenant 'default' and principal 'admin'; admin token in {first.admin_token_file}")
        elif first.admin_token_file:
            typer.echo(f"admin token in {first.admin_token_file}")
        typer.echo(f"modelreg serving on {settings.public_url} with {len(threads)} worker threads")
    try:
        uvicorn.run(create_app(container), host=settings.host, port=settings.port, log_level="warning")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        container.dispose()


@app.command()
def worker(
    concurrency: int = typer.Option(1, "--concurrency", min=1, help="worker threads"),
    as_json: bool = typer.Option(False, "--json", help="log as JSON lines"),
) -> None:
    """Run background jobs (mirroring, sealing, scanning) until SIGTERM or SIGINT."""
    import logging

    from registry.bootstrap import bootstrap, load_settings, prepare_embedded

    if as_json:
        logging.basicConfig(level=logging.INFO, handlers=[_json_log_handler()])
    settings = load_settings()
    # The same key as `serve` beside it: the data directory's, made on first start, unless one is set.
    prepare_embedded(settings)
    container = bootstrap(settings)
    try:
        _component("worker-process")(container, concurrency)
    finally:
        container.dispose()


def _json_log_handler():
    import logging

    class JsonFormatter(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return json.dumps({"time": self.formatTime(record), "level": record.levelname, "logger": record.name,
                               "message": record.getMessage()})

    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    return handler


def main(argv: list[str] | None = None) -> int:
    try:
        # Without standalone mode click returns a command's exit code instead of raising it.
        code = app(args=argv, prog_name="modelreg", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 130
    except TyperException as exc:
        # Usage errors (unknown command, missing argument, bad option value): one line, exit 2.
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        _say(f"error: {' '.join(message.split())}", err=True)
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
