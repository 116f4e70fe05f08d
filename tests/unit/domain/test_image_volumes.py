"""The image volumes a pod holds and the digest mounted, read from pods as the API server sends them
(``tests/support/kube_pods.py``: KEP-5365's ``volumeStatus.image.imageRef``, as containerd and CRI-O fill it)."""

from __future__ import annotations

import copy

import pytest

from registry.domain.image_volumes import (
    KUBELET,
    MAX_VOLUMES,
    SPEC,
    digest_of_image_ref,
    mounted_image_volumes,
    repository_of,
)
from tests.support.kube_pods import CONTAINERD, CRIO, image_ref, pod

HOST = "modelreg.example:5000"
MANIFEST, CONFIG = "sha256:" + "1" * 64, "sha256:" + "2" * 64


def _held(p):
    got = mounted_image_volumes(p)
    return [(v.volume, v.digest, v.source) for v in got.volumes]


@pytest.mark.parametrize(("runtime", "digest"), [(CONTAINERD, CONFIG), (CRIO, MANIFEST)])
def test_each_runtime_reports_its_digest(runtime, digest):
    ref = image_ref(runtime, repository=f"{HOST}/acme/llm", manifest_digest=MANIFEST, config_digest=CONFIG)
    p = pod("serving", "llm-0", uid="u1", volumes={"model": f"{HOST}/acme/llm:7"}, reported={"model": ref})
    got = mounted_image_volumes(p)
    assert (got.namespace, got.name, got.uid, got.node) == ("serving", "llm-0", "u1", "gpu-1")
    assert _held(p) == [("model", digest, KUBELET)]


def test_an_init_or_ephemeral_containers_report_counts_and_the_first_report_wins():
    p = pod("serving", "llm-0", uid="u1", volumes={"model": f"{HOST}/acme/llm:7"}, reported={"model": CONFIG})
    p["status"]["initContainerStatuses"] = [{"name": "init", "volumeMounts": [
        {"name": "model", "mountPath": "/m", "volumeStatus": {"image": {"imageRef": MANIFEST}}}]}]
    assert _held(p) == [("model", MANIFEST, KUBELET)]
    p["status"]["containerStatuses"] = []
    p["status"]["ephemeralContainerStatuses"] = p["status"].pop("initContainerStatuses")
    assert _held(p) == [("model", MANIFEST, KUBELET)]


def test_a_digest_pinned_in_the_spec_counts_only_once_the_pod_runs_and_the_kubelet_reports_none():
    volumes = {"pinned": f"{HOST}/acme/llm@{MANIFEST}", "tagged": f"{HOST}/acme/llm:7"}
    assert _held(pod("serving", "llm-0", uid="u1", volumes=volumes)) == [("pinned", MANIFEST, SPEC)]
    assert _held(pod("serving", "llm-0", uid="u1", volumes=volumes, phase="Pending")) == []


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_holds_nothing(phase):
    p = pod("serving", "job-0", uid="u1", volumes={"model": "r/acme/llm:7"}, reported={"model": CONFIG}, phase=phase)
    assert _held(p) == []


def test_a_pod_on_no_node_holds_nothing():
    p = pod("serving", "llm-0", uid="u1", volumes={"model": "r/acme/llm:7"}, reported={"model": CONFIG})
    del p["spec"]["nodeName"]
    assert mounted_image_volumes(p).volumes == ()


def test_a_report_for_a_volume_that_is_no_image_volume_is_ignored():
    p = pod("serving", "llm-0", uid="u1", volumes={"model": "r/acme/llm:7"}, reported={"model": CONFIG})
    p["status"]["containerStatuses"][0]["volumeMounts"].append(
        {"name": "kube-api-access", "mountPath": "/var/run", "volumeStatus": {"image": {"imageRef": MANIFEST}}})
    assert _held(p) == [("model", CONFIG, KUBELET)]


