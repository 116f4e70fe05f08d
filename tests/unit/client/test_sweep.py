"""The sweeper's own decisions, on real folders and releases signed here (no registry needed).

A signature that does not verify removes a folder only when the trust root walk against the registry
succeeded (else it may be a rotation the node has not seen: ``unverified``, kept); a folder with no
release record is removed with ``remove_unattributed`` only when it is neither empty nor being
downloaded; a removal leaves nothing aside (the read-only modes matter only when not run as root).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
from pathlib import Path

from registry.client.errors import NetworkError
from registry.node.assemble import RELEASE_FILE, STAGING_PREFIX
from registry.node.cache import NodeCache
from registry.node.sweep import Sweeper, remove_folder
from registry.signing.keys import SigningKey
from registry.signing.release import release_payload, sign_release
from registry.signing.trust_root import root_document, sign_root

NOW = dt.datetime(2030, 6, 1, 12, 0, tzinfo=dt.timezone.utc)
KEY, OTHER = SigningKey.generate(), SigningKey.generate()
FILES = {"config.json": b"{}", "model.safetensors": b"12345"}


def _fetched(folder: Path, key: SigningKey) -> None:
    """What `modelreg fetch` leaves in a folder: the files, model.sig and the signed release."""
    entries = [{"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for p, d in FILES.items()]
    statement = json.dumps({"predicate": {"resources": [{"name": e["path"], "digest": e["sha256"]}
                                                         for e in entries]}}).encode()
    payload = release_payload(model="acme/tiny", ref="3", tenant="acme", version=3,
                              source={"kind": "hf", "repo": "org/tiny", "revision": "a" * 40}, files=entries,
                              license="mit", facts=None, statement_digest=hashlib.sha256(statement).hexdigest(),
                              approval_digest="d" * 64, serial=1, issued_at=NOW,
                              expires_at=NOW + dt.timedelta(minutes=5))
    folder.mkdir(parents=True)
    for path, data in FILES.items():
        (folder / path).write_bytes(data)
    (folder / "model.sig").write_text(json.dumps({"dsseEnvelope": {"payload": base64.b64encode(statement).decode()}}))
    (folder / RELEASE_FILE).parent.mkdir()
    (folder / RELEASE_FILE).write_text(json.dumps({"envelope": sign_release(payload, [key])}))


def _sweeper(tmp_path: Path, fetch_root, **kwargs) -> Sweeper:
    root_file = tmp_path / "root.json"
    root_file.write_text(json.dumps(sign_root(root_document(1, [KEY.public_key], 1, NOW + dt.timedelta(days=365)),
                                              [KEY])))
    return Sweeper(tmp_path / "volume", state=NodeCache(tmp_path / "state"), trust_root_file=root_file,
                   fetch_root=fetch_root, clock=lambda: NOW, **kwargs)


def _unreachable(version: int):
    raise NetworkError("the registry is unreachable")


def test_a_good_folder_is_ok_and_one_signed_by_another_key_is_altered_and_removed(tmp_path):
    sweeper = _sweeper(tmp_path, lambda version: None)
    good, forged = tmp_path / "volume/models/aaaa", tmp_path / "volume/models/bbbb"
    _fetched(good, KEY)
    _fetched(forged, OTHER)
    findings = {Path(f.folder).name: f for f in sweeper.sweep()}
    assert findings["aaaa"].event == "ok" and not findings["aaaa"].removed
    assert findings["bbbb"].event == "altered" and findings["bbbb"].removed
    assert findings["bbbb"].reason.startswith("signature: ")
    assert good.is_dir() and not forged.exists()


def test_without_the_registry_a_signature_that_fails_is_unverified_and_kept_but_changed_bytes_still_remove(tmp_path):
    sweeper = _sweeper(tmp_path, _unreachable)
    problems: list[str] = []
    sweeper.on_problem = problems.append
    forged, changed = tmp_path / "volume/models/bbbb", tmp_path / "volume/models/cccc"
    _fetched(forged, OTHER)
    _fetched(changed, KEY)
    (changed / "model.safetensors").write_bytes(b"12346")
    findings = {Path(f.folder).name: f for f in sweeper.sweep()}
    assert findings["bbbb"].event == "unverified" and forged.is_dir()
    assert findings["cccc"].event == "altered" and not changed.exists()
    assert "model.safetensors" in findings["cccc"].reason
    assert problems and "trust root walk failed" in problems[0]


def test_remove_unattributed_spares_a_download_in_progress_and_an_empty_folder(tmp_path):
    sweeper = _sweeper(tmp_path, lambda version: None, remove_unattributed=True)
    models = tmp_path / "volume/models"
    (models / "busy" / f"{STAGING_PREFIX}x").mkdir(parents=True)
    (models / "busy" / "config.json").write_text("{}")
    (models / "empty").mkdir()
    (models / "other").mkdir()
    (models / "other" / "weights.bin").write_bytes(b"x")
    findings = {Path(f.folder).name: f for f in sweeper.sweep()}
    assert {n: (f.event, f.removed) for n, f in findings.items()} == {
        "busy": ("unattributed", False), "empty": ("unattributed", False), "other": ("unattributed", True)}
    assert sorted(p.name for p in models.iterdir()) == ["busy", "empty"]


def test_a_removal_leaves_nothing_aside_read_only_folders_included(tmp_path):
    folder = tmp_path / "models" / "aaaa"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "f").write_bytes(b"x")
    (folder / "sub" / "f").chmod(0o444)
    (folder / "sub").chmod(0o555)
    folder.chmod(0o555)
    remove_folder(folder)
    assert list((tmp_path / "models").iterdir()) == []


def test_a_version_the_registry_no_longer_releases_is_removed_as_revoked_without_its_event(tmp_path):
    """The full sweep asks the registry about each folder's version (its event stream may be refused)."""
    from registry.domain.errors import RevokedError

    asked: list[tuple] = []
    revoked = False

    def ask_release(tenant: str, name: str, version: int, etag: str | None) -> str | None:
        asked.append((tenant, name, version, etag))
        if revoked:
            raise RevokedError(f"{tenant}/{name}", version, "bad weights")
        return '"e1"'

    sweeper = _sweeper(tmp_path, lambda version: None, ask_release=ask_release)
    folder = tmp_path / "volume/models/aaaa"
    _fetched(folder, KEY)
    [finding] = sweeper.sweep()
    assert finding.event == "ok" and asked == [("acme", "tiny", 3, None)]
    revoked = True
    [finding] = sweeper.sweep()
    # Asked with the ETag it was answered (an unchanged release costs the registry a 304, no signature).
    assert asked[-1] == ("acme", "tiny", 3, '"e1"')
    assert finding.event == "revoked" and finding.removed and not folder.exists()
    assert sweeper.state.is_revoked("acme", "tiny", 3)


def test_a_folder_whose_revocation_cannot_be_asked_is_unverified_and_kept_never_ok(tmp_path):
    problems: list[str] = []

    def refused(tenant: str, name: str, version: int, etag: str | None) -> str | None:
        raise NetworkError("HTTP 401: the token is refused")

    sweeper = _sweeper(tmp_path, lambda version: None, ask_release=refused, on_problem=problems.append)
    folder = tmp_path / "volume/models/aaaa"
    _fetched(folder, KEY)
    [finding] = sweeper.sweep()
    assert finding.event == "unverified" and not finding.removed and folder.is_dir()
    assert "whether it was revoked is unknown" in finding.reason
    assert any("cannot ask the registry whether acme/tiny@3" in p for p in problems)
