"""Image-volume digests map back to versions (issue 36): a pod status as containerd reports an image volume (the
image *config* digest) and as CRI-O reports it (the *manifest* digest, with the repository), read by
``registry/domain/image_volumes.py`` and looked up by ``registry/services/image_digests.py``, for both shapes the
registry serves (raw ModelPack and image), the revoked version too, and never across tenants.

The world is ``tests/support/oci_world.py``'s (acme/llm: 1 approved, 2 revoked, 3 awaiting; other/secret approved)
with the build job drained, so both shapes of every released version are stored. The pods are shaped as
``tests/support/kube_pods.py`` writes them (KEP-5365's ``volumeStatus.image.imageRef``).
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from registry.db.models import OciArtifact
from registry.domain import modelpack
from registry.domain.errors import InvalidInputError
from registry.domain.image_volumes import KUBELET, mounted_image_volumes
from registry.services import loaders
from registry.services.image_digests import CONFIG, MANIFEST, version_for_image_digest
from tests.support.kube_pods import CONTAINERD, CRIO, image_ref, pod
from tests.support.oci_world import build_world
from tests.support.registry import drain

HOST = "modelreg.example:5000"


def build_world_with_images(container, root):
    """``build_world``, then the build job run: the image shape of every released version stored too."""
    built = build_world(container, root)
    drain(container)
    return built


pytestmark = pytest.mark.seeded(builder=build_world_with_images)


def _digests(container, tenant: str, name: str, number: int) -> dict[str, tuple[str, str]]:
    """Shape -> (manifest digest, config digest) of a version as stored."""
    with container.session_factory() as session:
        version = loaders.load_version_unchecked(session, loaders.load_model_unchecked(session, tenant, name), number)
        rows = session.scalars(select(OciArtifact).where(OciArtifact.version_id == version.id)).all()
        return {r.shape: (r.manifest_digest, r.config_digest) for r in rows}


def _mapped(container, tenant: str, reported_pod: dict) -> list[tuple[str, int, str, str]]:
    """What each image volume of the pod maps back to: (volume, version number, shape, digest kind)."""
    held = mounted_image_volumes(reported_pod)
    assert held is not None
    out = []
    with container.session_factory() as session:
        for v in held.volumes:
            assert v.source == KUBELET
            match = version_for_image_digest(session, tenant, v.digest)
            assert match is not None, v
            out.append((v.volume, match.version.number, match.shape, match.kind))
    return out


@pytest.mark.parametrize("runtime", [CONTAINERD, CRIO])
def test_a_pod_status_maps_each_image_volume_back_to_its_version(container, seeded, runtime):
    """containerd's report maps through the config digest, CRI-O's through the manifest digest, of the raw and the
    image shape alike; the revoked version 2 maps too (where it still runs is what a revocation asks)."""
    v1, v2 = _digests(container, "acme", "llm", 1), _digests(container, "acme", "llm", 2)
    # Version 2 was revoked before its image shape was built: its raw shape is what a node could still hold.
    assert (set(v1), set(v2)) == ({modelpack.RAW, modelpack.IMAGE}, {modelpack.RAW})
    volumes = {"weights": f"{HOST}/acme/llm:1", "weights-image": f"{HOST}/acme/llm:1-image",
               "old": f"{HOST}/acme/llm@{v2[modelpack.RAW][0]}"}
    reported = {
        "weights": image_ref(runtime, repository=f"{HOST}/acme/llm", manifest_digest=v1[modelpack.RAW][0],
                             config_digest=v1[modelpack.RAW][1]),
        "weights-image": image_ref(runtime, repository=f"{HOST}/acme/llm", manifest_digest=v1[modelpack.IMAGE][0],
                                   config_digest=v1[modelpack.IMAGE][1]),
        "old": image_ref(runtime, repository=f"{HOST}/acme/llm", manifest_digest=v2[modelpack.RAW][0],
                         config_digest=v2[modelpack.RAW][1]),
    }
    kind = CONFIG if runtime == CONTAINERD else MANIFEST
    assert _mapped(container, "acme", pod("serving", "llm-0", uid="uid-1", volumes=volumes, reported=reported)) == [
        ("weights", 1, modelpack.RAW, kind), ("weights-image", 1, modelpack.IMAGE, kind),
        ("old", 2, modelpack.RAW, kind)]


def test_the_kep_design_texts_flat_image_ref_maps_too(container, seeded):
    v1 = _digests(container, "acme", "llm", 1)
    reported = {"weights": v1[modelpack.IMAGE][1]}
    shaped = pod("serving", "llm-0", uid="uid-1", volumes={"weights": f"{HOST}/acme/llm:1-image"}, reported=reported,
                 kep_design=True)
    assert _mapped(container, "acme", shaped) == [("weights", 1, modelpack.IMAGE, CONFIG)]


def test_a_digest_is_found_only_in_its_own_tenant_and_model(container, seeded):
    secret = _digests(container, "other", "secret", 1)
    v1 = _digests(container, "acme", "llm", 1)
    with container.session_factory() as session:
        for manifest_digest, config_digest in secret.values():
            for digest in (manifest_digest, config_digest):
                assert version_for_image_digest(session, "acme", digest) is None
                assert version_for_image_digest(session, "other", digest).version.model.name == "secret"
        assert version_for_image_digest(session, "acme", v1[modelpack.RAW][1], model="llm").version.number == 1
        assert version_for_image_digest(session, "acme", v1[modelpack.RAW][1], model="secret") is None
        assert version_for_image_digest(session, "acme", "sha256:" + "e" * 64) is None
        for bad in ("sha256:" + "E" * 64, "sha512:" + "e" * 128, f"{HOST}/acme/llm@{v1[modelpack.RAW][0]}", ""):
            with pytest.raises(InvalidInputError):
                version_for_image_digest(session, "acme", bad)