def test_at_most_max_volumes_are_read():
    volumes = {f"v{i}": f"r/acme/llm@{MANIFEST}" for i in range(MAX_VOLUMES + 5)}
    assert len(mounted_image_volumes(pod("ns", "p", uid="u", volumes=volumes)).volumes) == MAX_VOLUMES


MALFORMED = [
    None, [], "pod", {}, {"metadata": None}, {"metadata": {"namespace": "ns", "name": "p"}},
    {"metadata": {"namespace": "ns", "name": "p", "uid": 7}},
    {"metadata": {"namespace": "ns", "name": "x" * 300, "uid": "u"}},
]


@pytest.mark.parametrize("obj", MALFORMED)
def test_an_object_that_is_no_pod_is_none(obj):
    assert mounted_image_volumes(obj) is None


def _mangled():
    base = pod("ns", "p", uid="u", volumes={"model": "r/acme/llm:7"}, reported={"model": CONFIG})
    paths = [
        ("spec", None), ("spec", []), ("status", "x"), ("spec.volumes", {"a": 1}), ("spec.volumes", [None, 3, "x"]),
        ("spec.nodeName", 5), ("status.containerStatuses", {"x": 1}), ("status.containerStatuses", [None, 1]),
        ("status.containerStatuses.0.volumeMounts", "x"), ("status.containerStatuses.0.volumeMounts.0", 1),
        ("status.containerStatuses.0.volumeMounts.0.volumeStatus", []),
        ("status.containerStatuses.0.volumeMounts.0.volumeStatus.image", "x"),
        ("status.containerStatuses.0.volumeMounts.0.volumeStatus.image.imageRef", ["sha256:" + "2" * 64]),
        ("status.containerStatuses.0.volumeMounts.0.volumeStatus.image.imageRef", "sha256:" + "Z" * 64),
        ("status.containerStatuses.0.volumeMounts.0.volumeStatus.image.imageRef", "x" * 10_000),
        ("spec.volumes.0.image.reference", None), ("spec.volumes.0.name", {"n": 1}),
    ]
    for path, value in paths:
        p = copy.deepcopy(base)
        keys = path.split(".")
        at = p
        for k in keys[:-1]:
            at = at[int(k)] if isinstance(at, list) else at[k]
        if isinstance(at, list):
            at[int(keys[-1])] = value
        else:
            at[keys[-1]] = value
        yield pytest.param(p, id=f"{path}={str(value)[:20]}")


@pytest.mark.parametrize("p", list(_mangled()))
def test_a_malformed_pod_is_read_without_raising_and_holds_no_bad_digest(p):
    got = mounted_image_volumes(p)
    assert got is not None
    assert all(v.digest == CONFIG for v in got.volumes)


def test_digest_of_image_ref():
    assert digest_of_image_ref(CONFIG) == CONFIG
    assert digest_of_image_ref(f"{HOST}/acme/llm@{MANIFEST}") == MANIFEST
    for bad in (None, 3, "", "sha256:abc", f"{HOST}/acme/llm:7", "sha512:" + "1" * 128, "x@" + MANIFEST + "@y"):
        assert digest_of_image_ref(bad) is None


def test_repository_of():
    hosts = frozenset({HOST, "localhost:5000"})
    assert repository_of(f"{HOST}/acme/llm:7", hosts) == "acme/llm"
    assert repository_of(f"{HOST}/acme/llm@{MANIFEST}", hosts) == "acme/llm"
    assert repository_of(f"{HOST}/mirror/acme/llm:7-image", hosts) == "acme/llm"
    assert repository_of("localhost:5000/acme/llm", hosts) == "acme/llm"
    assert repository_of("acme/llm:7") == "acme/llm"
    for bad in ("acme/llm:7", "docker.io/acme/llm:7", f"{HOST}/llm:7", f"{HOST}/Acme/llm", f"{HOST}/acme/",
                None, "", "x" * 600):
        assert repository_of(bad, hosts) is None
