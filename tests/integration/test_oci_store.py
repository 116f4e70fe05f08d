"""Stored OCI artifacts (migration 0022): built once at approval, served as stored, and the image shape.

The world is ``tests/support/oci_world.py``'s, fixture ``oci_world`` (acme/llm: 1 approved as ``prod``, 2
revoked, 3 awaiting; other/secret approved). The raw shape is stored in the approving transaction; the image
shape (one uncompressed tar layer per file at ``models/<path>``) by the ``build_oci_artifacts`` job, which
``drain`` runs here. Real clients read it: oras-py, and KServe's own ``kserve-storage`` code in a fresh
process, as KServe's storage initializer runs it for ``storageUri: oci+fetch://...``
(KServe's webhook hands it over as ``oci://``).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile

import kserve_storage  # noqa: F401  (KServe's storage code; in the test extras, never skipped)
import pytest
from sqlalchemy import func, select

from registry.db.models import Job, OciArtifact, VersionFacts, VersionFile
from registry.jobs import JobKind
from registry.services import loaders, oci_builds, revocations
from tests.integration.test_oci_endpoint import (  # noqa: F401  (fixtures)
    NAME,
    REPO,
    TENANT,
    _oras,
    _pulled,
    _sha256,
)
from tests.support.oci_world import build_world
from tests.support.registry import drain
from tests.support.releases import approve_standin

IMAGE_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INITIALIZER = (
    "import sys\n"
    "from kserve_storage import Storage\n"
    "Storage.download_files([sys.argv[1]], [sys.argv[2]])\n"
)

# oci_world: a copy of tests/support/oci_world.py's world, built once per worker and database.
pytestmark = pytest.mark.seeded(builder=build_world)


def _untar(data: bytes, root: str = "models/") -> dict[str, bytes]:
    """The regular files of a tar layer under ``root``, checked for the fixed metadata on the way."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            assert member.isreg() and (member.mode, member.uid, member.gid) == (0o644, 0, 0), member.name
            assert member.name.startswith(root), member.name
            out[member.name.removeprefix(root)] = tar.extractfile(member).read()
    return out


def _stored_shapes(container, number: int) -> set[str]:
    with container.session_factory() as session:
        model = loaders.load_model_unchecked(session, TENANT, NAME)
        version = loaders.load_version_unchecked(session, model, number)
        return set(session.scalars(select(OciArtifact.shape).where(OciArtifact.version_id == version.id)))


# --- stored once, at approval -------------------------------------------------------------------------


def test_the_raw_shape_is_stored_at_approval_and_the_image_shape_waits_for_its_job(oci_world):
    w = oci_world
    approve_standin(w.container, TENANT, NAME, 3)
    assert _stored_shapes(w.container, 3) == {"raw"}
    with w.http(w.node) as http:
        assert http.get(f"/v2/{REPO}/manifests/3").status_code == 200
        r = http.get(f"/v2/{REPO}/manifests/3-image")
        assert (r.status_code, r.json()["errors"][0]["code"]) == (404, "MANIFEST_UNKNOWN")
        assert "still being built (a worker job)" in r.json()["errors"][0]["message"]
        assert "3-image" not in http.get(f"/v2/{REPO}/tags/list").json()["tags"]
    drain(w.container)
    assert _stored_shapes(w.container, 3) == {"raw", "image"}
    with w.http(w.node) as http:
        got = http.get(f"/v2/{REPO}/manifests/3-image")
        assert got.status_code == 200 and got.headers["content-type"] == IMAGE_MANIFEST
        assert got.headers["docker-content-digest"] == _sha256(got.content)
        assert {"3", "3-image"} <= set(http.get(f"/v2/{REPO}/tags/list").json()["tags"])
        # By digest: one indexed lookup, the same bytes.
        assert http.get(f"/v2/{REPO}/manifests/{_sha256(got.content)}").content == got.content
    # The job again changes nothing (a job is idempotent): one row per shape, the same bytes.
    with w.container.session_factory() as session:
        version_id = session.scalar(select(OciArtifact.version_id).where(
            OciArtifact.manifest_digest == _sha256(got.content)))
        oci_builds.build_artifacts(w.container.session_factory, version_id, blob_store=w.container.blob_store,
                                   clock=w.container.clock)
        assert session.scalar(select(func.count()).select_from(OciArtifact)
                              .where(OciArtifact.version_id == version_id)) == 2


def test_recording_facts_again_does_not_change_a_served_digest(oci_world):
    w = oci_world
    with w.http(w.node) as http:
        before = {ref: http.head(f"/v2/{REPO}/manifests/{ref}").headers["docker-content-digest"]
                  for ref in ("1", "1-image")}
    with w.container.session_factory() as session:
        model = loaders.load_model_unchecked(session, TENANT, NAME)
        version = loaders.load_version_unchecked(session, model, 1)
        row = session.get(VersionFacts, version.id)
        row.facts = {**row.facts, "architecture": {"model_type": {"value": "rewritten"}}}
        session.commit()
    with w.http(w.node) as http:
        after = {ref: http.head(f"/v2/{REPO}/manifests/{ref}").headers["docker-content-digest"]
                 for ref in ("1", "1-image")}
        assert after == before
        assert http.get(f"/v2/{REPO}/manifests/{before['1']}").status_code == 200


