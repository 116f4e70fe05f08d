"""Real OCI peers against the ``/v2`` endpoint: Debian's ``skopeo`` and the CNCF distribution registry.

The world is ``tests/support/oci_world.py``'s (acme/llm: 1 approved as ``prod``, 2 revoked, 3 awaiting; other's
secret), served by uvicorn. skopeo inspects and copies through the 401 -> ``/v2/token`` -> Bearer dance with a
modelreg token as its ``--creds`` password; it copies into an OCI layout (every blob checked against its
digest) and into Debian's ``docker-registry`` on loopback, from which oras-py pulls every file back byte for
byte: replication into a plain registry works. With ``oci_blob_redirect`` on an S3 store, blob GETs answer 307
to a presigned URL, and every client follows it to the right bytes; a caller who may not pull gets no URL.
SQLite and PostgreSQL; the local store and S3 where a test moves bytes.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import httpx
import oras.client
import pytest

from tests.support.distribution_registry import distribution_registry, require
from tests.support.oci_world import (
    REPO,
    World,
    build_world,
    oras_client,
    pulled_files,
    served_copy,
    served_world,
    sha256_of,
)

# world: a copy of tests/support/oci_world.py's world, built once per worker and database.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.seeded(builder=build_world)]


@pytest.fixture(scope="session")
def skopeo_bin() -> str:
    return require("skopeo")


@pytest.fixture
def reference(tmp_path):
    """A plain distribution registry on loopback, no auth, storage under tmp_path."""
    with distribution_registry(tmp_path / "reference", require("docker-registry")) as registry:
        yield registry


def _serve(container, tmp_path):
    with served_world(container, tmp_path) as w:
        yield w


@pytest.fixture
def world(container, seeded):
    with served_copy(container, seeded) as w:
        yield w


@pytest.fixture
def store_world(store_container, tmp_path):
    yield from _serve(store_container, tmp_path)


@pytest.fixture
def redirect_world(store_container, tmp_path):
    """``store_world`` with blob redirects turned on (the router reads the setting on each request)."""
    store_container.settings.oci_blob_redirect = True
    yield from _serve(store_container, tmp_path)


class Skopeo:
    def __init__(self, binary: str, world: World) -> None:
        self.binary, self.world = binary, world

    def run(self, *args: str) -> subprocess.CompletedProcess:
        # --insecure-policy: no signature policy for these loopback copies (the host's policy.json is not ours).
        return subprocess.run([self.binary, "--insecure-policy", *args], capture_output=True, text=True, timeout=120)

    def ok(self, *args: str) -> str:
        proc = self.run(*args)
        assert proc.returncode == 0, f"skopeo {' '.join(args)} exited {proc.returncode}: {proc.stderr}"
        return proc.stdout

    def source(self, ref: str) -> str:
        """``docker://`` of ``ref`` (``:tag`` or ``@digest``) in acme/llm on modelreg."""
        return f"docker://{self.world.host}/{REPO}{ref}"

    def creds(self, token: str | None = None) -> str:
        return f"anyone:{token or self.world.node}"


def _served_manifest(w: World, ref: str) -> tuple[bytes, str]:
    with w.http(w.node) as http:
        r = http.get(f"/v2/{REPO}/manifests/{ref}")
    assert r.status_code == 200
    return r.content, r.headers["docker-content-digest"]


def _layout_blobs_check_out(layout: Path) -> dict[str, bytes]:
    """Every blob of an OCI layout, checked against the digest it is filed under; returned by digest."""
    assert json.loads((layout / "oci-layout").read_text())["imageLayoutVersion"] == "1.0.0"
    blobs = {}
    for path in (layout / "blobs" / "sha256").iterdir():
        data = path.read_bytes()
        assert hashlib.sha256(data).hexdigest() == path.name, path
        blobs[f"sha256:{path.name}"] = data
    return blobs


# --- inspect ----------------------------------------------------------------------------------------


def test_skopeo_inspects_a_version_by_tag_and_by_digest(world, skopeo_bin):
    w, sk = world, Skopeo(skopeo_bin, world)
    served, digest = _served_manifest(w, "1")
    for ref in (":prod", ":1", f"@{digest}"):
        raw = sk.ok("inspect", "--raw", "--tls-verify=false", "--creds", sk.creds(), sk.source(ref))
        assert raw.encode() == served, ref
    config = json.loads(sk.ok("inspect", "--config", "--raw", "--tls-verify=false", "--creds", sk.creds(),
                              sk.source(f"@{digest}")))
    assert sha256_of(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()) \
        == json.loads(served)["config"]["digest"]
    assert config["descriptor"]["name"] == REPO
    tags = json.loads(sk.ok("list-tags", "--tls-verify=false", "--creds", sk.creds(), f"docker://{w.host}/{REPO}"))
    assert tags == {"Repository": f"{w.host}/{REPO}", "Tags": ["1", "1-image", "prod", "prod-image"]}


