"""The ``modelreg cluster watch`` command: the image volumes a cluster's pods mounted, reported to the registry
(``registry/node/cluster_watch.py``). It runs as its own Deployment (``deploy/cluster-watch/``)."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

import typer

from registry.cli._base import CliError, TokenFileOpt, TokenOpt, UrlOpt, app
from registry.cli.fetch import _api, _run

cluster_app = typer.Typer(help="Where the registry's releases run in a Kubernetes cluster.", no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")


class _JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"level": record.levelname.lower(), "message": record.getMessage()})


class _Stopped(BaseException):
    """SIGTERM: stop watching (a BaseException, as KeyboardInterrupt is, so no handler of errors catches it)."""


@cluster_app.command("watch")
def watch(
    kubeconfig: Optional[Path] = typer.Option(
        None, "--kubeconfig", envvar="KUBECONFIG",
        help="A kubeconfig file (default: the pod's in-cluster service account)."),
    selector: str = typer.Option(
        "modelreg.dev/admission=enabled", "--namespace-selector", envvar="MODELREG_NAMESPACE_SELECTOR",
        help="The label selector of the namespaces whose pods are watched."),
    registry_host: Optional[list[str]] = typer.Option(
        None, "--registry-host", envvar="MODELREG_REGISTRY_HOSTS",
        help="host[:port] an image reference names this registry's /v2 by; repeat for each (the variable: "
             "space-separated). Default: the host of --url. Images from anywhere else are not reported."),
    cluster: str = typer.Option(
        "cluster", "--cluster-name", envvar="MODELREG_CLUSTER_NAME",
        help="The name the reports carry as their node (lower-case letters, digits, dots and dashes): one per "
             "cluster, kept across restarts, so the registry knows a restarted watcher for the same one."),
    watch_seconds: int = typer.Option(300, "--watch-seconds", min=1, max=3600,
                                      help="How long one watch request runs before the namespaces are read again."),
    snapshot_seconds: float = typer.Option(
        300.0, "--snapshot-seconds", min=1.0, max=3600.0,
        help="How often everything held is reported as a snapshot (besides after each list), so that a drop "
             "missed while the watcher was down is still told; keep it under the registry's "
             "receipts_stale_after_seconds."),
    url: str = UrlOpt, token: str = TokenOpt, token_file: Optional[str] = TokenFileOpt,
    as_json: bool = typer.Option(False, "--json", help="Log as JSON lines ({\"level\", \"message\"}) on stderr."),
) -> None:
    """List and watch the pods of the labelled namespaces; report each image volume of this registry, with the
    digest its kubelet reports (KEP-5365) and the pod that mounted it, and each pod's removal. Runs until
    SIGTERM; waits and retries while the registry or the API server is down."""
    from kubernetes import client, config

    from registry.domain.receipts import check_node
    from registry.node.cluster_watch import ClusterWatch, PodSource

    def body() -> None:
        check_node(cluster, "--cluster-name")
        if not url:
            raise CliError("no registry URL: pass --url or set MODELREG_URL")
        hosts = [h for value in (registry_host or []) for h in value.split()] or [urlsplit(url).netloc]
        configuration = client.Configuration()
        try:
            if kubeconfig is not None:
                config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
            else:
                config.load_incluster_config(client_configuration=configuration)
        except (config.ConfigException, OSError) as exc:
            raise CliError(f"no Kubernetes API to watch: {' '.join(str(exc).split())}") from None
        handler = logging.StreamHandler()
        handler.setFormatter(_JsonLines() if as_json else logging.Formatter("%(message)s"))
        logging.basicConfig(level=logging.INFO, handlers=[handler])
        logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per report
        with _api(url, token, token_file) as api, client.ApiClient(configuration) as api_client:
            watcher = ClusterWatch(PodSource(api_client), api.report_receipts,
                                   hosts=frozenset(h.lower() for h in hosts), cluster=cluster, selector=selector,
                                   watch_seconds=watch_seconds, snapshot_seconds=snapshot_seconds)

            def stopped(*_: object) -> None:
                watcher.stop()
                raise _Stopped

            signal.signal(signal.SIGTERM, stopped)
            try:
                watcher.run()
            except _Stopped:
                pass

    _run(body)
