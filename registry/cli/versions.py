"""The ``modelreg`` command: submitting, deriving, showing and scanning versions.

``submit``, ``derive``, ``diff``, ``version``, ``scan``, ``rescan``.
"""

from __future__ import annotations

import json
import time
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
    _say,
    _split_model,
    app,
    version_app,
)
from registry.domain.stages import running_states
from registry.domain.states import VersionState

# `submit --wait` waits until the version needs a person (approval) or has ended.
WAIT_DONE_STATES = frozenset(s.value for s in VersionState) - {s.value for s in running_states()}
PROMPT_HELP = "NAME=FILE: a prompt template (Jinja) the unit holds as prompts/NAME.jinja (repeatable)"
PROFILE_HELP = ("a serving profile, YAML or JSON: {engine: vllm, gpu: {type, count}, settings: {max_model_len, "
                "max_num_seqs, ...}}; checked against its GPUs, held as serving-profile.json")


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
    prompt: list[str] = typer.Option([], "--prompt", help=PROMPT_HELP),
    serving_profile: Optional[Path] = typer.Option(None, "--serving-profile", help=PROFILE_HELP),
    adapter_of: Optional[str] = typer.Option(
        None, "--adapter-of", help="the version is a LoRA adapter (PEFT) of this base version: TENANT/NAME@N, "
                                   "TENANT/NAME@ALIAS or the base's digest sha256:...; bound to its weights digest "
                                   "and checked against it when sealed"),
    wait: bool = typer.Option(False, "--wait", help="wait until the version is scanned (awaiting approval) or failed"),
    timeout: float = typer.Option(3600.0, "--timeout", help="seconds --wait waits at most"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Submit a model version; with --wait, show progress and exit non-zero if it fails."""
    tenant, name = _split_model(model)
    if adapter_of is not None:
        _check_base_ref(adapter_of)
    prompts, profile = _read_parts(prompt, serving_profile)
    if license is not None:
        # Checked here too, so a directory is not uploaded for a submission the registry will refuse.
        from registry.domain.licenses import normalize_license

        declared = normalize_license(license)
        if declared.id is None:
            raise CliError(f"license {license!r} is not recognized: {declared.problem}")
    local = "://" not in source or source.startswith("file://")
    if (prompts or profile is not None) and not (local and upload):
        raise CliError("--prompt and --serving-profile go with a local directory sent with --upload; for a hub or "
                       "bucket source, submit it, then `modelreg derive` the parts onto the version")
    if local and "://" not in source:
        # A relative directory is resolved here: the server has another working directory.
        source = str(Path(source).resolve())
    with _client(url, token) as client:
        if local and upload:
            body = _upload_directory(client, tenant, source, include, exclude, quiet=as_json,
                                     parts=_part_files(prompts, profile))
        else:
            body = {"source": source, "revision": revision, "include": include, "exclude": exclude,
                    "hf_endpoint": hf_endpoint}
        if license is not None:
            body["license"] = license
        if adapter_of is not None:
            body["adapter_of"] = adapter_of
        version = client.submit(tenant, name, body)
        if wait:
            version = _wait_for(client, version, timeout, show_progress=not as_json)
    _show_submitted(version, as_json)


def _check_base_ref(text: str) -> None:
    """Refuse a malformed ``--adapter-of`` here, before a directory is uploaded (the registry checks it again)."""
    import re

    from registry.domain.errors import InvalidRefError
    from registry.domain.refs import parse_ref

    if text.startswith("sha256:"):
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", text):
            raise CliError(f"--adapter-of {text[:80]!r}: a digest is sha256: and 64 lower-case hex digits")
        return
    try:
        ref = parse_ref(text)
    except InvalidRefError as exc:
        raise CliError(f"--adapter-of: {exc.message}") from None
    if ref.version is None and ref.alias is None:
        raise CliError(f"--adapter-of {text!r}: name the base version, TENANT/NAME@VERSION or TENANT/NAME@ALIAS")


def _upload_directory(client: Any, tenant: str, source: str, include: list[str], exclude: list[str],
                      quiet: bool, parts: dict[str, bytes] | None = None) -> dict[str, Any]:
    """Hash a local directory here, upload the blobs the registry lacks, and describe the version; ``parts``
    (path -> bytes: prompt templates, the serving profile) are added, in place of the directory's own."""
    import hashlib

    from registry.domain.text import MAX_LABEL_LENGTH, label_problem
    from registry.sources.local import LocalDirectorySource

    directory = Path(source.removeprefix("file://"))
    # The directory's name is the upload's label: refused here, before any blob is sent for it.
    problem = label_problem(directory.name, MAX_LABEL_LENGTH)
    if problem is not None:
        raise CliError(f"directory name {directory.name!r} cannot label an upload: {problem[0]}")
    src = LocalDirectorySource(str(directory), include=include, exclude=exclude)
    snapshot = src.resolve(None)
    for f in snapshot.files:
        if client.has_blob(tenant, f.sha256):
            continue
        if not quiet:
            _say(f"uploading {f.path} ({f.size} bytes)", err=True)
        with open(directory / f.path, "rb") as data:
            client.put_blob(tenant, f.sha256, data, f.size)
    files = {f.path: {"path": f.path, "size": f.size, "sha256": f.sha256} for f in snapshot.files}
    for path, data in (parts or {}).items():
        digest = hashlib.sha256(data).hexdigest()
        if not client.has_blob(tenant, digest):
            client.put_blob(tenant, digest, data, len(data))
        files[path] = {"path": path, "size": len(data), "sha256": digest}
    return {"source": f"upload:{directory.name}", "files": [files[p] for p in sorted(files)]}


def _read_parts(prompts: list[str], profile_file: Path | None) -> tuple[dict[str, str], dict[str, Any] | None]:
    """``--prompt NAME=FILE`` and ``--serving-profile FILE`` read: name -> text, and the profile document."""
    import yaml

    from registry.domain.errors import InvalidInputError
    from registry.domain.unit_parts import prompt_path

    texts: dict[str, str] = {}
    for option in prompts:
        name, eq, file = option.partition("=")
        if not eq or not file:
            raise CliError(f"--prompt {option!r}: give NAME=FILE")
        try:
            prompt_path(name)
        except InvalidInputError as exc:
            raise CliError(f"--prompt {option!r}: {exc.message}") from None
        if name in texts:
            raise CliError(f"--prompt {name!r} is given twice")
        texts[name] = _read_text(Path(file), f"--prompt {name}")
    if profile_file is None:
        return texts, None
    try:
        document = yaml.safe_load(_read_text(profile_file, "--serving-profile"))
    except yaml.YAMLError as exc:
        raise CliError(f"--serving-profile {profile_file}: not YAML or JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(document, dict):
        raise CliError(f"--serving-profile {profile_file}: a profile is a mapping (engine, gpu, settings)")
    return texts, document


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{what}: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CliError(f"{what}: {path} is not UTF-8 text") from None


def _part_files(prompts: dict[str, str], profile: dict[str, Any] | None) -> dict[str, bytes]:
    """The files the parts become in a submission (the registry checks them again when it seals)."""
    from registry.domain.components import SERVING_PROFILE
    from registry.domain.errors import InvalidInputError
    from registry.domain.serving_profile import parse_serving_profile
    from registry.domain.unit_parts import prompt_path

    files = {prompt_path(name): text.encode("utf-8") for name, text in prompts.items()}
    if profile is not None:
        try:
            files[SERVING_PROFILE] = parse_serving_profile(profile).canonical_json().encode()
        except InvalidInputError as exc:
            raise CliError(exc.message) from None
    return files


@app.command()
def derive(
    ref: str = typer.Argument(..., help="TENANT/NAME@VERSION: the unit to derive from"),
    prompt: list[str] = typer.Option([], "--prompt", help=PROMPT_HELP),
    remove_prompt: list[str] = typer.Option([], "--remove-prompt", help="NAME: leave this prompt template out"),
    serving_profile: Optional[Path] = typer.Option(None, "--serving-profile", help=PROFILE_HELP),
    no_serving_profile: bool = typer.Option(False, "--no-serving-profile", help="leave the serving profile out"),
    wait: bool = typer.Option(False, "--wait", help="wait until the version is scanned (awaiting approval) or failed"),
    timeout: float = typer.Option(3600.0, "--timeout", help="seconds --wait waits at most"),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Make a new version of a unit with new prompt templates or a new serving profile; every other file is
    shared with VERSION by digest (nothing is uploaded or mirrored again). A profile that does not fit its GPUs
    is refused with the arithmetic."""
    from registry.domain.errors import InvalidRefError
    from registry.domain.refs import parse_ref

    try:
        parsed = parse_ref(ref)
    except InvalidRefError as exc:
        raise CliError(exc.message) from None
    if parsed.version is None:
        raise CliError(f"{ref!r}: name the version to derive from, TENANT/NAME@VERSION")
    prompts, profile = _read_parts(prompt, serving_profile)
    body: dict[str, Any] = {"prompts": prompts, "remove_prompts": remove_prompt,
                            "serving_profile": profile, "remove_serving_profile": no_serving_profile}
    with _client(url, token) as client:
        version = client.derive(parsed.tenant, parsed.name, parsed.version, body)
        if wait:
            version = _wait_for(client, version, timeout, show_progress=not as_json)
    _show_submitted(version, as_json)


def _show_submitted(version: dict[str, Any], as_json: bool) -> None:
    """Print a submitted or derived version; exit 1 when it failed."""
    if as_json:
        _emit(version, True)
    else:
        _print_version(version)
    if version["state"] == "failed":
        raise typer.Exit(1)


def _wait_for(client: Any, version: dict[str, Any], timeout: float, show_progress: bool) -> dict[str, Any]:
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    tenant, name = version["model"].split("/", 1)
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
            version = client.version(tenant, name, version["version"])
    return version


def _print_version(v: dict[str, Any]) -> None:
    lines = [f"{v['model']}@{v['version']}: {v['state']}"]
    if v.get("failure_reason"):
        detail = (v.get("failure_detail") or {}).get("message", "")
        lines.append(f"  failed: {v['failure_reason']}: {detail}")
    src = v["source"]
    lines.append(f"  source: {src['kind']} {src['repo']}"
                 f" {v.get('requested_revision') or ''} -> {v.get('resolved_revision') or '?'}")
    if v.get("derived_from") is not None:
        lines.append(f"  derived from: version {v['derived_from']}")
    lines += _adapter_lines(v.get("adapter_of"), v.get("failure_detail"))
    arithmetic = (v.get("failure_detail") or {}).get("arithmetic")
    if isinstance(arithmetic, list):
        lines += [f"    {line}" for line in arithmetic]
    if "licenses" in v:  # absent from servers older than the license findings
        lines += _license_lines(v["licenses"])
    for f in v.get("files", []):
        lines.append(f"  {f['sha256'] or '(pending)':64}  {f['size']:>12}  {f['path']}")
    _say(*lines)


def _adapter_lines(binding: Any, failure: Any) -> list[str]:
    """An adapter's base (the signed binding), and what the check against it refused or found."""
    if not isinstance(binding, dict):
        return []
    lines = [f"  adapter of: {binding.get('model')}@{binding.get('version')} "
             f"(weights sha256:{binding.get('weights_digest')})"]
    check = binding.get("check") if isinstance(binding.get("check"), dict) else {}
    reasons = (failure or {}).get("reasons") if isinstance(failure, dict) else None
    for reason in reasons if isinstance(reasons, list) else check.get("refusals") or []:
        if isinstance(reason, dict):
            lines.append(f"    refused: {reason.get('code')}: {reason.get('message')}")
    for finding in check.get("findings") or []:
        if isinstance(finding, dict):
            lines.append(f"    note: {finding.get('code')}: {finding.get('message')}")
    return lines


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
        version = client.version(tenant, name, number)
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
        _say(*(_facts_lines(facts) if "facts" in version else ()), *_component_lines(version.get("components")),
             *_unit_part_lines(version.get("unit_parts")), *(_capacity_lines(estimate) if estimate else ()))


def _unit_part_lines(parts: Any) -> list[str]:
    """The registry-held parts: prompt templates and their variables, the serving profile and its arithmetic."""
    if not isinstance(parts, dict):
        return []
    lines = [f"  prompt template {p.get('name')}: variables {', '.join(p.get('variables') or []) or '-'}"
             for p in parts.get("prompts") or [] if isinstance(p, dict)]
    profile = parts.get("serving_profile")
    if isinstance(profile, dict):
        gpu = _obj(profile.get("gpu"))
        lines.append(f"  serving profile: {profile.get('engine')} on {gpu.get('count')} x {gpu.get('type')} "
                     f"(sha256:{profile.get('digest')})")
        capacity = _obj(profile.get("capacity"))
        if capacity:
            lines.append(f"    capacity: {'fits' if capacity.get('fits') else 'DOES NOT FIT'}")
            lines += [f"      {line}" for line in capacity.get("arithmetic") or []]
    error = parts.get("error")
    if isinstance(error, dict):
        lines.append(f"  unit parts refused: {error.get('message')}")
    return lines


def _component_lines(components: Any) -> list[str]:
    if not isinstance(components, list):
        return []
    return ["  components:", *(f"    {c.get('name')}: {c.get('digest')} ({c.get('members')} member(s))"
                               for c in components if isinstance(c, dict))]


@app.command("diff")
def diff(
    model: str = typer.Argument(..., help="TENANT/NAME"), old: int = typer.Argument(..., min=1),
    new: int = typer.Argument(..., min=1), url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Show what changed in the release unit from version OLD to NEW: each component (weights, tokenizer,
    chat templates, generation config, ...) that differs, member by member."""
    tenant, name = _split_model(model)
    with _client(url, token) as client:
        doc = client.diff(tenant, name, old, new)
    if as_json:
        _emit(doc, True)
        return
    d = doc["diff"]
    lines = [f"{model}: version {old} -> {new}",
             f"  changed: {', '.join(d['changed']) or 'nothing'}",
             f"  unchanged: {', '.join(d['unchanged']) or '-'}"]
    for c in d["components"]:
        lines.append(f"  {c['name']} ({c['status']}): {c['old_digest'] or '-'} -> {c['new_digest'] or '-'}")
        lines += [f"    + {m}" for m in c["members_added"]]
        lines += [f"    - {m}" for m in c["members_removed"]]
        lines += [f"    ~ {m}" for m in c["members_changed"]]
    if doc.get("template_review_files"):
        lines.append("  templates a security approval must name: " + ", ".join(doc["template_review_files"]))
    _say(*lines)


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
        bundle = client.signature(tenant, name, number)
    statefile.write_atomic(output, json.dumps(bundle).encode(), mode=0o644)
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
        result = client.rescan()
    _emit(result, as_json, f"queued {result['queued']} scan(s) with {result['scanner']} {result['scanner_version']}")


@version_app.command("scans")
def version_scans(
    model: str = typer.Argument(..., help="TENANT/NAME"), number: int = typer.Argument(...),
    url: str = UrlOpt, token: str = TokenOpt, as_json: bool = JsonOpt,
) -> None:
    """Per-file scan verdicts of a version."""
    tenant, name = _split_model(model)
    with _client(url, token) as client:
        result = client.scans(tenant, name, number)
    lines = [f"{result['model']}@{result['version']}: {result['state']}"]
    for f in result["files"]:
        lines.append(f"  {f['verdict'] or '(pending)':10} {f['format'] or '':14} {f['path']}")
    _emit(result, as_json, lines)