def test_skopeo_inspect_parsed_refuses_any_model_artifact_as_not_an_image_here_and_at_a_plain_registry(
        world, skopeo_bin, reference):
    """skopeo 1.9's parsed ``inspect`` reads an image config, which a ModelPack artifact has not: it refuses
    the artifact alike from modelreg and from docker-registry holding the same bytes (the client's limit)."""
    sk = Skopeo(skopeo_bin, world)
    sk.ok("copy", "--src-tls-verify=false", "--dest-tls-verify=false", "--src-creds", sk.creds(), sk.source(":1"),
          f"docker://{reference.host}/acme/llm:1")
    for creds, source in ((["--creds", sk.creds()], sk.source(":1")), ([], f"docker://{reference.host}/acme/llm:1")):
        proc = sk.run("inspect", "--tls-verify=false", *creds, source)
        assert proc.returncode != 0, source
        assert ('unsupported image-specific operation on artifact with type '
                '\\"application/vnd.cncf.model.config.v1+json\\"') in proc.stderr, proc.stderr


# --- copies -----------------------------------------------------------------------------------------


def test_skopeo_copies_a_version_into_an_oci_layout_every_blob_its_digest(store_world, skopeo_bin, tmp_path):
    w, sk = store_world, Skopeo(skopeo_bin, store_world)
    served, digest = _served_manifest(w, "prod")
    layout = tmp_path / "layout"
    sk.ok("copy", "--src-tls-verify=false", "--src-creds", sk.creds(), sk.source(":prod"), f"oci:{layout}:prod")
    index = json.loads((layout / "index.json").read_text())
    (entry,) = index["manifests"]
    assert entry["digest"] == digest and entry["annotations"]["org.opencontainers.image.ref.name"] == "prod"
    blobs = _layout_blobs_check_out(layout)
    assert blobs[digest] == served
    manifest = json.loads(served)
    assert {layer["annotations"]["org.opencontainers.image.title"]: blobs[layer["digest"]]
            for layer in manifest["layers"]} == w.files
    assert set(blobs) == {digest, manifest["config"]["digest"], *(layer["digest"] for layer in manifest["layers"])}


