"""The ``modelreg admission`` command: the Kubernetes admission webhook (``registry/node/admission.py``)."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Optional

import typer

from registry.cli._base import CliError, TokenFileOpt, TokenOpt, _say, app
from registry.cli.fetch import EXIT_HELP, TrustPinOpt, TrustRootOpt, _run


@app.command("admission", epilog=EXIT_HELP)
def admission(
    listen: str = typer.Option("0.0.0.0:8443", "--listen", help="host:port the HTTPS server listens on."),
    tls_cert: Path = typer.Option(..., "--tls-cert", help="The server's certificate chain (PEM)."),
    tls_key: Path = typer.Option(..., "--tls-key", help="The server's private key (PEM)."),
    registry: str = typer.Option(..., "--registry", envvar="MODELREG_URL", help="Registry URL."),
    token: Optional[str] = TokenOpt, token_file: Optional[str] = TokenFileOpt,
    trust_root: Optional[Path] = TrustRootOpt, trust_root_sha256: Optional[str] = TrustPinOpt,
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", envvar="MODELREG_STATE_DIR",
                                             help="Where the verified cache, accepted roots and serials are kept "
                                                  "(default: none; a restart then starts with an empty cache)."),
    refresh_seconds: float = typer.Option(
        30.0, "--refresh-seconds", min=0, max=300,
        help="Seconds a reference the registry decided allowed is answered from the webhook's proof without "
             "asking again (its record reported in batches); 0: every review asks the registry."),
    as_json: bool = typer.Option(False, "--json", help="Print the startup record as one JSON line."),
) -> None:
    """Serve the admission webhook: POST /validate and /mutate (AdmissionReview admission.k8s.io/v1), GET
    /healthz and /readyz, over TLS. Each model reference of a pod or KServe resource is decided by the
    registry (token: role admission); while the registry is unreachable, only what the verified cache proves
    is admitted, with a warning."""
    from registry.client.api import RegistryApi
    from registry.client.token_file import token_source
    from registry.node.admission import (
        REGISTRY_TIMEOUT,
        REPORT_TIMEOUT,
        AdmissionServer,
        VerifiedCache,
        Webhook,
        parse_listen,
        serve,
    )
    from registry.node.opener import NodePolicy, ReleaseOpener
    from registry.node.revocations import RevocationFollower

    def body() -> None:
        if not token and not token_file:
            raise CliError("no token: pass --token-file FILE (or --token, MODELREG_TOKEN)")
        policy = NodePolicy(trust_root, trust_root_sha256)
        host, port = parse_listen(listen)
        cache = VerifiedCache(state_dir)
        say = lambda line: _say(line, err=True)  # noqa: E731
        with RegistryApi(registry, token_source(token, token_file), timeout=REGISTRY_TIMEOUT) as api, \
                RegistryApi(registry, token_source(token, token_file)) as events_api, \
                RegistryApi(registry, token_source(token, token_file), timeout=REPORT_TIMEOUT) as report_api:
            opener = ReleaseOpener(api, policy, state_dir=state_dir)
            webhook = Webhook(api, opener, cache, refresh_seconds=refresh_seconds, report_api=report_api)
            try:
                server = AdmissionServer((host, port), webhook, tls_cert=tls_cert, tls_key=tls_key)
            except (OSError, ValueError) as exc:
                raise CliError(f"cannot serve on {listen} with {tls_cert} and {tls_key}: {exc}") from None
            follower = RevocationFollower(
                events_api, cache,  # type: ignore[arg-type] (the follower's cache interface)
                on_revoked=lambda r: say(f"revoked {r.tenant}/{r.model}@{r.version}: dropped from the cache"),
                on_problem=lambda line: say(f"error: revocations: {line}"))
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            if as_json:
                typer.echo(json.dumps({"url": f"https://{host}:{server.server_address[1]}"}), nl=True)
            try:
                serve(webhook, server, follower, stop=stop, say=say)
            except KeyboardInterrupt:
                stop.set()

    _run(body)