def test_a_version_approved_before_stored_artifacts_gets_them_on_first_pull_once(oci_world):
    w = oci_world
    with w.container.session_factory() as session:
        # As migration 0022 finds a version approved before it: no stored artifact, no job.
        session.query(OciArtifact).delete()
        session.query(Job).filter(Job.kind == JobKind.BUILD_OCI_ARTIFACTS.value).delete()
        session.commit()
    with w.http(w.node) as http:
        first = http.get(f"/v2/{REPO}/manifests/prod")
        assert first.status_code == 200
        assert http.get(f"/v2/{REPO}/manifests/1").content == first.content
        r = http.get(f"/v2/{REPO}/manifests/prod-image")
        assert r.status_code == 404 and "still being built" in r.json()["errors"][0]["message"]
    assert _stored_shapes(w.container, 1) == {"raw"}
    drain(w.container)
    with w.http(w.node) as http:
        assert http.get(f"/v2/{REPO}/manifests/prod-image").status_code == 200


# --- the image shape, through real clients ---------------------------------------------------------------


def test_oras_pulls_the_image_tag_each_layer_a_tar_of_one_file_at_models(oci_store_world, tmp_path):
    w = oci_store_world
    drain(w.container)
    client = _oras(w, w.node)
    manifest = client.get_manifest(f"{w.host}/{REPO}:prod-image")
    assert manifest["mediaType"] == IMAGE_MANIFEST and "artifactType" not in manifest
    assert {layer["mediaType"] for layer in manifest["layers"]} == {"application/vnd.oci.image.layer.v1.tar"}
    client.pull(target=f"{w.host}/{REPO}:prod-image", outdir=str(tmp_path / "image"))
    # oras-py names a layer without a title by its digest; each is a tar of one file, at models/<path>.
    files: dict[str, bytes] = {}
    for name, data in _pulled(tmp_path / "image").items():
        assert _sha256(data) == name
        members = _untar(data)
        assert len(members) == 1
        files.update(members)
    assert files == w.files
    with w.http(w.pull_token(w.node, f"repository:{REPO}:pull")) as http:
        config = http.get(f"/v2/{REPO}/blobs/{manifest['config']['digest']}")
        assert _sha256(config.content) == manifest["config"]["digest"]
        image = json.loads(config.content)
        assert image["rootfs"] == {"type": "layers", "diff_ids": [layer["digest"] for layer in manifest["layers"]]}
        assert (image["os"], image["architecture"]) == ("linux", "amd64")
        # A range of a generated layer: the header's end, the file's first bytes, and on.
        layer = max(manifest["layers"], key=lambda layer: layer["size"])
        whole = http.get(f"/v2/{REPO}/blobs/{layer['digest']}").content
        ranged = http.get(f"/v2/{REPO}/blobs/{layer['digest']}", headers={"Range": "bytes=500-1500"})
        assert ranged.status_code == 206 and ranged.content == whole[500:1501]
        assert ranged.headers["content-range"] == f"bytes 500-1500/{layer['size']}"
        head = http.head(f"/v2/{REPO}/blobs/{layer['digest']}")
        assert (head.status_code, head.headers["content-length"]) == (200, str(layer["size"]))


