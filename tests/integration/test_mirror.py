"""Submit, mirror and seal against real upstreams: the HF-compatible test hub (through the real
huggingface_hub client), SeaweedFS S3 and a local directory; into local and S3 blob stores."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from registry.db.models import Blob, EvalResult, Job, Version
from registry.services import versions
from registry.services.versions import SubmitRequest
from registry.signing.bundle import verify_model_bundle, verify_model_directory
from tests.support.hf_upstream import HfUpstream
from tests.support.registry import drain
from tests.support.tiny_model import tiny_model_files


@pytest.fixture
def hub(container):
    with HfUpstream() as upstream:
        container.settings.hf_allowed_endpoints.append(upstream.url)
        yield upstream


def _submit(container, admin, source, **kw):
    with container.session_factory() as session:
        version, created = versions.submit(
            session, admin, "acme", kw.pop("name", "tiny"), SubmitRequest(source=source, **kw),
            open_source=container.open_source, limits=container.limits(), clock=container.clock,
        )
        return version.id, version.number, created


def _version(container, version_id) -> Version:
    with container.session_factory() as session:
        v = session.get(Version, version_id)
        _ = v.files, v.model.tenant
        return v


def _publish_tiny(hub, repo="org/tiny", seed=0):
    files = tiny_model_files(seed)
    hub.add_repo(repo, card_data={"license": "apache-2.0"})
    sha = hub.commit(repo, files)
    return files, sha


def test_hf_branch_is_pinned_mirrored_and_sealed(store_container, admin, hub):
    c = store_container
    files, sha = _publish_tiny(hub)
    version_id, number, created = _submit(c, admin, "hf://org/tiny", revision="main", hf_endpoint=hub.url)
    assert created and number == 1
    v = _version(c, version_id)
    assert v.state == "mirroring" and v.requested_revision == "main" and v.resolved_revision == sha
    # The branch moves on upstream: the version stays pinned to the commit it resolved.
    hub.commit("org/tiny", {"config.json": b'{"changed": true}'})
    drain(c)
    v = _version(c, version_id)
    assert v.state == "awaiting_approval", v.failure_detail
    assert v.license == "Apache-2.0"  # normalized to its SPDX id
    mirrored = {f.path: f for f in v.files}
    assert set(mirrored) == set(files) | {".gitattributes"}
    for path, data in files.items():
        assert mirrored[path].sha256 == hashlib.sha256(data).hexdigest()
        assert b"".join(c.blob_store.open_range(mirrored[path].sha256)) == data
    statement = verify_model_bundle(v.manifest_bundle, c.signing_key.public_key)
    assert {r["name"] for r in statement["predicate"]["resources"]} == set(files)
    assert statement["predicate"]["modelreg"]["revision"] == sha


def test_same_source_and_revision_returns_the_existing_version(container, admin, hub):
    _publish_tiny(hub)
    first = _submit(container, admin, "hf://org/tiny", revision="main", hf_endpoint=hub.url)
    second = _submit(container, admin, "hf://org/tiny", revision="main", hf_endpoint=hub.url)
    assert second[0] == first[0] and second[2] is False
    sha = hub.head("org/tiny")
    third = _submit(container, admin, "hf://org/tiny", revision=sha, hf_endpoint=hub.url)
    assert third[0] == first[0]
    other = _submit(container, admin, "hf://org/tiny", revision="main", hf_endpoint=hub.url,
                    include=("*.json",))
    assert other[0] != first[0] and other[1] == 2


def test_a_file_shared_by_two_versions_is_stored_once(container, admin, hub):
    files, _ = _publish_tiny(hub)
    hub.add_repo("org/tiny-b")
    hub.commit("org/tiny-b", files)  # same bytes, another repo
    a = _submit(container, admin, "hf://org/tiny", hf_endpoint=hub.url)
    drain(container)
    resolve_requests = len([r for r in hub.requests if "/resolve/" in r.path and r.method == "GET"])
    b = _submit(container, admin, "hf://org/tiny-b", hf_endpoint=hub.url, name="tiny-b")
    drain(container)
    assert _version(container, a[0]).state == _version(container, b[0]).state == "awaiting_approval"
    # Nothing was downloaded again for the second model.
    assert len([r for r in hub.requests if "/resolve/" in r.path and r.method == "GET"]) == resolve_requests
    with container.session_factory() as session:
        # Besides the files and the signature: the eval runners' logs (blobs too).
        logs = set(session.scalars(select(EvalResult.log_digest).where(EvalResult.log_digest.is_not(None))))
        assert logs and session.scalar(select(func.count()).select_from(Blob)
                                       .where(Blob.digest.not_in(logs))) == len(files) + 1
    assert len([b for b in container.blob_store.iter_blobs() if b.digest not in logs]) == len(files) + 1


def test_corrupted_byte_fails_the_version_with_both_digests(container, admin, hub):
    files, sha = _publish_tiny(hub)
    shard = next(p for p in files if p.endswith(".safetensors"))
    hub.corrupt("org/tiny", shard)
    version_id, *_ = _submit(container, admin, "hf://org/tiny", hf_endpoint=hub.url)
    drain(container)
    v = _version(container, version_id)
    assert v.state == "failed" and v.failure_reason == "digest_mismatch"
    expected = hashlib.sha256(files[shard]).hexdigest()
    assert v.failure_detail["path"] == shard and v.failure_detail["expected"] == expected
    assert v.failure_detail["actual"] != expected and len(v.failure_detail["actual"]) == 64
    assert not container.blob_store.exists(v.failure_detail["actual"])


def test_corrupted_small_git_file_fails_on_its_sha1(container, admin, hub):
    _publish_tiny(hub)
    hub.corrupt("org/tiny", "config.json")
    version_id, *_ = _submit(container, admin, "hf://org/tiny", hf_endpoint=hub.url)
    drain(container)
    v = _version(container, version_id)
    assert v.state == "failed" and v.failure_reason == "digest_mismatch"
    assert v.failure_detail["path"] == "config.json" and v.failure_detail["algorithm"] == "git-sha1"


@pytest.mark.parametrize("repo,revision,reason", [
    ("org/missing", "main", "repo_not_found"),
    ("org/tiny", "no-such-branch", "revision_not_found"),
])
def test_unknown_repo_or_revision_fails_the_version(container, admin, hub, repo, revision, reason):
    _publish_tiny(hub)
    version_id, *_ = _submit(container, admin, f"hf://{repo}", revision=revision, hf_endpoint=hub.url)
    v = _version(container, version_id)
    assert v.state == "failed" and v.failure_reason == reason


def test_path_traversal_listing_fails_and_writes_nothing(container, admin, hub, tmp_path):
    repo = "attacker/path-traversal"
    hub.add_path_traversal_repo(repo)
    version_id, *_ = _submit(container, admin, f"hf://{repo}", hf_endpoint=hub.url)
    drain(container)
    v = _version(container, version_id)
    assert v.state == "failed" and v.failure_reason == "invalid_path"
    assert list(container.blob_store.iter_blobs()) == []
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path.parent / "evil.txt").exists()


def test_unreachable_upstream_is_retried_then_fails(container, admin, hub):
    _publish_tiny(hub)
    hub.unreachable()
    version_id, *_ = _submit(container, admin, "hf://org/tiny", hf_endpoint=hub.url)
    assert _version(container, version_id).state == "submitted"
    # Retried with backoff (the test settings make it short) until the job is dead.
    import time

    deadline = time.monotonic() + 30
    while _version(container, version_id).state == "submitted" and time.monotonic() < deadline:
        drain(container)
        time.sleep(0.05)
    v = _version(container, version_id)
    assert v.state == "failed" and v.failure_reason == "upstream"
    with container.session_factory() as session:
        job = session.scalars(select(Job).where(Job.kind == "resolve_version")).one()
        assert job.state == "dead" and job.attempts == job.max_attempts


def test_upstream_recovers_during_retries(container, admin, hub):
    _publish_tiny(hub)
    hub.unreachable()
    version_id, *_ = _submit(container, admin, "hf://org/tiny", hf_endpoint=hub.url)
    drain(container)
    hub.heal()
    import time

    deadline = time.monotonic() + 30
    while _version(container, version_id).state not in ("awaiting_approval", "failed") and time.monotonic() < deadline:
        drain(container)
        time.sleep(0.05)
    assert _version(container, version_id).state == "awaiting_approval"


def test_local_directory(container, admin, tmp_path):
    model_dir = tmp_path / "model"
    (model_dir / "sub").mkdir(parents=True)
    files = tiny_model_files(3)
    for path, data in files.items():
        (model_dir / path).write_bytes(data)
    (model_dir / "sub" / "empty.txt").write_bytes(b"")
    version_id, *_ = _submit(container, admin, str(model_dir))
    drain(container)
    v = _version(container, version_id)
    assert v.state == "awaiting_approval", v.failure_detail
    assert {f.path for f in v.files} == set(files) | {"sub/empty.txt"}
    assert len(v.resolved_revision) == 64


@pytest.mark.s3
def test_s3_prefix(container, admin, s3_server, s3_bucket, monkeypatch):
    client = s3_server.client()
    files = tiny_model_files(4)
    for path, data in files.items():
        client.put_object(Bucket=s3_bucket, Key=f"models/tiny/{path}", Body=data)
    container.settings.s3_endpoint_url = s3_server.endpoint_url
    container.settings.s3_access_key_id = s3_server.access_key
    from pydantic import SecretStr

    container.settings.s3_secret_access_key = SecretStr(s3_server.secret_key)
    container.settings.s3_source_buckets = [s3_bucket]
    version_id, *_ = _submit(container, admin, f"s3://{s3_bucket}/models/tiny")
    drain(container)
    v = _version(container, version_id)
    assert v.state == "awaiting_approval", v.failure_detail
    assert {f.path: f.sha256 for f in v.files} == {p: hashlib.sha256(d).hexdigest() for p, d in files.items()}
    # A changed object under the prefix is a new revision, hence a new version.
    client.put_object(Bucket=s3_bucket, Key="models/tiny/config.json", Body=b'{"v": 2}')
    second = _submit(container, admin, f"s3://{s3_bucket}/models/tiny")
    assert second[2] is True and _version(container, second[0]).resolved_revision != v.resolved_revision


def _fetch(container, v: Version, dest: Path) -> None:
    for f in v.files:
        target = dest / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"".join(container.blob_store.open_range(f.sha256)))


def test_model_signing_cli_accepts_a_fetched_version_and_rejects_a_changed_byte(container, admin, hub, tmp_path):
    files, _ = _publish_tiny(hub)
    version_id, *_ = _submit(container, admin, "hf://org/tiny", hf_endpoint=hub.url)
    drain(container)
    v = _version(container, version_id)
    dest = tmp_path / "tiny"
    _fetch(container, v, dest)
    (dest / "model.sig").write_text(json.dumps(v.manifest_bundle))
    pub = tmp_path / "registry.pub"
    pub.write_bytes(container.signing_key.public_key.public_pem())
    cli = str(Path(sys.executable).parent / "model_signing")
    cmd = [cli, "verify", "key", str(dest), "--public_key", str(pub), "--signature", str(dest / "model.sig")]
    ok = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    verify_model_directory(dest, v.manifest_bundle, container.signing_key.public_key)
    shard = dest / next(p for p in files if p.endswith(".safetensors"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    bad = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0


@pytest.mark.parametrize("setting,value", [
    ("max_files_per_version", 3), ("max_file_size", 1000), ("max_version_size", 5000),
])
def test_listing_over_the_limits_fails_the_version(container, admin, hub, setting, value):
    _publish_tiny(hub)
    setattr(container.settings, setting, value)
    version_id, *_ = _submit(container, admin, "hf://org/tiny", hf_endpoint=hub.url)
    v = _version(container, version_id)
    assert v.state == "failed" and v.failure_reason == "limit_exceeded"
    assert v.failure_detail["limit"] == value
    with container.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 0


def test_an_empty_selection_fails_the_version(container, admin, hub):
    _publish_tiny(hub)
    version_id, *_ = _submit(container, admin, "hf://org/tiny", hf_endpoint=hub.url, include=("*.gguf",))
    v = _version(container, version_id)
    assert v.state == "failed" and "no files" in v.failure_detail["message"]


def test_concurrent_first_submissions_make_one_version(container, admin, hub):
    """Two first submissions of a new model and source race: one version, returned to both."""
    import threading

    _publish_tiny(hub)
    results, errors = [], []
    barrier = threading.Barrier(4)

    def go():
        try:
            barrier.wait()
            results.append(_submit(container, admin, "hf://org/tiny", revision="main", hf_endpoint=hub.url))
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len({r[0] for r in results}) == 1 and sorted(r[2] for r in results) == [False, False, False, True]
    with container.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Version)) == 1


def test_the_registry_hf_token_goes_only_to_the_configured_hub(container, admin):
    """A submitter names any hub endpoint; the registry's own HF token must not be sent to it."""
    from pydantic import SecretStr

    with HfUpstream(token="hf_registry_secret") as trusted, HfUpstream() as chosen:
        for hub in (trusted, chosen):
            hub.add_repo("org/tiny")
            hub.commit("org/tiny", tiny_model_files(5))
        container.settings.hf_endpoint = trusted.url
        container.settings.hf_token = SecretStr("hf_registry_secret")
        container.settings.hf_allowed_endpoints = [chosen.url]

        _submit(container, admin, "hf://org/tiny", name="theirs", hf_endpoint=chosen.url + "/")
        _submit(container, admin, "hf://org/tiny", name="ours")
        drain(container)

        assert chosen.requests and all(r.authorization is None for r in chosen.requests)
        hub_requests = [r for r in trusted.requests if r.server == "hub"]
        assert hub_requests and all(r.authorization == "Bearer hf_registry_secret" for r in hub_requests)


def test_a_source_the_registry_is_not_configured_for_is_refused_before_anything_is_recorded(
    container, admin, tmp_path
):
    from registry.domain.errors import SourceNotAllowedError

    for source, kw in [
        ("/etc", {}),
        (str(container.settings.data_dir), {}),
        ("hf://org/tiny", {"hf_endpoint": "http://169.254.169.254"}),
        ("s3://some-bucket/models", {}),
    ]:
        with pytest.raises(SourceNotAllowedError):
            _submit(container, admin, source, **kw)
    with container.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Version)) == 0
        assert session.scalar(select(func.count()).select_from(Job)) == 0
