"""The Hugging Face-compatible endpoint, driven by the real clients against a live modelreg.

A tiny transformers Llama (plus a few files in folders) is submitted, run through the pipeline,
approved and promoted to ``prod``; uvicorn serves the app on loopback. ``huggingface_hub``
(``snapshot_download``, ``hf_hub_download``, ``HfApi``, ``HfFileSystem``) and transformers'
``from_pretrained`` then pull it with the endpoint pointed at ``<registry>/hf``, and a second registry
mirrors it as an ``hf://`` upstream. Nothing reaches huggingface.co: every client gets the endpoint
explicitly (``HF_ENDPOINT`` is read when ``huggingface_hub`` is imported; the transformers run is a
subprocess that has it in its environment).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from huggingface_hub import HfApi, HfFileSystem, hf_hub_download, snapshot_download
from huggingface_hub import constants as hf_constants
from huggingface_hub import errors as hf_errors
from pydantic import SecretStr

from api.app import create_app
from registry.auth import AuthenticatedPrincipal
from registry.bootstrap import Container, bootstrap
from registry.db.models import Version
from registry.domain.aliases import make_target
from registry.services import aliases, hf, loaders, revocations, versions
from registry.services.versions import SubmitRequest
from tests.support import db as dbsupport
from tests.support.live_app import serve_in_thread
from tests.support.registry import drain, make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version
from tests.support.tiny_llm import tiny_llm_files

TENANT, NAME = "acme", "llm"
REPO = f"{TENANT}/{NAME}"
EXTRA = {"extra/notes.txt": b"release notes\n", "extra/deep/table.json": b'{"a": 1}\n'}


class Connection(Exception):
    """Raised by :class:`RecordRanges` to cut a connection mid-body (uvicorn then closes it)."""


class RecordRanges:
    """ASGI wrapper that notes each request's method, path and Range header, and can cut one download short.

    The app itself is unchanged; ``drop_once(path, n)`` makes the next GET of ``path`` send ``n`` bytes of
    the body and then lose its connection, as a flaky network would.
    """

    def __init__(self, app) -> None:
        self.app, self.seen, self.answered, self.drops = app, [], [], {}

    def drop_once(self, path: str, nbytes: int) -> None:
        self.drops[path] = nbytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        request = (scope["method"], scope["path"], headers.get(b"range", b"").decode())
        self.seen.append(request)
        budget = self.drops.pop(scope["path"], None) if scope["method"] == "GET" else None

        async def cut_short(message):
            nonlocal budget
            if message["type"] == "http.response.start":
                self.answered.append((*request, message["status"]))
            if message["type"] == "http.response.body" and budget is not None:
                body = message.get("body", b"")
                if len(body) >= budget:
                    await send({"type": "http.response.body", "body": body[:budget], "more_body": True})
                    raise Connection("dropped by the test")
                budget -= len(body)
            await send(message)

        await self.app(scope, receive, cut_short)


@dataclass
class Live:
    container: Container
    admin: AuthenticatedPrincipal
    endpoint: str
    token: str
    number: int
    files: dict[str, bytes]
    recorder: RecordRanges

    @property
    def commit(self) -> str:
        with self.container.session_factory() as session:
            model = loaders.load_model_unchecked(session, TENANT, NAME)
            return hf.commit_of(loaders.load_version_unchecked(session, model, self.number))

    def api(self, token: str | None = None) -> HfApi:
        return HfApi(endpoint=self.endpoint, token=token or self.token)


@pytest.fixture
def live(container, tmp_path):
    container.settings.hf_tree_page_size = 3
    admin = make_admin(container, TENANT)
    files = {**tiny_llm_files(), **EXTRA}
    number = awaiting_version(container, admin, tmp_path / "src", TENANT, NAME, files=files)
    approve_standin(container, TENANT, NAME, number)
    with container.session_factory() as session:
        aliases.promote(session, admin, TENANT, NAME, "prod", make_target(number), policy=container.policy,
                        clock=container.clock)
    token = role_token(container, "node-1", TENANT, "node")
    recorder = RecordRanges(create_app(container))
    with serve_in_thread(recorder) as url:
        yield Live(container, admin, f"{url}/hf", token, number, files, recorder)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --- downloads ------------------------------------------------------------------------------------------


def test_snapshot_download_by_alias_gets_exactly_the_approved_bytes(live, tmp_path):
    folder = snapshot_download(REPO, revision="prod", endpoint=live.endpoint, token=live.token,
                               cache_dir=tmp_path / "cache")
    assert _tree_bytes(Path(folder)) == live.files
    # Pinned to the version's commit: the snapshot folder is named after it.
    assert Path(folder).name == live.commit
    # The listing was paged (3 entries a page) and followed by the client.
    tree_calls = [p for m, p, _ in live.recorder.seen if "/tree/" in p]
    assert len(tree_calls) >= 3 and all(live.commit in p for p in tree_calls)


TRANSFORMERS_PULL = """
import hashlib, json, sys
from transformers import AutoModelForCausalLM, AutoTokenizer