def test_kserve_storage_downloads_oci_fetch_of_the_image_tag(oci_world, tmp_path):
    w = oci_world
    drain(w.container)
    auth = base64.b64encode(f"anyone:{w.node}".encode()).decode()
    config = tmp_path / "docker" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"auths": {w.host: {"auth": auth}}}))
    dest = tmp_path / "mnt" / "models"
    env = {**os.environ, "HOME": str(tmp_path), "KSERVE_OCI_DOCKER_CONFIG": str(config),
           "KSERVE_OCI_INSECURE_REGISTRY": "true"}
    # KServe's webhook turns storageUri oci+fetch://<host>/<repo>:<tag> into this URI for the initializer.
    done = subprocess.run([sys.executable, "-c", INITIALIZER, f"oci://{w.host}/{REPO}:1-image", str(dest)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = {p.relative_to(dest).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
           for p in sorted(dest.rglob("*")) if p.is_file()}
    assert got == {path: hashlib.sha256(data).hexdigest() for path, data in w.files.items()}
    # A revoked version is refused to the same code.
    refused = subprocess.run([sys.executable, "-c", INITIALIZER, f"oci://{w.host}/{REPO}:next-image",
                              str(tmp_path / "refused")], env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and not any((tmp_path / "refused").rglob("*"))


# --- refusals ---------------------------------------------------------------------------------------------


def test_a_revoked_versions_manifests_of_both_shapes_and_its_tar_layers_answer_404_at_once(oci_world):
    w = oci_world
    approve_standin(w.container, TENANT, NAME, 3)
    drain(w.container)
    with w.http(w.node) as http:
        digests = {ref: http.get(f"/v2/{REPO}/manifests/{ref}").headers["docker-content-digest"]
                   for ref in ("3", "3-image")}
        layers = http.get(f"/v2/{REPO}/manifests/3-image").json()["layers"]
        readme = next(layer["digest"] for layer in layers
                      if _untar(http.get(f"/v2/{REPO}/blobs/{layer['digest']}").content) == {"README.md": b"v3\n"})
    with w.container.session_factory() as session:
        revocations.revoke(session, w.admin, TENANT, NAME, 3, "found bad", clock=w.container.clock)
    with w.http(w.node) as http:
        for ref in ("3", "3-image", digests["3"], digests["3-image"]):
            r = http.get(f"/v2/{REPO}/manifests/{ref}")
            assert (r.status_code, r.json()["errors"][0]["code"]) == (404, "MANIFEST_UNKNOWN"), ref
        r = http.get(f"/v2/{REPO}/blobs/{readme}")
        assert (r.status_code, r.json()["errors"][0]["code"]) == (404, "BLOB_UNKNOWN")
        assert not {"3", "3-image"} & set(http.get(f"/v2/{REPO}/tags/list").json()["tags"])


def test_a_tar_layer_is_served_only_through_a_repository_whose_released_version_references_it(oci_world):
    w = oci_world
    drain(w.container)
    with w.http(w.outsider) as http:
        manifest = http.get("/v2/other/secret/manifests/1-image").json()
        config = manifest["config"]["digest"]
        theirs = [layer["digest"] for layer in manifest["layers"]]
        assert all(http.get(f"/v2/other/secret/blobs/{d}").status_code == 200 for d in theirs)
    with w.http(w.pull_token(w.node, f"repository:{REPO}:pull")) as http:
        for digest in (*theirs, config):
            for method in ("GET", "HEAD"):
                r = http.request(method, f"/v2/{REPO}/blobs/{digest}")
                assert r.status_code == 404, (digest, method)


@pytest.mark.timeout(900)
def test_many_small_files_are_packed_the_manifests_stay_small_and_every_file_arrives(oci_world, tmp_path):
    """20,000 tiny files: a version mirrored through the pipeline stands in as the rows and blobs it would
    leave (20,000 mirror and scan jobs would take many minutes here), 250 distinct contents so the store
    writes few blobs; approval and all after it is real."""
    w = oci_world
    many = {f"data/part-{i:05d}/{'n' * (i % 7)}value.json": b'{"i": %d}' % (i % 250) for i in range(20_000)}
    with w.container.session_factory() as session:
        model = loaders.load_model_unchecked(session, TENANT, NAME)
        version = loaders.load_version_unchecked(session, model, 3)
        for data in set(many.values()):
            w.container.blob_store.put([data], expected_sha256=hashlib.sha256(data).hexdigest())
        for path, data in many.items():
            session.add(VersionFile(version_id=version.id, path=path, size=len(data),
                                    sha256=hashlib.sha256(data).hexdigest()))
        session.commit()
    approve_standin(w.container, TENANT, NAME, 3)
    with w.http(w.node) as http:
        r = http.get(f"/v2/{REPO}/manifests/3")
        assert r.status_code == 404 and "still being built" in r.json()["errors"][0]["message"]
    drain(w.container)
    with w.http(w.node) as http:
        raw = http.get(f"/v2/{REPO}/manifests/3")
        image = http.get(f"/v2/{REPO}/manifests/3-image")
    assert raw.status_code == image.status_code == 200
    assert len(raw.content) < 4 * 1024 * 1024 and len(image.content) < 4 * 1024 * 1024
    assert len(json.loads(raw.content)["layers"]) < 1000 and len(json.loads(image.content)["layers"]) < 1000
    # oras-py pulls the raw shape: the small files arrive in one ModelPack tar layer, at their paths.
    client = _oras(w, w.node)
    client.pull(target=f"{w.host}/{REPO}:3", outdir=str(tmp_path / "raw"))
    pulled = _pulled(tmp_path / "raw")
    packed = pulled.pop("modelreg-small-files.tar")
    unpacked = _untar(packed, root="")
    assert {p: hashlib.sha256(d).hexdigest() for p, d in {**pulled, **unpacked}.items() if p in many} \
        == {p: hashlib.sha256(d).hexdigest() for p, d in many.items()}
    # And the image shape: every file under models/, with its bytes.
    client.pull(target=f"{w.host}/{REPO}:3-image", outdir=str(tmp_path / "image"))
    files: dict[str, bytes] = {}
    for data in _pulled(tmp_path / "image").values():
        files.update(_untar(data))
    assert {p: hashlib.sha256(d).hexdigest() for p, d in files.items() if p in many} \
        == {p: hashlib.sha256(d).hexdigest() for p, d in many.items()}