def test_skopeo_replicates_into_a_plain_registry_and_oras_pulls_it_back_byte_for_byte(store_world, skopeo_bin,
                                                                                       reference, tmp_path):
    w, sk = store_world, Skopeo(skopeo_bin, store_world)
    served, digest = _served_manifest(w, "1")
    for ref in (":prod", f"@{digest}"):
        # A digest reference is copied to a tag: a registry is asked for a manifest by tag or by digest.
        dest = f"docker://{reference.host}/acme/llm:{'prod' if ref == ':prod' else 'by-digest'}"
        sk.ok("copy", "--src-tls-verify=false", "--dest-tls-verify=false", "--src-creds", sk.creds(),
              sk.source(ref), dest)
    for tag in ("prod", "by-digest"):
        r = httpx.get(f"{reference.url}/v2/acme/llm/manifests/{tag}",
                      headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
        # The exact bytes: the replica's digest is modelreg's, so a pin by digest works on either registry.
        assert r.status_code == 200 and r.content == served and r.headers["docker-content-digest"] == digest
    client = oras.client.OrasClient(hostname=reference.host, insecure=True)
    client.pull(target=f"{reference.host}/acme/llm:prod", outdir=str(tmp_path / "from-reference"))
    assert pulled_files(tmp_path / "from-reference") == w.files
    client.pull(target=f"{reference.host}/acme/llm@{digest}", outdir=str(tmp_path / "by-digest"))
    assert pulled_files(tmp_path / "by-digest") == w.files


# --- refusals ---------------------------------------------------------------------------------------


def test_skopeo_is_refused_another_tenants_repo_a_revoked_version_and_bad_credentials(world, skopeo_bin, tmp_path):
    w, sk = world, Skopeo(skopeo_bin, world)
    refused = {
        "another tenant's repository": (sk.creds(), f"docker://{w.host}/other/secret:1"),
        "a revoked version": (sk.creds(), sk.source(":2")),
        "an alias of a revoked version": (sk.creds(), sk.source(":next")),
        "an unapproved version": (sk.creds(), sk.source(":3")),
        "a bad token": ("anyone:mr_not-a-token", sk.source(":1")),
        "no password": ("anyone:", sk.source(":1")),
    }
    for why, (creds, source) in refused.items():
        inspected = sk.run("inspect", "--raw", "--tls-verify=false", "--creds", creds, source)
        assert inspected.returncode != 0 and not inspected.stdout, why
        layout = tmp_path / why.replace(" ", "-").replace("'", "")
        copied = sk.run("copy", "--src-tls-verify=false", "--src-creds", creds, source, f"oci:{layout}:x")
        assert copied.returncode != 0, why
        assert not (layout / "index.json").exists() or json.loads((layout / "index.json").read_text())[
            "manifests"] == [], why
    # The other tenant's node reads its own repository, with the same client.
    assert sk.ok("inspect", "--raw", "--tls-verify=false", "--creds", sk.creds(w.outsider),
                 f"docker://{w.host}/other/secret:1")


# --- presigned redirects ----------------------------------------------------------------------------


@pytest.mark.s3
@pytest.mark.parametrize("store_container", ["s3"], indirect=True)
def test_blob_gets_redirect_to_the_object_store_and_every_client_follows(redirect_world, skopeo_bin, tmp_path):
    w, sk = redirect_world, Skopeo(skopeo_bin, redirect_world)
    served, digest = _served_manifest(w, "1")
    manifest = json.loads(served)
    weights = next(p for p in w.files if p.endswith(".safetensors"))
    with w.http(w.pull_token(w.node, f"repository:{REPO}:pull")) as http:
        got = http.get(f"/v2/{REPO}/blobs/{sha256_of(w.files[weights])}")
        assert got.status_code == 307 and got.headers["docker-content-digest"] == sha256_of(w.files[weights])
        location = got.headers["location"]
        assert not location.startswith(w.url)
        assert httpx.get(location).content == w.files[weights]
        assert httpx.get(location, headers={"Range": "bytes=8-15"}).content == w.files[weights][8:16]
        # HEAD is answered here, with the size and digest; the generated config blob is always served here.
        head = http.head(f"/v2/{REPO}/blobs/{sha256_of(w.files[weights])}")
        assert (head.status_code, head.headers["content-length"]) == (200, str(len(w.files[weights])))
        config = http.get(f"/v2/{REPO}/blobs/{manifest['config']['digest']}")
        assert config.status_code == 200 and sha256_of(config.content) == manifest["config"]["digest"]
    oras_client(w, w.node).pull(target=f"{w.host}/{REPO}:prod", outdir=str(tmp_path / "oras"))
    assert pulled_files(tmp_path / "oras") == w.files
    layout = tmp_path / "layout"
    sk.ok("copy", "--src-tls-verify=false", "--src-creds", sk.creds(), sk.source(f"@{digest}"), f"oci:{layout}:1")
    blobs = _layout_blobs_check_out(layout)
    assert {layer["annotations"]["org.opencontainers.image.title"]: blobs[layer["digest"]]
            for layer in manifest["layers"]} == w.files


@pytest.mark.s3
@pytest.mark.parametrize("store_container", ["s3"], indirect=True)
def test_a_caller_who_may_not_pull_the_blob_here_never_gets_a_redirect(redirect_world):
    w = redirect_world
    readme = sha256_of(w.files["README.md"])
    others = sha256_of(w.other_files["SECRET.md"])
    revoked_only = sha256_of(b"v2\n")
    answers = []
    with w.http() as anonymous:
        answers.append(("anonymous", anonymous.get(f"/v2/{REPO}/blobs/{readme}"), 401))
    with w.http(w.outsider) as outsider:
        answers.append(("another tenant's node", outsider.get(f"/v2/{REPO}/blobs/{readme}"), 403))
    with w.http(w.pull_token(w.outsider, "repository:other/secret:pull")) as scoped:
        answers.append(("a pull token for another repository", scoped.get(f"/v2/{REPO}/blobs/{readme}"), 401))
    with w.http(w.pull_token(w.node, f"repository:{REPO}:pull")) as node:
        answers.append(("a blob of another tenant's repository", node.get(f"/v2/{REPO}/blobs/{others}"), 404))
        answers.append(("a blob of a revoked version only", node.get(f"/v2/{REPO}/blobs/{revoked_only}"), 404))
    with w.http("mr_not-a-token") as bad:
        answers.append(("a bad token", bad.get(f"/v2/{REPO}/blobs/{readme}"), 401))
    for why, r, status in answers:
        assert (r.status_code, "location" in r.headers) == (status, False), why
    with w.http(w.outsider) as outsider:
        assert outsider.get(f"/v2/other/secret/blobs/{others}").status_code == 307


def test_with_a_local_store_the_redirect_setting_is_ignored_and_bytes_stream(world):
    w = world
    w.container.settings.oci_blob_redirect = True
    with w.http(w.node) as http:
        r = http.get(f"/v2/{REPO}/blobs/{sha256_of(w.files['README.md'])}")
    assert r.status_code == 200 and r.content == w.files["README.md"]
