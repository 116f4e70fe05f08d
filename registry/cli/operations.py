"""The ``modelreg`` command: the audit log, the database, the store and the processes.

``audit``, ``migrate``, ``gc`` (``registry/services/gc.py``), ``chunks backfill``, ``serve``, ``worker``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from registry.cli._base import CliError, JsonOpt, TokenOpt, UrlOpt, _client, _emit, app, audit_app


@audit_app.command("verify")
def audit_verify(
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="embedded registry directory"),
    checkpoints: Optional[Path] = typer.Option(
        None, "--checkpoints",
        help="JSON file of checkpoints saved earlier (`modelreg audit checkpoints --json`)"),
    public_keys: list[Path] = typer.Option(
        [], "--public-key", help="registry public key PEM the checkpoints must be signed with (repeatable; "
                                 "default: the registry's own signing key)"),
    log_checkpoint: Optional[Path] = typer.Option(
        None, "--checkpoint", help="a log checkpoint saved earlier (the bytes of /log/checkpoint): prove the "
                                   "registry at --url extends it, from tiles and proofs, without the database"),
    log_key: Optional[str] = typer.Option(
        None, "--log-key", help="with --checkpoint: the log's verifier key (`modelreg keys export`); default the "
                                "one the registry serves, which must have signed the saved checkpoint"),
    save: Optional[Path] = typer.Option(None, "--save", help="with --checkpoint: keep the log's current "
                                                             "checkpoint here once it is proven"),
    url: Optional[str] = typer.Option(None, "--url", envvar="MODELREG_URL", help="with --checkpoint: the registry"),
    as_json: bool = JsonOpt,
) -> None:
    """Recompute the audit chain in the database; name the first altered, removed or reordered event.

    With --checkpoints, also check each checkpoint's signature and that the chain still reaches every
    checkpointed event with the signed hash: a cut or recomputed chain fails. With --checkpoint, prove
    instead that the registry's verifiable log today extends a log checkpoint saved earlier.
    """
    if log_checkpoint is not None:
        _verify_log_checkpoint(log_checkpoint, log_key, save, url, as_json)
        return
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


def _verify_log_checkpoint(path: Path, log_key: Optional[str], save: Optional[Path], url: Optional[str],
                           as_json: bool) -> None:
    from registry import statefile
    from registry.client.api import RegistryApi
    from registry.client.log_audit import verify_log_extends

    if not url:
        raise CliError("no registry URL: pass --url or set MODELREG_URL (e.g. http://127.0.0.1:8080)")
    if log_key is not None and Path(log_key).is_file():
        log_key = Path(log_key).read_text().strip()
    with RegistryApi(url, None) as api:
        proven = verify_log_extends(api, path.read_bytes(), log_key)
    if save is not None:
        statefile.write_atomic(save, proven.checkpoint, mode=0o644)
    _emit({"ok": True, "origin": proven.origin, "old_size": proven.old_size, "new_size": proven.new_size},
          as_json, f"log {proven.origin} extends the saved checkpoint: size {proven.old_size} -> {proven.new_size}")


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
            page = client.audit_checkpoints(found[-1]["id"] if found else 0, 1000)
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
    older_than_hours: float = typer.Option(
        24.0, "--older-than-hours", min=0.0,
        help="sweep incomplete uploads, and stored bytes never recorded, left at least this long ago"),
    grace_hours: float = typer.Option(24.0, "--grace-hours", min=0.0,
                                      help="delete unreferenced blobs only when last used at least this long ago"),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir"),
    as_json: bool = JsonOpt,
) -> None:
    """Sweep the blob store (temporary files and unfinished uploads of crashed writers) and the model
    copies of evals whose worker was killed (on this machine), then delete the blobs nothing references (no version that
    retention kept, eval set or eval log) once their grace period is over. A referenced blob is never deleted, even
    while a submission takes it up."""
    import datetime as dt

    from registry.bootstrap import bootstrap, load_settings, prepare_embedded
    from registry.evals import workdirs
    from registry.services import gc as garbage

    settings = load_settings(**({"data_dir": data_dir} if data_dir else {}))
    if settings.database_url is None:
        prepare_embedded(settings)
    container = bootstrap(settings, migrate=settings.database_url is None)
    try:
        left = dt.timedelta(hours=older_than_hours)
        swept = container.blob_store.sweep_incomplete(left)
        eval_dirs = workdirs.sweep(settings.eval_work_dir)
        report = garbage.collect(container.session_factory, container.blob_store, container.clock,
                                 dt.timedelta(hours=grace_hours), orphan_age=left)
    finally:
        container.dispose()
    _emit({"swept": swept, "eval_dirs_swept": eval_dirs, **report.as_dict()}, as_json,
          [f"swept {swept} incomplete upload(s)",
           f"deleted {report.deleted} unreferenced blob(s) ({report.deleted_bytes} bytes) and "
           f"{report.orphans_deleted} stored without a record; kept {report.kept_referenced} referenced "
           f"and {report.kept_young} within the grace period"
           + (f"; {report.errors} could not be deleted (see the log)" if report.errors else ""),
           f"removed {eval_dirs} eval work directory(ies) left by killed workers"])


chunks_app = typer.Typer(help="Chunk digests of stored blobs, which releases sign for streaming loaders.",
                         no_args_is_help=True)
app.add_typer(chunks_app, name="chunks")


@chunks_app.command("backfill")
def chunks_backfill(data_dir: Optional[Path] = typer.Option(None, "--data-dir"), as_json: bool = JsonOpt) -> None:
    """Queue a `record_chunks` job for every blob of a sealed version that has no chunk digests yet
    (versions sealed before they were recorded); the workers read each blob once. Running it again
    queues only what is still missing."""
    from registry.bootstrap import bootstrap
    from registry.services import chunks

    container = bootstrap(_local_settings(data_dir))
    try:
        queued = chunks.queue_backfill(container.session_factory, container.ports)
    finally:
        container.dispose()
    _emit({"queued": queued}, as_json, f"queued {queued} blob(s) for chunk digests (record_chunks jobs)")


# --- processes -------------------------------------------------------------------------------


def _component(name: str) -> Any:
    from importlib.metadata import entry_points  # 15 ms of imports: only the commands that start processes pay

    found = [ep for ep in entry_points(group="modelreg.components") if ep.name == name]
    if not found:
        raise CliError(f"component {name!r} is not installed (reinstall modelreg: pip install -e .)")
    return found[0].load()


def _releasing_server(config: Any, watcher: Any) -> Any:
    """uvicorn's server, answering every long-poll (304) as soon as a stop is asked for.

    uvicorn drains in-flight requests before the app's lifespan shutdown runs: without this, each
    waiting ``?wait=`` request would hold the stop for up to its wait.
    """
    import uvicorn

    class ReleasingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            watcher.release_all_threadsafe()
            super().handle_exit(sig, frame)

    return ReleasingServer(config)


@app.command()
def serve(
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="state directory (default ./.modelreg)"),
    host: Optional[str] = typer.Option(None, "--host"),
    port: Optional[int] = typer.Option(None, "--port"),
    workers: Optional[int] = typer.Option(None, "--workers", help="worker threads in this process"),
    as_json: bool = typer.Option(False, "--json", help="print the startup record as one JSON line"),
) -> None:
    """Run the API and N worker threads in one process (the embedded default: SQLite and local blobs)."""
    import gc as collector  # not the `gc` command of this module
    import threading

    import uvicorn

    from registry.bootstrap import (
        bootstrap,
        ensure_initial_admin,
        ensure_trust_root,
        load_settings,
        prepare_embedded,
    )

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
    ensure_trust_root(container)
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
    from registry import logs

    logs.configure(settings.log_format, settings.log_level)
    try:
        # log_config=None: the logging configured above stays; uvicorn's access log (whole URLs, query
        # strings included) is off: the API logs its own access line, with the request id.
        app = create_app(container)
        # What start-up built (modules, routes, schemas, mappers) lives as long as the process: out of the
        # collector's reach, a full collection while serving walks only what requests made, not a pause
        # of 0.1-0.2 s in the middle of answering nodes (bench/README.md, Release manifest).
        collector.collect()
        collector.freeze()
        config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None,
                                log_level=settings.log_level.lower(), access_log=False)
        _releasing_server(config, app.state.event_watcher).run()
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
    from registry import logs
    from registry.bootstrap import bootstrap, load_settings, prepare_embedded

    settings = load_settings()
    logs.configure("json" if as_json else settings.log_format, settings.log_level)
    # The same key as `serve` beside it: the data directory's, made on first start, unless one is set.
    prepare_embedded(settings)
    container = bootstrap(settings)
    try:
        _component("worker-process")(container, concurrency)
    finally:
        container.dispose()

