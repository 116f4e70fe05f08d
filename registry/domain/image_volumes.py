"""The image volumes a pod mounted, and the digest the kubelet reports for each, read from the pod as the API
server sends it; no I/O.

An image volume (KEP-4639) names an OCI object in ``spec.volumes[].image.reference``. Which object the kubelet
actually mounted is reported back, since KEP-5365 (``ImageVolumeWithDigest``, alpha in Kubernetes 1.36), in the
status of every container that mounts it: ``status.containerStatuses[].volumeMounts[].volumeStatus.image.imageRef``
(and the same under ``initContainerStatuses`` and ``ephemeralContainerStatuses``). The KEP's design text put the
field flat on the mount (``volumeMounts[].imageRef``); the API as merged nests it as above. Both are read, the
nested one first.

What ``imageRef`` holds depends on the runtime: containerd reports the image's *config* digest
(``sha256:...``, its image id), CRI-O the *manifest* digest with the repository
(``registry.example/acme/llm@sha256:...``). Either maps back to a version (the registry stores both digests of
every shape it serves: ``registry/services/image_digests.py``). Where no container reports one yet (the feature
gate off), a reference pinned by digest (``...@sha256:...``) of a ``Running`` pod is the manifest the kubelet
pulled, and is used, marked as read from the spec.

A pod holds nothing before it is scheduled on a node (``spec.nodeName``) and after it has finished
(``Succeeded`` or ``Failed``). Anything malformed is skipped, never
raised: a watcher must outlive any pod an API server sends it.

Example:
    >>> pod = {"metadata": {"namespace": "serving", "name": "llm-0", "uid": "u-1"},
    ...        "spec": {"nodeName": "gpu-1", "volumes": [{"name": "model", "image": {"reference": "reg/acme/llm:7"}}]},
    ...        "status": {"phase": "Running", "containerStatuses": [{"name": "server", "volumeMounts": [
    ...            {"name": "model", "mountPath": "/models",
    ...             "volumeStatus": {"image": {"imageRef": "sha256:" + "a" * 64}}}]}]}}
    >>> [(v.volume, v.digest, v.source) for v in mounted_image_volumes(pod).volumes]
    [('model', 'sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 'kubelet')]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from registry.domain.refs import NAME_RE

DIGEST_RE = re.compile(r"\Asha256:[0-9a-f]{64}\Z")
KUBELET, SPEC = "kubelet", "spec"
"""Where a digest was read: reported by the kubelet (KEP-5365), or pinned in the pod's spec."""
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
STATUS_LISTS = ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses")
MAX_VOLUMES = 64
"""Most image volumes read of one pod (the rest are skipped): a real pod mounts a handful."""
MAX_REFERENCE = 512
"""Longest reference or ``imageRef`` read (the API server refuses an ``imageRef`` over 256 characters)."""
MAX_NAME = 253


@dataclass(frozen=True, slots=True)
class ImageVolume:
    """One image volume of a pod: its name, the reference the spec gives, and the digest mounted."""

    volume: str
    reference: str
    digest: str
    source: str
    """:data:`KUBELET` or :data:`SPEC`."""


@dataclass(frozen=True, slots=True)
class PodImageVolumes:
    """A pod (by namespace, name and uid, on a node) and the image volumes it holds with a known digest."""

    namespace: str
    name: str
    uid: str
    node: str | None
    volumes: tuple[ImageVolume, ...]


def digest_of_image_ref(ref: Any) -> str | None:
    """The digest an ``imageRef`` (or a pinned reference) names: ``sha256:...`` alone (containerd's config
    digest) or after ``@`` (CRI-O's ``repository@sha256:...``); None for anything else.

    Example:
        >>> digest_of_image_ref("quay.io/acme/llm@sha256:" + "b" * 64)[:12]
        'sha256:bbbbb'
        >>> digest_of_image_ref("quay.io/acme/llm:7") is None
        True
    """
    if not isinstance(ref, str) or len(ref) > MAX_REFERENCE:
        return None
    digest = ref.rsplit("@", 1)[1] if "@" in ref else ref
    return digest if DIGEST_RE.match(digest) else None


