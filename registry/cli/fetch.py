"""The ``modelreg`` command on serving nodes: ``fetch``, ``verify``, ``cache verify``, ``cache warm``, ``cache sweep``.

Exit codes (the same table as :mod:`registry.client.errors`; a failure prints one line on stderr,
``error: <kind>: <what>``, or ``error: <what>`` for a plain error):

    0 ok; 1 error; 2 usage; 10 signature (also a trust root that is not the pinned one); 11 expired;
    12 rollback; 13 digest; 14 revoked; 15 not-approved; 16 network; 17 destination; 18 manifest; 19 log;
    20 adapter-base (an adapter's base alias moved to other weights, or the base fetched is not the bound one).

An adapter (a version bound to a base, ADR 0018) is fetched into ``DEST/<adapter name>``, the directory vLLM's
filesystem LoRA resolver reads, its ``adapter_config.json`` saying the base's served name; ``--with-base`` puts
the base, verified against the adapter's release, into ``DEST/<base name>`` first.

Trust root: ``--trust-root FILE`` (``MODELREG_TRUST_ROOT``), or ``--trust-root-sha256 HEX``
(``MODELREG_TRUST_ROOT_SHA256``): the sha256 of trust root 1 as the registry serves it (its trust-root
route, version 1, piped to ``sha256sum``: the README's KServe section), fetched and trusted only if exactly
the bytes received hash to it, then walked forward to the current root. One of the two is required; with
both, the file must hash to the pin.

Output: readable lines on stdout (one per phase, then the summary) and, when stderr is a terminal, a
progress bar there; with ``--json``, JSON lines on stdout instead (``{"event": "phase"}``,
``{"event": "progress"}``, and last ``{"event": "summary"}`` with the seconds of each phase: manifest,
verify, download, assemble; ``resolved_from``: the ``model@alias`` the version was resolved from, null
for a version; before the summary, a readable ``resolved ...`` line or ``{"event": "resolved"}``).

Environment: ``MODELREG_URL`` and ``MODELREG_TOKEN`` (the node's token) or ``MODELREG_TOKEN_FILE`` (the
pod's projected service-account token, read again as the kubelet rotates it), ``MODELREG_CACHE`` (the cache
directory; ``fetch`` uses none without it and writes nothing outside DEST, ``cache`` commands default to
``~/.cache/modelreg``), ``MODELREG_CACHE_HIGH``/``MODELREG_CACHE_LOW`` (watermarks,
e.g. ``50G``), ``MODELREG_CACHE_RECHECK_HOURS`` (``cache warm`` re-hashes a cached blob not verified for
that long; ``fetch`` accepts it and needs none: it hashes every blob it copies into DEST).
"""

from __future__ import annotations

import base64
import json
import os
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

import typer

from registry.cli._base import CliError, JsonOpt, TokenFileOpt, TokenOpt, UrlOpt, _say, app, parse_size

EXIT_HELP = ("Exit codes: 0 ok, 1 error, 2 usage (or DEST inside --cache), 10 signature (or a trust root "
             "that does not hash to --trust-root-sha256), 11 expired, "
             "12 rollback, 13 digest, 14 revoked, 15 not-approved, 16 network, 17 destination (DEST holds "
             "something else), 18 manifest (bad path or bundle), 19 log (not proven in the verifiable log), "
             "20 adapter-base (an adapter's base alias moved to other weights, or the base fetched is not the "
             "one the adapter is bound to).")

cache_app = typer.Typer(help="The node cache of fetched blobs.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")

CacheOpt = typer.Option(None, "--cache", envvar="MODELREG_CACHE",
                        help="Node cache directory (default ~/.cache/modelreg).")
FetchCacheOpt = typer.Option(None, "--cache", envvar="MODELREG_CACHE",
                             help="Node cache directory shared by the node's fetches (default: none; the "
                                  "fetch then writes nothing outside DEST and keeps nothing).")
TrustRootOpt = typer.Option(None, "--trust-root", envvar="MODELREG_TRUST_ROOT",
                            help="The node's pinned trust root (a DSSE JSON file).")