def fingerprint(source, **kwargs):
    model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
    digest = hashlib.sha256()
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(key.encode()); digest.update(tensor.numpy().tobytes())
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    return {"weights": digest.hexdigest(), "ids": tokenizer("The capital of France is")["input_ids"], "chat": chat}

repo, revision, original = sys.argv[1:]
print(json.dumps({"pulled": fingerprint(repo, revision=revision), "original": fingerprint(original)}))
"""


def test_transformers_from_pretrained_pulls_the_model_with_hf_endpoint_set(live, tmp_path):
    original = tmp_path / "original"
    for path, data in live.files.items():
        (original / path).parent.mkdir(parents=True, exist_ok=True)
        (original / path).write_bytes(data)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_ENDPOINT=live.endpoint, HF_TOKEN=live.token, HF_HOME=str(tmp_path / "hf-home"),
               HF_HUB_DISABLE_TELEMETRY="1", TRANSFORMERS_NO_ADVISORY_WARNINGS="1")
    result = subprocess.run([sys.executable, "-c", TRANSFORMERS_PULL, REPO, "prod", str(original)], check=False,
                            env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["pulled"] == loaded["original"]
    snapshot = tmp_path / "hf-home" / "hub" / "models--acme--llm" / "snapshots" / live.commit
    fetched = _tree_bytes(snapshot)
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= set(fetched)
    assert all(data == live.files[path] for path, data in fetched.items())


def test_hf_hub_download_resumes_with_a_range(live, tmp_path, monkeypatch):
    """The connection drops halfway through the weights: the client asks for the rest with a Range."""
    # The client writes (and so resumes after) whole chunks of 10 MiB; the tiny weights need smaller ones.
    monkeypatch.setattr(hf_constants, "DOWNLOAD_CHUNK_SIZE", 16 * 1024)
    weights = live.files["model.safetensors"]
    half = len(weights) // 2
    url_path = f"/hf/{REPO}/resolve/{live.commit}/model.safetensors"
    live.recorder.drop_once(url_path, half)
    path = hf_hub_download(REPO, "model.safetensors", revision=live.commit, endpoint=live.endpoint,
                           token=live.token, cache_dir=tmp_path / "cache")
    assert Path(path).read_bytes() == weights
    gets = [(p, r, status) for m, p, r, status in live.recorder.answered if m == "GET"]
    resumed_at = half - half % (16 * 1024)
    assert gets == [(url_path, "", 200), (url_path, f"bytes={resumed_at}-", 206)]


def test_safetensors_header_is_read_by_range(live):
    """What vLLM does: ``Range: bytes=0-100000`` on the weights, then the header parsed from those bytes."""
    weights = live.files["model.safetensors"]
    r = httpx.get(f"{live.endpoint}/{REPO}/resolve/prod/model.safetensors",
                  headers={"Authorization": f"Bearer {live.token}", "Range": "bytes=0-100000"})
    assert r.status_code == 206 and r.content == weights[:100001]
    assert r.headers["content-range"] == f"bytes 0-{min(100000, len(weights) - 1)}/{len(weights)}"
    metadata = live.api().parse_safetensors_file_metadata(REPO, "model.safetensors", revision="prod")
    header_size = int.from_bytes(weights[:8], "little")
    declared = json.loads(weights[8:8 + header_size])
    assert set(metadata.tensors) == set(declared) - {"__metadata__"}
    r = httpx.get(f"{live.endpoint}/{REPO}/resolve/prod/model.safetensors",
                  headers={"Authorization": f"Bearer {live.token}", "Range": f"bytes={len(weights)}-"})
    assert r.status_code == 416


def test_resolve_headers_name_commit_etag_and_size_and_never_xet(live):
    auth = {"Authorization": f"Bearer {live.token}"}
    for path, data in (("model.safetensors", live.files["model.safetensors"]),
                       ("config.json", live.files["config.json"])):
        head = httpx.head(f"{live.endpoint}/{REPO}/resolve/prod/{path}", headers=auth)
        get = httpx.get(f"{live.endpoint}/{REPO}/resolve/prod/{path}", headers=auth)
        assert head.status_code == get.status_code == 200 and get.content == data
        for r in (head, get):
            assert r.headers["x-repo-commit"] == live.commit
            assert r.headers["x-linked-size"] == r.headers["content-length"] == str(len(data))
            assert not [h for h in r.headers if h.lower().startswith("x-xet")]
        if path.endswith(".safetensors"):
            assert head.headers["etag"] == head.headers["x-linked-etag"] == f'"{_sha256(data)}"'
        else:
            assert head.headers["etag"] == f'"{hf.git_blob_sha1(data)}"' and "x-linked-etag" not in head.headers


# --- metadata -------------------------------------------------------------------------------------------


def test_model_info_with_files_metadata(live):
    info = live.api().model_info(REPO, revision="prod", files_metadata=True)
    assert info.id == REPO and info.sha == live.commit
    assert live.api().model_info(REPO).sha == live.commit  # main is prod
    assert live.api().model_info(REPO, revision=str(live.number)).sha == live.commit
    assert live.api().model_info(REPO, revision=live.commit).sha == live.commit
    siblings = {s.rfilename: s for s in info.siblings}
    assert set(siblings) == set(live.files)
    for path, data in live.files.items():
        s = siblings[path]
        assert s.size == len(data)
        if path.endswith(".safetensors"):
            assert s.lfs.sha256 == _sha256(data) and s.lfs.size == len(data)
            assert s.blob_id == hf.git_blob_sha1(hf.lfs_pointer(_sha256(data), len(data)))
        else:
            assert s.lfs is None and s.blob_id == hf.git_blob_sha1(data)


def test_tree_is_paged_with_link_and_lists_folders(live):
    r = httpx.get(f"{live.endpoint}/api/models/{REPO}/tree/prod", params={"recursive": "true"},
                  headers={"Authorization": f"Bearer {live.token}"})
    assert r.status_code == 200 and len(r.json()) == 3 and "xetHash" not in r.text
    assert live.commit in r.links["next"]["url"]
    entries = list(live.api().list_repo_tree(REPO, revision="prod", recursive=True))
    paths = [e.path for e in entries]
    assert paths == sorted({*live.files, "extra", "extra/deep"})
    top = {e.path for e in live.api().list_repo_tree(REPO, revision="prod")}
    assert top == {p for p in live.files if "/" not in p} | {"extra"}
    under = {e.path for e in live.api().list_repo_tree(REPO, path_in_repo="extra", revision="prod")}
    assert under == {"extra/notes.txt", "extra/deep"}
    with pytest.raises(hf_errors.RemoteEntryNotFoundError):
        list(live.api().list_repo_tree(REPO, path_in_repo="additional_chat_templates", revision="prod"))
    with pytest.raises(hf_errors.RemoteEntryNotFoundError):  # a file is not a folder
        list(live.api().list_repo_tree(REPO, path_in_repo="config.json", revision="prod"))


def test_paths_info_and_hf_file_system(live):
    found = live.api().get_paths_info(REPO, ["config.json", "extra", "nope.txt"], revision="prod")
    assert {(type(e).__name__, e.path) for e in found} == {("RepoFile", "config.json"), ("RepoFolder", "extra")}
    r = httpx.post(f"{live.endpoint}/api/models/{REPO}/paths-info/prod", json={"paths": ["model.safetensors"]},
                   headers={"Authorization": f"Bearer {live.token}"})
    assert r.status_code == 200 and r.json()[0]["lfs"]["oid"] == _sha256(live.files["model.safetensors"])
    fs = HfFileSystem(endpoint=live.endpoint, token=live.token)
    info = fs.info(f"{REPO}@prod/config.json")
    assert info["size"] == len(live.files["config.json"]) and info["type"] == "file"
    assert {p.rsplit("/", 1)[1] for p in fs.ls(f"{REPO}@prod/extra", detail=False)} == {"notes.txt", "deep"}
    assert fs.cat(f"{REPO}@prod/extra/notes.txt") == EXTRA["extra/notes.txt"]


# --- refusals ----------------------------------------------------------------------------------------------


def test_not_found_errors_carry_the_hubs_error_codes(live, tmp_path):
    api = live.api()
    with pytest.raises(hf_errors.RepositoryNotFoundError):
        api.model_info(f"{TENANT}/nope")
    for revision in ("staging", "99", "f" * 40, "refs-pr-1"):
        with pytest.raises(hf_errors.RevisionNotFoundError):
            api.model_info(REPO, revision=revision)
    with pytest.raises(hf_errors.RemoteEntryNotFoundError):
        hf_hub_download(REPO, "nope.json", revision="prod", endpoint=live.endpoint, token=live.token,
                        cache_dir=tmp_path / "cache")
    auth = {"Authorization": f"Bearer {live.token}"}
    r = httpx.head(f"{live.endpoint}/{REPO}/resolve/prod/extra", headers=auth)  # a folder is not a file
    assert r.status_code == 404 and r.headers["x-error-code"] == "EntryNotFound"
    assert r.headers["x-repo-commit"] == live.commit
    r = httpx.get(f"{live.endpoint}/{REPO}/resolve/nope/config.json", headers=auth)
    assert r.status_code == 404 and r.headers["x-error-code"] == "RevisionNotFound"
    assert r.headers["content-type"] == "application/problem+json" and r.json()["error"]
    r = httpx.get(f"{live.endpoint}/api/models/{TENANT}/nope/revision/prod", headers=auth)
    assert r.status_code == 404 and r.headers["x-error-code"] == "RepoNotFound"


def test_unapproved_and_revoked_versions_are_no_revisions(live, tmp_path):
    api = live.api()
    pending = awaiting_version(live.container, live.admin, tmp_path / "v2", TENANT, NAME,
                               files={**live.files, "extra/notes.txt": b"v2\n"})
    with pytest.raises(hf_errors.RevisionNotFoundError, match="not approved"):
        api.model_info(REPO, revision=str(pending))
    commit = live.commit
    with live.container.session_factory() as session:
        revocations.revoke(session, live.admin, TENANT, NAME, live.number, "a bad batch",
                           clock=live.container.clock)
    for revision in ("prod", "main", str(live.number), commit):
        with pytest.raises(hf_errors.RevisionNotFoundError, match="revoked"):
            api.model_info(REPO, revision=revision)
    r = httpx.get(f"{live.endpoint}/{REPO}/resolve/{commit}/config.json",
                  headers={"Authorization": f"Bearer {live.token}"})
    assert r.status_code == 404 and r.headers["x-error-code"] == "RevisionNotFound"


def test_tokens_and_roles(live):
    url = f"{live.endpoint}/{REPO}/resolve/prod/config.json"
    r = httpx.get(url)
    assert r.status_code == 401 and r.headers["content-type"] == "application/problem+json"
    assert httpx.get(url, headers={"Authorization": "Bearer mr_unknown"}).status_code == 401
    stranger = role_token(live.container, "stranger", "other", "node")
    r = httpx.get(url, headers={"Authorization": f"Bearer {stranger}"})
    assert r.status_code == 403 and "x-error-code" not in r.headers
    with pytest.raises(hf_errors.HfHubHTTPError, match="403"):
        live.api(stranger).model_info(REPO)
    reader = role_token(live.container, "reader", TENANT, "auditor")
    assert live.api(reader).model_info(REPO).sha == live.commit


def test_a_canary_tenant_gets_the_canary_version(live, tmp_path):
    canary = awaiting_version(live.container, live.admin, tmp_path / "v2", TENANT, NAME,
                              files={**live.files, "extra/notes.txt": b"canary\n"})
    approve_standin(live.container, TENANT, NAME, canary)
    with live.container.session_factory() as session:
        aliases.promote(session, live.admin, TENANT, NAME, "prod", make_target(live.number, canary, ["beta"]),
                        policy=live.container.policy, clock=live.container.clock)
    beta_node = role_token(live.container, "beta-node", "beta", "node")
    with live.container.session_factory() as session:
        from registry.db.models import Principal, RoleBinding, Tenant
        principal = session.query(Principal).filter_by(name="beta-node").one()
        tenant = session.query(Tenant).filter_by(name=TENANT).one()
        session.add(RoleBinding(principal_id=principal.id, tenant_id=tenant.id, role="node", capacity=""))
        session.commit()
    assert live.api().model_info(REPO).sha == live.commit
    canary_sha = live.api(beta_node).model_info(REPO).sha
    assert canary_sha != live.commit
    notes = hf_hub_download(REPO, "extra/notes.txt", endpoint=live.endpoint, token=beta_node,
                            cache_dir=tmp_path / "cache")
    assert Path(notes).read_bytes() == b"canary\n"


# --- a registry mirroring a registry ---------------------------------------------------------------------


def test_another_modelreg_mirrors_it_as_an_hf_upstream(live, tmp_path, sqlite_template, signing_key_pem):
    second_dir = tmp_path / "second"
    second_dir.mkdir()
    settings = live.container.settings.model_copy(update={
        "database_url": dbsupport.sqlite_copy(sqlite_template, second_dir),
        "blob_store_url": (second_dir / "blobs").as_uri(), "data_dir": second_dir / "data",
        "hf_endpoint": live.endpoint, "hf_token": SecretStr(live.token), "hf_allowed_endpoints": [live.endpoint],
        "local_source_roots": [],
    })
    second = bootstrap(settings)
    try:
        admin = make_admin(second, "mirror")
        with second.session_factory() as session:
            version, created = versions.submit(
                session, admin, "mirror", "llm", SubmitRequest(source=f"hf://{REPO}", revision="prod"),
                open_source=second.open_source, limits=second.limits(), ports=second.ports)
            version_id = version.id
        assert created
        drain(second)
        with second.session_factory() as session:
            mirrored = session.get(Version, version_id)
            state, revision = mirrored.state, mirrored.resolved_revision
            files = {f.path: f.sha256 for f in mirrored.files}
            sealed = mirrored.manifest_digest is not None
    finally:
        second.dispose()
    assert state == "awaiting_approval", state  # sealed, scanned (and evaluated) on the second registry
    assert sealed and revision == live.commit
    assert files == {path: _sha256(data) for path, data in live.files.items()}
    # Every byte came through /hf with the first registry's token, each file by the pinned commit.
    downloads = {p for m, p, _ in live.recorder.seen if m == "GET" and "/resolve/" in p}
    assert downloads == {f"/hf/{REPO}/resolve/{live.commit}/{path}" for path in live.files}
