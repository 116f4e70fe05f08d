"""``PodSource``, the watcher's reading of the Kubernetes API, through the real ``kubernetes`` client and a
kubeconfig, against the API-server stand-in (``tests/support/kube_apiserver.py``: no API server can be installed
here): a paged list whose continue token expires midway is read again from the start; a watch from a
resourceVersion the server no longer holds raises ``WatchExpiredError`` (the 410 ``ERROR`` event); malformed
lines in a watch stream are skipped; a refused token is an error, never a crash."""

from __future__ import annotations

import json
import threading

import pytest
from kubernetes import client, config

from registry.node import cluster_watch
from registry.node.cluster_watch import KubeApiError, PodSource, WatchExpiredError
from tests.support.kube_apiserver import KubeApiServer
from tests.support.kube_pods import pod
from tests.support.waiting import wait_until


@pytest.fixture
def api(tmp_path):
    server = KubeApiServer()
    with server.running():
        server.kubeconfig_path = server.kubeconfig(tmp_path / "kubeconfig")
        yield server


def _source(api) -> PodSource:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(api.kubeconfig_path), client_configuration=configuration)
    return PodSource(client.ApiClient(configuration), request_timeout=10)


def test_a_list_cut_by_an_expired_continue_token_is_read_again_from_the_start(api, monkeypatch):
    monkeypatch.setattr(cluster_watch, "LIST_PAGE", 2)
    for i in range(5):
        api.put_pod(pod("serving", f"p{i}", uid=f"u{i}"))
    api.expire_continue_tokens(after_pages=1)
    pods, version = _source(api).list_pods()
    assert sorted(p["metadata"]["name"] for p in pods) == [f"p{i}" for i in range(5)]
    assert version == str(api.version)
    firsts = [r for r in api.requests_to("/api/v1/pods", limit="2") if "continue" not in r.query]
    assert len(firsts) == 2, "listed again from the first page after the 410"


def test_a_watch_from_a_compacted_resource_version_raises_watch_expired(api):
    old = api.put_pod(pod("serving", "p0", uid="u0"))
    api.put_pod(pod("serving", "p1", uid="u1"))
    api.compact()
    with pytest.raises(WatchExpiredError):
        list(_source(api).watch_pods(str(int(old) - 1), 2))


def test_a_watch_skips_malformed_lines_and_ends_when_the_server_closes_it(api):
    start = str(api.version)
    source = _source(api)
    got = []

    def watch():
        for event in source.watch_pods(start, 3):
            got.append(event)

    watcher = threading.Thread(target=watch)
    watcher.start()
    api.put_pod(pod("serving", "p0", uid="u0"))
    # The stream is open (the first event came through it) before the raw lines are written into it.
    wait_until(lambda: got, "the first event")
    api.inject(b"{not json")
    api.inject(b"[1, 2]")
    api.inject(json.dumps({"type": "ADDED", "object": None}).encode())
    api.put_pod(pod("serving", "p1", uid="u1"))
    api.bookmark()
    watcher.join(timeout=30)
    assert not watcher.is_alive()
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in got] == [
        ("ADDED", "p0"), ("ADDED", "p1"), ("BOOKMARK", None)]
    (request,) = api.requests_to("/api/v1/pods", watch="true")
    assert request.query["resourceVersion"] == start and request.query["allowWatchBookmarks"] == "true"


def test_a_refused_token_is_an_error(api, tmp_path):
    doc = json.loads(api.kubeconfig_path.read_text())
    doc["users"][0]["user"]["token"] = "wrong"
    api.kubeconfig_path.write_text(json.dumps(doc))
    with pytest.raises(KubeApiError, match="401|Unauthorized"):
        _source(api).labelled_namespaces("modelreg.dev/admission=enabled")
