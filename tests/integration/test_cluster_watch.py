"""``modelreg cluster watch`` end to end: a real watcher process, a real ``modelreg serve``, and receipts reaching
the registry, asked back with ``modelreg provenance running``.

No Kubernetes API server can be installed here: the watcher talks to a local HTTP stand-in
(``tests/support/kube_apiserver.py``) that answers its list and watch requests as the API server does (paged
``PodList`` with ``resourceVersion`` and ``continue``, a chunked watch stream of JSON events with ``BOOKMARK``s,
``410 Gone`` as an ``ERROR`` event), through the real ``kubernetes`` client and a kubeconfig naming it. The
pods are shaped as the API server sends them, their image volumes reported as containerd (config digest) and
CRI-O (manifest digest) report them under KEP-5365 (``tests/support/kube_pods.py``).

The registry holds the seeded ``acme/llm`` v1 and v2 (``tests/support/release_seed.py``); the digests are
those ``/v2`` serves for them. The watcher reports with a node token read from a token file, as the other node
programs take their identity. The paged snapshot is watched in-process (its bounds made small: two places a
report, eight pages), reporting to the same real registry over HTTP.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import threading
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import httpx
from kubernetes import client, config

from registry.client.api import RegistryApi
from registry.node import cluster_watch
from registry.node.cluster_watch import ClusterWatch, PodSource
from tests.support.kube_apiserver import KubeApiServer
from tests.support.kube_pods import CONTAINERD, CRIO, image_ref, pod
from tests.support.release_seed import MODEL, TENANT, admin_token, seed_release
from tests.support.server import MODELREG, free_port, start_server, stop_process
from tests.support.waiting import wait_until

SELECTOR = "modelreg.dev/admission=enabled"
LABELLED = {"modelreg.dev/admission": "enabled"}


def _served_digests(url: str, token: str, number: int) -> tuple[str, str]:
    """(manifest digest, config digest) of version ``number``'s raw shape, as ``/v2`` serves it."""
    host = url.removeprefix("http://")
    answer = httpx.get(f"{url}/v2/token", params={"service": host, "scope": f"repository:{TENANT}/{MODEL}:pull"},
                       auth=("node", token), timeout=30)
    assert answer.status_code == 200, answer.text
    pull = answer.json()["token"]
    manifest = httpx.get(f"{url}/v2/{TENANT}/{MODEL}/manifests/{number}", timeout=30,
                         headers={"Authorization": f"Bearer {pull}",
                                  "Accept": "application/vnd.oci.image.manifest.v1+json"})
    assert manifest.status_code == 200, manifest.text
    return "sha256:" + hashlib.sha256(manifest.content).hexdigest(), manifest.json()["config"]["digest"]


class Cluster:
    """The registry's address, the watcher's token, the stand-in, and what the watcher is told to report."""

    def __init__(self, registry_url: str, api: KubeApiServer, tmp: Path) -> None:
        self.url = registry_url
        self.host = registry_url.removeprefix("http://")
        self.api = api
        self.tmp = tmp

    def volume(self, runtime: str, number: int, digests: dict[int, tuple[str, str]]) -> tuple[str, str]:
        """(reference, imageRef) of an image volume of version ``number`` as ``runtime`` reports it."""
        manifest, config = digests[number]
        repository = f"{self.host}/{TENANT}/{MODEL}"
        return f"{repository}:{number}", image_ref(runtime, repository=repository, manifest_digest=manifest,
                                                   config_digest=config)