def pod_identity(pod: Any) -> tuple[str, str, str] | None:
    """``(namespace, name, uid)`` of a pod object; None where any is missing or not a short string."""
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    if not isinstance(meta, dict):
        return None
    got = tuple(meta.get(k) for k in ("namespace", "name", "uid"))
    if not all(isinstance(v, str) and 0 < len(v) <= MAX_NAME for v in got):
        return None
    return got  # type: ignore[return-value]


def mounted_image_volumes(pod: Any) -> PodImageVolumes | None:
    """The image volumes ``pod`` holds, each with the digest mounted; None for an object that is no pod (no
    namespace, name or uid). A pod on no node yet, a finished one, or one whose volumes report no digest, holds
    none."""
    identity = pod_identity(pod)
    if identity is None:
        return None
    spec, status = _dict(pod.get("spec")), _dict(pod.get("status"))
    node = spec.get("nodeName")
    node = node if isinstance(node, str) and 0 < len(node) <= MAX_NAME else None
    if node is None or status.get("phase") in FINISHED_PHASES:
        return PodImageVolumes(*identity, node, ())
    references = _image_references(spec)
    reported = _reported_digests(status, references)
    volumes = []
    for volume, reference in references.items():
        digest = reported.get(volume)
        source = KUBELET
        if digest is None and status.get("phase") == "Running":
            digest, source = digest_of_image_ref(reference), SPEC
        if digest is not None:
            volumes.append(ImageVolume(volume, reference, digest, source))
    return PodImageVolumes(*identity, node, tuple(volumes))


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _image_references(spec: dict[str, Any]) -> dict[str, str]:
    """Volume name -> the reference of each image volume of the spec (the first :data:`MAX_VOLUMES`)."""
    out: dict[str, str] = {}
    for volume in _list(spec.get("volumes")):
        volume = _dict(volume)
        name, reference = volume.get("name"), _dict(volume.get("image")).get("reference")
        if (isinstance(name, str) and 0 < len(name) <= MAX_NAME and isinstance(reference, str)
                and 0 < len(reference) <= MAX_REFERENCE and name not in out):
            out[name] = reference
            if len(out) == MAX_VOLUMES:
                break
    return out


def _reported_digests(status: dict[str, Any], references: dict[str, str]) -> dict[str, str]:
    """Volume name -> the digest a container's status reports mounted, for the image volumes of the spec."""
    out: dict[str, str] = {}
    for key in STATUS_LISTS:
        for container in _list(status.get(key)):
            for mount in _list(_dict(container).get("volumeMounts")):
                mount = _dict(mount)
                name = mount.get("name")
                if not isinstance(name, str) or name not in references or name in out:
                    continue
                ref = _dict(_dict(mount.get("volumeStatus")).get("image")).get("imageRef", mount.get("imageRef"))
                digest = digest_of_image_ref(ref)
                if digest is not None:
                    out[name] = digest
    return out


def repository_of(reference: Any, hosts: frozenset[str] | None = None) -> str | None:
    """The registry repository (``tenant/name``) an image reference names: its last two path components, the
    host, tag and digest left off; None where it has fewer, or its host is not one of ``hosts`` (when given:
    the hosts this registry's ``/v2`` is served at, so an image from elsewhere is never taken for a model).

    Example:
        >>> repository_of("modelreg.example:5000/acme/llm:7-image", frozenset({"modelreg.example:5000"}))
        'acme/llm'
        >>> repository_of("docker.io/library/busybox:1", frozenset({"modelreg.example:5000"})) is None
        True
    """
    if not isinstance(reference, str) or not 0 < len(reference) <= MAX_REFERENCE:
        return None
    name = reference.split("@", 1)[0]
    parts = name.split("/")
    # A reference's first component is a host when it has a dot or a port, or is localhost (the distribution
    # reference grammar); the rest is the path, whose last component may carry a tag.
    host = parts[0] if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost") else None
    path = parts[1:] if host is not None else parts
    if hosts is not None and (host is None or host.lower() not in hosts):
        return None
    if len(path) < 2:
        return None
    tenant, model = path[-2], path[-1].split(":", 1)[0]
    if not (NAME_RE.match(tenant) and NAME_RE.match(model)):
        return None
    return f"{tenant}/{model}"