TrustPinOpt = typer.Option(None, "--trust-root-sha256", envvar="MODELREG_TRUST_ROOT_SHA256",
                           help="The sha256 of trust root 1 as the registry serves it (README: KServe), "
                                "instead of a file: fetched and trusted only if it hashes to this. With "
                                "--trust-root, the file must hash to it.")
WitnessOpt = typer.Option(None, "--witness", envvar="MODELREG_WITNESSES",
                          help="A witness's cosignature verifier key (<name>+<id>+<base64>) this node requires, "
                               "beside its trust root's; repeat for each (the variable: space-separated).")
WitnessQuorumOpt = typer.Option(None, "--witness-quorum", envvar="MODELREG_WITNESS_QUORUM", min=0,
                                help="How many of the --witness keys must have cosigned the release's log "
                                     "checkpoint (default: all of them).")
ParallelOpt = typer.Option(8, "--parallel", min=1, max=64, help="Parallel download streams (and hash threads).")
HighOpt = typer.Option(None, "--cache-high", envvar="MODELREG_CACHE_HIGH",
                       help="Evict least recently used blobs above this size (e.g. 50G).")
LowOpt = typer.Option(None, "--cache-low", envvar="MODELREG_CACHE_LOW",
                      help="...down to this size (default 80% of --cache-high).")
RecheckOpt = typer.Option(24.0, "--recheck-hours", envvar="MODELREG_CACHE_RECHECK_HOURS",
                          help="cache warm: re-hash a cached blob not verified for this many hours. fetch "
                               "accepts it for old scripts; it hashes every blob it copies into DEST anyway.")

def _cache(path: Optional[Path], high: Optional[str] = None, low: Optional[str] = None,
           recheck_hours: float = 24.0):
    from registry.node.cache import NodeCache

    root = path or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "modelreg"
    return NodeCache(root, high=parse_size(high), low=parse_size(low),
                     recheck_after=timedelta(hours=recheck_hours))


def _api(url: Optional[str], token: Optional[str], token_file: Optional[str] = None):
    from registry.client.api import RegistryApi
    from registry.client.token_file import token_source

    if not url:
        raise CliError("no registry URL: pass --url or set MODELREG_URL")
    return RegistryApi(url, token_source(token, token_file))


def _fail(exc: BaseException) -> typer.Exit:
    from registry.client.errors import exit_code

    code, kind = exit_code(exc)
    _say(f"{_error_prefix(kind)}{' '.join(str(exc).split())}", err=True)
    return typer.Exit(code)


def _error_prefix(kind: str) -> str:
    """``error: <kind>: `` for a refusal with its own code; ``error: `` alone for a plain error."""
    return "error: " if kind == "error" else f"error: {kind}: "


def _summary(data: dict[str, Any], as_json: bool, human: str) -> None:
    if as_json:
        typer.echo(json.dumps({"event": "summary", **data}, sort_keys=True, default=str))
    else:
        _say(human)


def _run(body):
    """Run a command body; every deliberate failure becomes its exit code and one stderr line."""
    from registry.domain.errors import RegistryError

    try:
        return body()
    except typer.Exit:
        raise
    except (RegistryError, OSError) as exc:
        raise _fail(exc) from None