def _running(url: str, admin: str, number: int) -> set[tuple[str, str, str]]:
    """(namespace, pod, volume) of every cluster-watch place holding version ``number``, not dropped."""
    answer = httpx.get(f"{url}/v1/provenance/{TENANT}/{MODEL}/running", params={"ref": str(number)},
                       headers={"Authorization": f"Bearer {admin}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    return {(p["place"]["namespace"], p["place"]["pod"], p["place"]["volume"]) for p in answer.json()["places"]
            if p["program"] == "cluster-watch"}


def _watcher(kubeconfig: Path, url: str, token_file: Path, log: Path, *extra: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MODELREG_", "KUBECONFIG"))}
    return subprocess.Popen(
        [MODELREG, "cluster", "watch", "--kubeconfig", str(kubeconfig), "--url", url, "--token-file", str(token_file),
         "--cluster-name", "test-cluster", "--namespace-selector", SELECTOR, "--watch-seconds", "2", *extra],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env)


def test_the_watcher_reports_what_pods_mounted_follows_the_watch_and_relists_on_410(tmp_path):
    data_dir = tmp_path / "data"
    (node_token,) = seed_release(data_dir, 1)
    admin = admin_token(data_dir)
    token_file = tmp_path / "token"
    token_file.write_text(node_token + "\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    api = KubeApiServer()
    log = tmp_path / "watch.log"
    with api.running():
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        api.label_namespace("serving", LABELLED)
        api.label_namespace("scratch", {})
        # The registry is down when the watcher starts: it lists, fails to report, and tries again.
        watcher = _watcher(kubeconfig, url, token_file, log)
        try:
            wait_until(lambda: api.requests_to("/api/v1/pods", watch="true"), "the watcher watches pods")
            server = start_server(data_dir, workers=0, port=port)
            try:
                _story(Cluster(url, api, tmp_path), server, admin, node_token, watcher, log)
            finally:
                server.stop()
        finally:
            stop_process(watcher, signal.SIGTERM, grace=10)
    assert watcher.returncode == 0, log.read_text()[-3000:]


def _story(cluster: Cluster, server, admin: str, node_token: str, watcher: subprocess.Popen, log: Path) -> None:
    api, url = cluster.api, cluster.url
    digests = {n: _served_digests(url, node_token, n) for n in (1, 2)}
    ref_a, rep_a = cluster.volume(CONTAINERD, 1, digests)
    ref_b, rep_b = cluster.volume(CRIO, 2, digests)
    api.put_pod(pod("serving", "llm-a", uid="uid-a", volumes={"model": ref_a}, reported={"model": rep_a}))
    api.put_pod(pod("serving", "llm-b", uid="uid-b", node="gpu-2", volumes={"model": ref_b},
                    reported={"model": rep_b}))
    # Not reported: a namespace without the label, an image from another registry, a pod not started.
    api.put_pod(pod("scratch", "llm-c", uid="uid-c", volumes={"model": ref_a}, reported={"model": rep_a}))
    api.put_pod(pod("serving", "busybox", uid="uid-d", volumes={"tools": "docker.io/library/busybox:1"},
                    reported={"tools": "sha256:" + "d" * 64}))
    api.put_pod(pod("serving", "llm-e", uid="uid-e", phase="Pending", volumes={"model": ref_a}))
    # A model of a tenant the watcher's identity may not report for: the registry refuses a whole report naming
    # it, so the watcher finds it, says so once, and reports the rest without it.
    api.put_pod(pod("serving", "intruder", uid="uid-x", volumes={"model": f"{cluster.host}/other/model:1"},
                    reported={"model": "sha256:" + "9" * 64}))

    def running(number: int) -> set[tuple[str, str, str]]:
        assert watcher.poll() is None, log.read_text()[-3000:]
        return _running(url, admin, number)

    # containerd's config digest maps to v1, CRI-O's manifest digest to v2; reported once the registry is up.
    wait_until(lambda: running(1) == {("serving", "llm-a", "model")}, "v1 held by llm-a (containerd's report)")
    wait_until(lambda: running(2) == {("serving", "llm-b", "model")}, "v2 held by llm-b (CRI-O's report)")
    answer = httpx.get(f"{url}/v1/provenance/{TENANT}/{MODEL}/running", params={"ref": "2"},
                       headers={"Authorization": f"Bearer {admin}"}, timeout=30).json()
    (place,) = [p for p in answer["places"] if p["program"] == "cluster-watch"]
    assert place["place"]["node"] == "gpu-2" and place["place"]["uid"] == "uid-b", place
    assert "may not report other/model" in log.read_text()

    # Watch events: a pod that starts and is reported, one deleted; malformed lines and objects are skipped.
    api.inject(b"{not json")
    api.inject(json.dumps({"type": "ADDED", "object": "a pod"}).encode())
    api.inject(json.dumps({"type": "MODIFIED", "object": {"metadata": {"namespace": "serving"}}}).encode())
    broken = pod("serving", "llm-f", uid="uid-f", volumes={"model": ref_a}, reported={"model": rep_a})
    broken["spec"]["volumes"] = "not a list"
    api.put_pod(broken)
    api.put_pod(pod("serving", "llm-e", uid="uid-e", volumes={"model": ref_a}, reported={"model": rep_a}))
    api.delete_pod("uid-a")
    wait_until(lambda: running(1) == {("serving", "llm-e", "model")}, "llm-e started, llm-a deleted")

    # A bookmark moves the resourceVersion on: the next watch resumes from it, not from before it.
    bookmark = api.bookmark()
    wait_until(lambda: api.requests_to("/api/v1/pods", watch="true", resourceVersion=bookmark),
               "a watch resumed from the bookmark's resourceVersion")

    # 410 Gone: the history is compacted (llm-b's deletion lost with it) and the open watch ends with an ERROR
    # event. Only a new list (and the snapshot it is reported as) can tell that llm-b is gone.
    lists = len(api.requests_to("/api/v1/pods", limit="500"))
    api.delete_pod("uid-b", silently=True)
    api.compact()
    api.expire_watches()
    wait_until(lambda: len(api.requests_to("/api/v1/pods", limit="500")) > lists, "a new list after 410 Gone")
    wait_until(lambda: running(2) == set(), "llm-b dropped by the snapshot after the re-list")
    assert running(1) == {("serving", "llm-e", "model")}

    # A namespace labelled later is listed and its pods reported.
    api.label_namespace("scratch", LABELLED)
    wait_until(lambda: running(1) == {("serving", "llm-e", "model"), ("scratch", "llm-c", "model")},
               "the newly labelled namespace's pod reported")


def _held_since(url: str, admin: str, number: int) -> dict[str, str]:
    """pod -> since, of every cluster-watch place holding version ``number``, not dropped."""
    answer = httpx.get(f"{url}/v1/provenance/{TENANT}/{MODEL}/running", params={"ref": str(number)},
                       headers={"Authorization": f"Bearer {admin}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    return {p["place"]["pod"]: p["since"] for p in answer.json()["places"] if p["program"] == "cluster-watch"}


def test_a_snapshot_over_one_report_goes_in_pages_periodically_and_tells_drops_missed_while_down(
        tmp_path, monkeypatch):
    monkeypatch.setattr(cluster_watch, "MAX_PLACES_PER_REPORT", 2)
    monkeypatch.setattr(cluster_watch, "SNAPSHOT_PAGES", 8)
    data_dir = tmp_path / "data"
    (node_token,) = seed_release(data_dir, 1)
    admin = admin_token(data_dir)
    # A snapshot of eight pages a second is past the default rate bound of reports.
    server = start_server(data_dir, workers=0, extra_env={"MODELREG_RECEIPTS_RATE_PER_MINUTE": "100000"})
    api = KubeApiServer()
    reports: list[dict] = []
    registry = RegistryApi(server.url, node_token)

    def report(body: dict) -> dict:
        reports.append(body)
        return registry.report_receipts(body)

    @contextmanager
    def watching():
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        watcher = ClusterWatch(PodSource(client.ApiClient(configuration), request_timeout=10), report,
                               hosts=frozenset({cluster.host}), cluster="test-cluster", selector=SELECTOR,
                               watch_seconds=1, snapshot_seconds=1, min_interval=0.05)
        thread = threading.Thread(target=watcher.run, daemon=True)
        thread.start()
        try:
            yield watcher
        finally:
            watcher.stop()
            thread.join(timeout=15)
            assert not thread.is_alive()

    def held() -> dict[str, str]:
        return _held_since(server.url, admin, 1)

    try:
        with api.running():
            kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
            api.label_namespace("serving", LABELLED)
            cluster = Cluster(server.url, api, tmp_path)
            ref, reported = cluster.volume(CONTAINERD, 1, {1: _served_digests(server.url, node_token, 1)})
            pods = [pod("serving", f"llm-{i}", uid=f"uid-{i}", volumes={"model": ref}, reported={"model": reported})
                    for i in range(7)]
            places = [cluster_watch.PodPlace("acme/llm", "", "serving", f"llm-{i}", f"uid-{i}", "model", "gpu-1")
                      for i in range(7)]
            # These seven fit eight pages of two (pages are chosen by a hash of the place).
            assert max(Counter(p.page(8) for p in places).values()) <= 2
            for p in pods[:2]:
                api.put_pod(p)
            with watching():
                # Two places: one report, the plain scope.
                first = wait_until(lambda: len(h := held()) == 2 and h, "two pods reported")
                # Five more arrive by the watch; the next periodic snapshot goes in pages, from the last to the
                # first, so the places reported as changes under page 0 move to their pages without a drop.
                for p in pods[2:]:
                    api.put_pod(p)
                wait_until(lambda: any(r["snapshot"] and r["scope"] == f"{SELECTOR}#7" for r in reports),
                           "a paged snapshot")
                wait_until(lambda: len(held()) == 7, "seven pods reported")
                mark = len(reports)
                wait_until(lambda: sum(r["snapshot"] for r in reports[mark:]) >= 16, "two more paged snapshots")
                assert len(held()) == 7 and {k: held()[k] for k in first} == first, "a place held all along"
            # While the watcher is down three pods go; a new one lists and its paged snapshot drops them.
            for i in (1, 2, 3):
                api.delete_pod(f"uid-{i}", silently=True)
            with watching():
                wait_until(lambda: set(held()) == {"llm-0", "llm-4", "llm-5", "llm-6"}, "the missed drops told")
                # The registry was told wrong meanwhile (a stray report of this identity drops llm-6): the next
                # periodic snapshot says again what the cluster holds.
                stray = places[6].body(False) | {"image_digest": reported.split("@")[-1]}
                registry.report_receipts({"program": "cluster-watch", "node": "test-cluster", "scope": "stray",
                                          "snapshot": False, "places": [stray]})
                assert "llm-6" not in held()
                wait_until(lambda: "llm-6" in held(), "llm-6 held again after a periodic snapshot")
            # Down again, two more go: two left fit one report, and the pages' scopes are emptied after it.
            for i in (4, 5):
                api.delete_pod(f"uid-{i}", silently=True)
            with watching():
                wait_until(lambda: set(held()) == {"llm-0", "llm-6"}, "the pages emptied after a start")
                assert held()["llm-0"] == first["llm-0"]
            assert all(len(r["places"]) <= 2 for r in reports)
            scopes = {r["scope"] for r in reports if r["snapshot"]}
            assert scopes == {SELECTOR} | {f"{SELECTOR}#{k}" for k in range(1, 8)}
    finally:
        server.stop()
