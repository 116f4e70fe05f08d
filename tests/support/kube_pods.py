"""Pods as a Kubernetes API server sends them, with image volumes reported as each container runtime reports them.

An image volume (KEP-4639) is ``spec.volumes[].image.reference``; since KEP-5365 (``ImageVolumeWithDigest``,
alpha in 1.36) the kubelet reports what it mounted in each mounting container's status,
``status.containerStatuses[].volumeMounts[].volumeStatus.image.imageRef``, with what the runtime's
``ImageStatus`` gives: containerd the image *config* digest alone (``sha256:...``, its image id), CRI-O the
*manifest* digest with the repository (``host/acme/llm@sha256:...``). ``kep_design=True`` writes the field where
the KEP's design text put it, flat on the mount (``volumeMounts[].imageRef``).
"""

from __future__ import annotations

from typing import Any

CONTAINERD, CRIO = "containerd", "cri-o"


def image_ref(runtime: str, *, repository: str, manifest_digest: str, config_digest: str) -> str:
    """What ``runtime`` reports as an image volume's ``imageRef``."""
    if runtime == CONTAINERD:
        return config_digest
    if runtime == CRIO:
        return f"{repository}@{manifest_digest}"
    raise ValueError(runtime)


def pod(namespace: str, name: str, *, uid: str, node: str | None = "gpu-1", phase: str = "Running",
        volumes: dict[str, str] | None = None, reported: dict[str, str] | None = None, kep_design: bool = False,
        resource_version: str = "1") -> dict[str, Any]:
    """A pod mounting ``volumes`` (volume name -> image reference) in container ``server`` at ``/models/<name>``;
    ``reported`` (volume name -> ``imageRef``) is what the kubelet reported for each, in the container's status."""
    volumes = volumes or {}
    reported = reported or {}
    mounts = []
    for volume in volumes:
        mount: dict[str, Any] = {"name": volume, "mountPath": f"/models/{volume}", "readOnly": True,
                                 "recursiveReadOnly": "Disabled"}
        if volume in reported:
            if kep_design:
                mount["imageRef"] = reported[volume]
            else:
                mount["volumeStatus"] = {"image": {"imageRef": reported[volume]}}
        mounts.append(mount)
    spec: dict[str, Any] = {
        "containers": [{"name": "server", "image": "vllm/vllm-openai:v0.11.0",
                        "volumeMounts": [{"name": v, "mountPath": f"/models/{v}", "readOnly": True} for v in volumes]}],
        "volumes": [{"name": v, "image": {"reference": r, "pullPolicy": "IfNotPresent"}} for v, r in volumes.items()]
        + [{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}],
        "restartPolicy": "Always", "serviceAccountName": "default",
    }
    if node is not None:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase}
    if node is not None:
        status["containerStatuses"] = [{
            "name": "server", "image": "docker.io/vllm/vllm-openai:v0.11.0",
            "imageID": "docker.io/vllm/vllm-openai@sha256:" + "0" * 64,
            "ready": phase == "Running", "restartCount": 0, "started": phase == "Running",
            "state": {"running": {"startedAt": "2026-12-07T09:00:00Z"}} if phase == "Running" else {"waiting": {}},
            "volumeMounts": mounts}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": namespace, "name": name, "uid": uid, "resourceVersion": resource_version,
                         "labels": {"app": name}},
            "spec": spec, "status": status}