@app.command(epilog=EXIT_HELP)
def fetch(
    ref: str = typer.Argument(..., help="tenant/name@alias|version, or modelreg://tenant/name@alias"),
    dest: Path = typer.Argument(..., help="Directory to fill: absent, or empty (/mnt/models), or this release"),
    trust_root: Optional[Path] = TrustRootOpt, trust_root_sha256: Optional[str] = TrustPinOpt,
    cache: Optional[Path] = FetchCacheOpt, parallel: int = ParallelOpt,
    cache_high: Optional[str] = HighOpt, cache_low: Optional[str] = LowOpt, recheck_hours: float = RecheckOpt,
    witness: Optional[list[str]] = WitnessOpt, witness_quorum: Optional[int] = WitnessQuorumOpt,
    part_size: str = typer.Option("8M", "--part-size", help="Range size a big file is split into (at most 64M; "
                                 "the fetch holds --parallel + 4 of them in memory)."),
    metrics_textfile: Optional[Path] = typer.Option(
        None, "--metrics-textfile", envvar="MODELREG_METRICS_TEXTFILE",
        help="Write the phase timings and outcome here for the node exporter's textfile collector "
             "(a *.prom file in its directory; written atomically, also when the fetch fails)."),
    with_base: bool = typer.Option(False, "--with-base", help="REF is an adapter: also fetch the base its release "
                                   "names (verified against it) into DEST/<base name>, before the adapter."),
    url: str = UrlOpt, token: str = TokenOpt, token_file: Optional[str] = TokenFileOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Fetch the approved release REF into DEST, verified against the pinned trust root.

    With --cache, through the node cache; without, straight into a staging directory inside DEST
    (every byte still hashed before DEST shows it), writing nothing outside DEST. An adapter goes into
    DEST/<adapter name> (vLLM's filesystem resolver layout), its adapter_config.json naming its base's
    served name; with --with-base its base into DEST/<base name>.
    """
    from registry.node.fetch import fetch as fetch_ref
    from registry.node.opener import NodePolicy
    from registry.node.progress import Reporter

    reporter = Reporter("json" if as_json else "human")

    def body() -> None:
        if cache is None and (cache_high or cache_low):
            raise CliError("--cache-high and --cache-low need --cache (MODELREG_CACHE)")
        node_cache = _cache(cache, cache_high, cache_low, recheck_hours) if cache is not None else None
        with _api(url, token, token_file) as api:
            try:
                policy = NodePolicy(trust_root, trust_root_sha256, _witness_policy(witness, witness_quorum))
                result = fetch_ref(ref, dest, api=api, policy=policy, cache=node_cache, parallel=parallel,
                                   part_size=parse_size(part_size) or 1, reporter=reporter, with_base=with_base)
            except BaseException as exc:
                if metrics_textfile is not None:
                    _write_fetch_metrics(metrics_textfile, ref, reporter.timings, exc, None)
                raise
            _report_fetched(api, result)
        if metrics_textfile is not None:
            _write_fetch_metrics(metrics_textfile, ref, result.timings, None, result.as_dict())
        times = ", ".join(f"{k} {v:.2f}s" for k, v in result.timings.items())
        what = "already there, re-hashed" if result.noop else (
            f"{result.downloaded_files} downloaded ({result.downloaded_bytes / 2**20:.1f} MiB), "
            f"{result.cached_files} from cache")
        if result.rejected_cached_files:
            what += (f" ({result.rejected_cached_files} cached blob(s) did not match their digest: "
                     "downloaded again)")
        resolved_from = _say_resolved(ref, result, as_json)
        adapter = ""
        if result.adapter_of is not None:
            bound = result.adapter_of
            adapter = (f"; adapter of {bound['model']}@{bound['version']} (served as {bound['served_name']}"
                       + (f", fetched into {result.base['dest']}" if result.base else "") + ")")
        _summary({**result.as_dict(), "resolved_from": resolved_from}, as_json,
                 f"{result.model}@{result.version} (serial {result.serial}) in {result.dest}: {result.files} files, "
                 f"{what}{adapter}; {times}")

    _run(body)


def _say_receipts(line: str) -> None:
    _say(f"warning: {line}", err=True)


def _report_fetched(api, result) -> None:
    """Tell the registry DEST holds the release (and, with --with-base, its base its own folder): best effort."""
    from registry.node.receipts import ReceiptSender

    fetched = [(result.model, result.version, result.dest)]
    if result.base:
        fetched.append((result.base.get("model"), result.base.get("version"), result.base.get("dest")))
    for model, version, where in fetched:
        if not where or not isinstance(model, str) or "/" not in model:
            continue
        path = str(Path(where).resolve())
        receipts = ReceiptSender(api, "fetch", scope=path, on_problem=_say_receipts)
        tenant, name = model.split("/", 1)
        receipts.hold(tenant, name, int(version), where="path", path=path)
        receipts.report()


def _witness_policy(keys: Optional[list[str]], quorum: Optional[int]):
    """The witnesses the node requires (``--witness``, ``--witness-quorum``), or None when it names none."""
    from registry.node.log_proofs import WitnessPolicy
    from registry.tlog.checkpoint import CosignatureVerifier
    from registry.tlog.note import parse_verifier_key

    keys = [k for entry in keys or () for k in entry.split()]
    if not keys:
        if quorum:
            raise CliError("--witness-quorum needs --witness keys")
        return None
    verifiers = tuple(parse_verifier_key(k, CosignatureVerifier) for k in keys)  # InvalidVerifierKeyError
    if len({(v.name, v.key_id) for v in verifiers}) != len(verifiers):
        raise CliError("a --witness key is given twice")
    quorum = len(verifiers) if quorum is None else quorum
    if quorum > len(verifiers):
        raise CliError(f"--witness-quorum {quorum} is more than the {len(verifiers)} --witness keys")
    return WitnessPolicy(verifiers, quorum)


def _say_resolved(ref_text: str, result, as_json: bool) -> str | None:
    """An alias fetched: say which version it resolved to (a LocalModelCache keeps it); ``model@alias``."""
    from registry.domain.refs import parse_ref

    alias = parse_ref(ref_text).alias
    if alias is None:
        return None
    resolved_from = f"{result.model}@{alias}"
    if as_json:
        typer.echo(json.dumps({"event": "resolved", "resolved_from": resolved_from, "version": result.version},
                              sort_keys=True))
    else:
        _say(f"resolved {resolved_from} to version {result.version}; a LocalModelCache keeps this version — pin "
             f"it (modelreg://{result.model}@{result.version})")
    return resolved_from


def _write_fetch_metrics(path: Path, ref_text: str, timings: dict[str, float], exc: BaseException | None,
                         result: dict[str, Any] | None) -> None:
    """The fetch's textfile; a path that cannot be written fails the command, after the fetch's own error."""
    from registry.client.errors import exit_code
    from registry.domain.errors import RegistryError
    from registry.domain.refs import parse_ref
    from registry.node.opener import ref_selector
    from registry.node.textfile import fetch_samples, write_textfile

    try:
        parsed = parse_ref(ref_text)
        model, ref = parsed.model, ref_selector(parsed)
    except RegistryError:
        model, ref = "", ref_text[:256]
    if exc is None:
        outcome = "ok"
    else:
        outcome = "interrupted" if isinstance(exc, KeyboardInterrupt) else exit_code(exc)[1]
    try:
        write_textfile(path, fetch_samples(model, ref, outcome, timings, result))
    except OSError as err:
        if exc is None:
            raise CliError(f"cannot write the metrics textfile {path}: {err.strerror or err}") from None
        _say(f"warning: cannot write the metrics textfile {path}: {err.strerror or err}", err=True)


def _write_cache_metrics(path: Path, cache, cursor: int, events_failing: bool = False) -> None:
    """``cache warm``'s textfile; a path that cannot be written is told on stderr (the warmer runs on)."""
    from registry.node.textfile import cache_samples, write_textfile

    try:
        write_textfile(path, cache_samples(cache.revocation_totals(), cursor, events_failing))
    except OSError as err:
        _say(f"warning: cannot write the metrics textfile {path}: {err.strerror or err}", err=True)


@app.command(epilog=EXIT_HELP)
def verify(
    directory: Path = typer.Argument(..., help="A directory `modelreg fetch` filled"),
    trust_root: Optional[Path] = TrustRootOpt, trust_root_sha256: Optional[str] = TrustPinOpt,
    cache: Optional[Path] = CacheOpt, parallel: int = ParallelOpt,
    url: str = UrlOpt, token: str = TokenOpt, token_file: Optional[str] = TokenFileOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Re-hash a fetched directory against its signed release (in parallel); report every difference.

    The release's signature is checked against the pinned root (walked through the roots the cache
    accepted, when --cache is given); its expiry is not: it was checked at fetch, and DIR is checked for
    what it holds. model.sig must be the bundle the release names. With --trust-root-sha256 and no
    file, root 1 comes from the registry (--url) and is walked forward there.
    """
    from registry.node.assemble import read_release_file, verify_directory
    from registry.node.opener import verify_recorded
    from registry.node.trust import NodeTrust, pinned_root
    from registry.signing.trust_root import RootError

    def body() -> None:
        import datetime as dt

        stored = read_release_file(directory)
        if stored is None or not isinstance(stored.get("envelope"), dict):
            raise CliError(f"{directory} holds no release file (.git/modelreg-release.json): was it fetched?")
        envelope = stored["envelope"]
        try:
            claimed = json.loads(base64.b64decode(envelope["payload"]))
            issued = dt.datetime.fromisoformat(claimed["issued_at"])
            model, ref = str(claimed["model"]), str(claimed["ref"])
        except (KeyError, TypeError, ValueError):
            raise RootError("the release file is not a release envelope", reason="malformed") from None
        if trust_root is None and trust_root_sha256:
            with _api(url, token, token_file) as api:
                trust = NodeTrust.load(pinned_root(None, trust_root_sha256, api.trust_root_bytes), cache)
                # Walked at the release's own issue time: an expired root is not the question here.
                root = trust.refresh(api.trust_root, now=issued)
        else:
            pinned = pinned_root(trust_root, trust_root_sha256)
            root = NodeTrust.load(pinned, cache).root if cache else pinned
        try:
            bundle = json.loads((directory / "model.sig").read_text())
        except (OSError, ValueError):
            bundle = {}
        # The clock is the release's own issue time: its signature is checked, its expiry deliberately not.
        release = verify_recorded(envelope, bundle, root, model=model, ref=ref, issued=issued)
        verify_directory(directory, release, parallel=parallel)
        _summary({"model": model, "version": release.version, "files": len(release.files), "ok": True},
                 as_json, f"{directory}: {model}@{release.version}, {len(release.files)} files verified")

    _run(body)


@cache_app.command("verify", epilog=EXIT_HELP)
def cache_verify(cache: Optional[Path] = CacheOpt, parallel: int = ParallelOpt, as_json: bool = JsonOpt) -> None:
    """Re-hash every cached blob; remove and report the ones whose bytes are not their digest (exit 13)."""
    from registry.domain.errors import IntegrityError

    def body() -> None:
        report = _cache(cache).verify(parallel=parallel)
        for bad in report.bad:
            if as_json:
                typer.echo(json.dumps({"event": "bad-blob", **bad}, sort_keys=True))
            else:
                _say(f"bad blob {bad['tenant']}/{bad['digest']}: its bytes hash to {bad['actual']} (removed)")
        _summary({"checked": report.checked, "bad": len(report.bad)}, as_json,
                 f"{report.checked} blobs checked, {len(report.bad)} bad (removed)")
        if report.bad:
            raise IntegrityError(f"{len(report.bad)} cached blob(s) did not match their digest and were removed: "
                                 + ", ".join(f"{b['tenant']}/{b['digest'][:16]}" for b in report.bad[:5]))

    _run(body)


@cache_app.command("warm", epilog=EXIT_HELP)
def cache_warm(
    refs: list[str] = typer.Argument(..., help="tenant/name@alias ... to keep cached"),
    trust_root: Optional[Path] = TrustRootOpt, trust_root_sha256: Optional[str] = TrustPinOpt,
    cache: Optional[Path] = CacheOpt, parallel: int = ParallelOpt,
    wait: int = typer.Option(300, "--wait", min=1, max=3600, help="Seconds of each long poll on the manifest."),
    once: bool = typer.Option(False, "--once", help="Apply the revocations not yet applied and bring each REF's "
                                                    "current release into the cache, then exit."),
    cache_high: Optional[str] = HighOpt, cache_low: Optional[str] = LowOpt, recheck_hours: float = RecheckOpt,
    witness: Optional[list[str]] = WitnessOpt, witness_quorum: Optional[int] = WitnessQuorumOpt,
    metrics_textfile: Optional[Path] = typer.Option(
        None, "--metrics-textfile", envvar="MODELREG_CACHE_METRICS_TEXTFILE",
        help="Write the revocation counters here for the node exporter's textfile collector (a *.prom file; "
             "rewritten atomically when they change)."),
    url: str = UrlOpt, token: str = TokenOpt, token_file: Optional[str] = TokenFileOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Keep the node cache ahead of alias moves, and revoked versions out of it.

    Long-polls each REF's manifest (``wait=``); on a change, verifies the release and caches its files.
    One more thread reads ``version.revoked`` from the event stream (cursor kept in the cache): a revoked
    version the cache holds is removed from it (blobs another live version lists stay) and reported
    (``{"event": "revoked"}`` with --json). Run as a DaemonSet. With --once, a failure to warm exits
    with its code; an event stream that fails (a refused token) is told on stderr, the warm goes on, and
    the exit is 16. Otherwise every failure is printed and retried; while the stream fails the textfile
    says so (``modelreg_cache_events_failing 1``).
    """
    from registry.client.errors import exit_code
    from registry.domain.refs import parse_ref
    from registry.node.opener import NodePolicy, ReleaseOpener
    from registry.node.progress import Reporter
    from registry.node.receipts import ReceiptSender
    from registry.node.revocations import RevocationFollower
    from registry.node.warm import keep_warm, warm_once_each

    def body() -> None:
        policy = NodePolicy(trust_root, trust_root_sha256, _witness_policy(witness, witness_quorum))
        parsed = [parse_ref(r) for r in refs]
        node_cache = _cache(cache, cache_high, cache_low, recheck_hours)
        reporter = Reporter("json" if as_json else "human")
        with _api(url, token, token_file) as api:
            def metrics(cursor: int | None = None) -> None:
                if metrics_textfile is not None:
                    _write_cache_metrics(metrics_textfile, node_cache,
                                         follower.cursor if cursor is None else cursor, follower.failing is not None)

            def events_failed(line: str) -> None:
                _say(f"error: revocations: {line}", err=True)
                metrics()

            def revoked(report) -> None:
                reporter.event("revoked", **report.as_dict())
                kept = f", kept {len(report.kept)} shared with live versions" if report.kept else ""
                reporter.line(f"revoked {report.tenant}/{report.model}@{report.version}: removed "
                              f"{len(report.removed)} blob(s) ({report.removed_bytes / 2**20:.1f} MiB) from the "
                              f"cache{kept}")
                metrics()

            def warmed(result) -> None:
                _summary(result.as_dict(), as_json,
                         f"{result.model}@{result.ref} -> {result.version}: {result.downloaded_files} downloaded, "
                         f"{result.cached_files} cached")

            def refused(ref, exc) -> None:
                _say(f"{_error_prefix(exit_code(exc)[1])}{ref}: {' '.join(str(exc).split())}", err=True)

            opener = ReleaseOpener(api, policy, state_dir=node_cache.root)
            cached_at = str(node_cache.root.resolve())
            receipts = ReceiptSender(api, "cache-warm", scope=cached_at, on_problem=_say_receipts)

            def held(result) -> None:
                tenant, name = result.model.split("/", 1)
                receipts.hold(tenant, name, result.version, where="path", path=cached_at)
                receipts.report()

            def revoked_and_dropped(report) -> None:
                revoked(report)
                receipts.drop_version(report.tenant, report.model, report.version)
                receipts.report()

            follower = RevocationFollower(api, node_cache, on_revoked=revoked_and_dropped, on_cursor=metrics,
                                          on_problem=events_failed)
            metrics()
            if once:
                warm_once_each(parsed, opener=opener, cache=node_cache, follower=follower,
                               on_result=lambda result: (warmed(result), held(result)),
                               parallel=parallel, reporter=reporter)
                return
            stop = threading.Event()
            receipts.keep_reporting(stop)

            def kept_warm(ref, result) -> None:
                _summary(result.as_dict(), as_json, f"{ref} -> {result.version} cached")
                held(result)

            try:
                keep_warm(parsed, opener=opener, cache=node_cache, follower=follower, wait=wait,
                          on_result=kept_warm, on_refused=refused, stop=stop, parallel=parallel, reporter=reporter)
            finally:
                stop.set()

    _run(body)


@cache_app.command("sweep", epilog=EXIT_HELP)
def cache_sweep(
    root: Path = typer.Argument(..., help="The LocalModelNodeGroup's volume on this node: KServe keeps each "
                                         "LocalModelCache in ROOT/models/<key>"),
    trust_root: Path = TrustRootOpt,
    cache: Optional[Path] = typer.Option(None, "--cache", envvar="MODELREG_CACHE",
                                         help="The sweeper's state directory: its event cursor, the revoked "
                                              "versions, the trust roots walked (default ~/.cache/modelreg)."),
    parallel: int = ParallelOpt,
    once: bool = typer.Option(False, "--once", help="Apply the revocations not yet applied, sweep once, exit."),
    interval: float = typer.Option(300.0, "--interval", min=1.0, help="Seconds between two full sweeps (every "
                                   "file re-hashed); revocations are acted on as they arrive in between."),
    remove_unattributed: bool = typer.Option(
        False, "--remove-unattributed", help="Also remove folders with no release record (never one being "
                                             "downloaded): only where the node group caches modelreg:// alone."),
    url: str = UrlOpt, token: str = TokenOpt, token_file: Optional[str] = TokenFileOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Remove revoked or altered KServe LocalModelCache folders from this node (a DaemonSet).

    For each ROOT/models/<key>: the release `modelreg fetch` recorded there is verified against the trust
    root (walked through the registry's rotations), model.sig against it, every file re-hashed; a version
    the registry revoked (its event stream, or its refusal of that version's release, asked at each full
    sweep) or any difference removes the folder (renamed aside, then
    deleted) and is reported (``{"event": "revoked"}``, ``{"event": "altered"}`` with --json). A folder with
    no release record is reported (``unattributed``) and left. With --once: exit 13 when a folder was altered,
    else 14 when one was revoked, else 16 when the event stream, a release's question or the trust root walk
    failed, else 0.
    """
    from registry.node.receipts import ReceiptSender
    from registry.node.revocations import RevocationFollower
    from registry.node.sweep import Sweeper, keep_sweeping, sweep_once

    def body() -> None:
        if not root.is_dir():
            raise CliError(f"{root} is not a directory: pass the node group's volume (KServe's folders are "
                           "ROOT/models/<key>)")
        state = _cache(cache)
        models = (root / "models").resolve()
        if state.root.resolve() == models or models in state.root.resolve().parents:
            raise CliError(f"the state directory {state.root} is inside {root}/models: choose --cache elsewhere")
        problems: list[str] = []

        def problem(line: str) -> None:
            problems.append(line)
            _say(f"error: sweep: {line}", err=True)

        with _api(url, token, token_file) as api:
            def ask_release(tenant: str, name: str, version: int, etag: str | None) -> str | None:
                answer = api.manifest(tenant, name, str(version), etag=etag)
                return etag if answer is None else answer.etag

            sweeper = Sweeper(root, state=state, trust_root_file=trust_root, fetch_root=api.trust_root,
                              ask_release=ask_release, parallel=parallel, remove_unattributed=remove_unattributed,
                              on_problem=problem)

            receipts = ReceiptSender(api, "cache-sweep", scope=str(root.resolve()), on_problem=_say_receipts)

            def sweep(full: bool) -> list:
                findings = sweeper.sweep(full=full)
                _report_swept(receipts, findings, full)
                for f in findings:
                    if f.event != "ok":
                        _report(f, as_json)
                if full:
                    counts = {kind: sum(f.event == kind for f in findings)
                              for kind in ("ok", "revoked", "altered", "unattributed", "unverified")}
                    # A sweeper that cannot follow the event stream says so in its summary too.
                    failing = follower.failing
                    _summary({"folders": len(findings), **counts, "event_stream": failing or "ok"}, as_json,
                             f"swept {len(findings)} folder(s) under {root}/models: {counts['ok']} verified, "
                             f"{counts['revoked']} revoked and {counts['altered']} altered (removed), "
                             f"{counts['unattributed']} unattributed, {counts['unverified']} unverified"
                             + (f"; the event stream is NOT followed: {failing}" if failing else ""))
                return findings

            wake = threading.Event()
            follower = RevocationFollower(api, state, on_revoked=lambda report: None,
                                          on_problem=lambda line: problem(f"revocations: {line}"),
                                          on_cursor=lambda cursor: wake.set())
            if once:
                sweep_once(sweep, follower, problems)
                return
            keep_sweeping(sweep, follower, wake, interval=interval, on_problem=problem)

    _run(body)


def _report_swept(receipts, findings: list, full: bool) -> None:
    """What a sweep removed is dropped; after a full sweep, the folders it verified are what it holds."""
    for f in findings:
        if not f.model or f.version is None or "/" not in f.model:
            continue
        tenant, name = f.model.split("/", 1)
        place = {"where": "path", "path": str(Path(f.folder).resolve())}
        if f.removed:
            receipts.drop(tenant, name, f.version, **place)
        elif f.event == "ok":
            receipts.hold(tenant, name, f.version, **place)
    # A partial sweep looked at some folders only: it drops what it removed, and drops nothing else.
    receipts.report(snapshot=full)


def _report(finding, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps({"event": finding.event, **{k: v for k, v in finding.as_dict().items()
                                                          if k != "event"}}, sort_keys=True))
        return
    what = f"{finding.model}@{finding.version} in {finding.folder}" if finding.model else finding.folder
    action = "removed" if finding.removed else "left alone"
    _say(f"{finding.event} {what}: {finding.reason or 'ok'} ({action})")


def _served(receipts, tenant: str, name: str, version: int) -> None:
    """serve-s3 serves ``tenant/name@version`` (bucket: the tenant, under the model's prefix): report it once."""
    place = {"where": "bucket", "bucket": tenant, "prefix": f"{name}@"}
    if receipts.holds(tenant, name, version, **place):
        return
    receipts.hold(tenant, name, version, **place)
    # Not in the request being answered: the registry's answer is no reason to keep a reader waiting.
    threading.Thread(target=receipts.report, daemon=True, name="receipts").start()


@app.command("serve-s3", epilog=EXIT_HELP)
def serve_s3(
    trust_root: Optional[Path] = TrustRootOpt, trust_root_sha256: Optional[str] = TrustPinOpt,
    cache: Optional[Path] = CacheOpt,
    host: str = typer.Option("127.0.0.1", "--host", help="Loopback address to listen on (nothing else is accepted)."),
    port: int = typer.Option(9000, "--port", min=0, max=65535, help="Port to listen on (0: any free one)."),
    max_chunks: int = typer.Option(16, "--max-chunks", min=1, max=256,
                                   help="Chunks (8 MiB each) held in memory at once, whatever the load."),
    cache_high: Optional[str] = HighOpt, cache_low: Optional[str] = LowOpt,
    witness: Optional[list[str]] = WitnessOpt, witness_quorum: Optional[int] = WitnessQuorumOpt,
    url: str = UrlOpt, token: str = TokenOpt, token_file: Optional[str] = TokenFileOpt,
    as_json: bool = typer.Option(False, "--json", help="Print the startup record as one JSON line."),
) -> None:
    """Serve the read subset of S3 (ListObjectsV2, HeadObject, GetObject with Range) over verified releases.

    Path-style: ``s3://<tenant>/<model>@<ref>/<path>`` (bucket = tenant). Requests must be SigV4-signed with
    the key pair in MODELREG_S3_ACCESS_KEY_ID / MODELREG_S3_SECRET_ACCESS_KEY. Every chunk is checked against
    the digest the release signs before a byte of it is served; verified chunks stay in the node cache. A
    revoked version (the event stream) stops being served within seconds, ranges in flight included.
    """
    from registry.node.opener import NodePolicy
    from registry.node.receipts import ReceiptSender
    from registry.node.serve_s3 import ChunkSource, S3Server, keys_from_env, serve

    def body() -> None:
        policy = NodePolicy(trust_root, trust_root_sha256, _witness_policy(witness, witness_quorum))
        keys = keys_from_env()
        if not keys:
            raise CliError("serve-s3 needs MODELREG_S3_ACCESS_KEY_ID and MODELREG_S3_SECRET_ACCESS_KEY")
        node_cache = _cache(cache, cache_high, cache_low)
        with _api(url, token, token_file) as api:
            listening_on = f"{host}:{port}"
            receipts = ReceiptSender(api, "serve-s3", scope=listening_on, on_problem=_say_receipts)
            source = ChunkSource(api, node_cache, policy=policy, max_chunks=max_chunks,
                                 on_opened=lambda tenant, name, version: _served(receipts, tenant, name, version))
            server = S3Server(host, port, source, keys)
            listening = f"http://{host}:{server.server_address[1]}"
            if as_json:
                typer.echo(json.dumps({"url": listening, "max_chunks": max_chunks}))
            else:
                _say(f"serve-s3 listening on {listening}")
            stop = threading.Event()
            receipts.keep_reporting(stop)

            def revoked(tenant: str, name: str, version: int) -> None:
                receipts.drop_version(tenant, name, version)
                receipts.report()

            try:
                serve(server, api, say=lambda line: _say(line, err=True), on_revoked=revoked)
            finally:
                stop.set()

    _run(body)
