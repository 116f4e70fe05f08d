"""``modelreg fetch``, ``verify`` and ``cache`` as a serving node runs them, against a real registry.

The version is made by the real pipeline and approved (the approvals stand-in); its bytes come from the
registry's own presigned blob URLs (Range included). Until the manifest and trust-root endpoints land
(built in parallel), ``tests/support/manifest_standin.py`` answers them by the contract, with releases the
test signs with its own key and root, and proxies the blob URLs so the test sees every GET. Each refusal
leaves DEST as it was and exits with its own code and one stderr line.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import pty
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from api.app import create_app
from registry.signing.keys import SigningKey
from registry.signing.trust_root import root_document, sign_root
from tests.support.live_app import serve_in_thread
from tests.support.fetch_node import BIG, LATER, NOW, PART, Node
from tests.support.manifest_standin import Standin
from tests.support.registry import make_admin
from tests.support.releases import approve_standin, awaiting_version
from tests.support.server import MODELREG
from tests.support.tiny_model import tiny_model_files

MODEL_SIGNING = Path(sys.executable).parent / "model_signing"


def build_node_world(container, root, files=None):
    """acme/tiny version 1 approved (a seeded world: built once per worker and database)."""
    admin = make_admin(container, "acme")
    files = files or {**tiny_model_files(1), "big.txt": BIG}
    awaiting_version(container, admin, root / "src", "acme", "tiny", files=files)
    approve_standin(container, "acme", "tiny", 1)


def build_twin_world(container, root):
    """A version two of whose files hold the same bytes (one blob, two files in DEST)."""
    build_node_world(container, root, {**tiny_model_files(1), "big.txt": BIG, "copy/big-again.txt": BIG})


pytestmark = pytest.mark.seeded(builder=build_node_world)


@pytest.fixture
def node(container, tmp_path, signing_key_pem, seeded):
    with serve_in_thread(create_app(container)) as url, Standin(url) as standin:
        yield Node(container, tmp_path, standin, signing_key_pem)




def _summary(result: subprocess.CompletedProcess) -> dict:
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return next(line for line in reversed(lines) if line["event"] == "summary")


def _tree(path: Path) -> dict[str, bytes] | None:
    if not path.exists():
        return None
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _refused(result: subprocess.CompletedProcess, code: int, kind: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {kind}: "), result.stderr


def test_fetch_fills_dest_that_model_signing_verifies_then_noop_and_verify(node):
    node.release()
    dest = node.tmp / "models" / "tiny"
    ok = node.fetch(dest)
    assert ok.returncode == 0, ok.stderr
    summary = _summary(ok)
    assert summary["version"] == 1 and summary["downloaded_files"] == len(node.files) and not summary["noop"]
    assert set(summary["timings"]) == {"manifest", "verify", "download", "assemble"}
    for f in node.files:
        assert hashlib.sha256((dest / f["path"]).read_bytes()).hexdigest() == f["sha256"]
    assert (dest / "big.txt").read_bytes() == BIG
    assert json.loads((dest / "model.sig").read_text()) == node.bundle
    # The big file came in ranges of the part size; no blob URL got the node's token.
    assert len([g for g in node.standin.blob_gets if g["range"]]) >= 4
    assert all(g["auth"] is None for g in node.standin.blob_gets)
    assert all(g["auth"] == "Bearer node-token" for g in node.standin.manifest_gets)

    public_key = node.tmp / "registry.pub"
    public_key.write_bytes(node.registry_key.public_key.public_pem())
    checked = subprocess.run([str(MODEL_SIGNING), "verify", "key", str(dest), "--public_key", str(public_key),
                              "--signature", str(dest / "model.sig")], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr + checked.stdout

    gets = len(node.standin.blob_gets)
    again = node.fetch(dest)
    assert again.returncode == 0, again.stderr
    assert _summary(again)["noop"] and len(node.standin.blob_gets) == gets

    verified = node.cli("verify", str(dest), "--trust-root", str(node.root_file))
    assert verified.returncode == 0, verified.stderr
    shard = dest / "big.txt"
    shard.chmod(0o644)
    with open(shard, "r+b") as f:
        f.seek(1234)
        f.write(b"\x00" if BIG[1234] else b"\x01")
    _refused(node.cli("verify", str(dest), "--trust-root", str(node.root_file)), 13, "digest")
    (dest / "stray.txt").write_text("x")
    refused = node.cli("verify", str(dest), "--trust-root", str(node.root_file))
    _refused(refused, 13, "digest")
    assert "extra (stray.txt)" in refused.stderr


def test_fetch_fills_an_existing_empty_dest_from_the_cache(node):
    node.release()
    assert node.fetch(node.tmp / "first").returncode == 0
    gets = len(node.standin.blob_gets)
    mount = node.tmp / "mnt-models"
    mount.mkdir()
    ok = node.fetch(mount, "modelreg://acme/tiny@prod")
    assert ok.returncode == 0, ok.stderr
    assert len(node.standin.blob_gets) == gets and _summary(ok)["cached_files"] == len(node.files)
    assert _tree(mount) == _tree(node.tmp / "first")
    assert not [p for p in mount.iterdir() if p.name.startswith(".modelreg-staging")]


def _forged(node) -> None:
    body = node.release()
    payload = json.loads(base64.b64decode(body["envelope"]["payload"]))
    payload["version"] = 2
    body["envelope"]["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()


def _unknown_key(node) -> None:
    node.release(keys=[SigningKey.generate()])


def _expired(node) -> None:
    node.release(expires=NOW - dt.timedelta(seconds=1))


def _traversal(node) -> None:
    node.release(files=[*node.files, {"path": "../escape.txt", "size": 1, "sha256": "a" * 64}])


def _extra_file(node) -> None:
    node.release(files=[*node.files, {"path": "extra.txt", "size": 1, "sha256": node.files[0]["sha256"]}])


def _missing_file(node) -> None:
    node.release(files=[f for f in node.files if f["path"] != "config.json"])


def _flipped_blob(node) -> None:
    node.release()
    big = next(f for f in node.files if f["path"] == "big.txt")
    stored = node.blob_file(big["sha256"])
    stored.chmod(0o644)
    data = bytearray(stored.read_bytes())
    data[2_500_000] ^= 0x01
    stored.write_bytes(bytes(data))


def _revoked(node) -> None:
    node.standin.problems[("acme", "tiny", "prod")] = (409, {"code": "revoked", "detail": "acme/tiny@1 was revoked"})


def _not_approved(node) -> None:
    node.standin.problems[("acme", "tiny", "prod")] = (409, {"code": "not-approved",
                                                             "detail": "acme/tiny@1 is not approved"})


def _rotation_not_signed_by_previous(node) -> None:
    new = SigningKey.generate()
    node.standin.roots[2] = sign_root(root_document(2, [new.public_key], 1, LATER), [new])
    node.release(keys=[new], root_version=2)


def _network(node) -> None:
    node.release()
    node.standin.server.shutdown()
    node.standin.server.server_close()


@pytest.mark.parametrize("attack,code,kind", [
    (_forged, 10, "signature"), (_unknown_key, 10, "signature"), (_expired, 11, "expired"),
    (_flipped_blob, 13, "digest"), (_revoked, 14, "revoked"), (_not_approved, 15, "not-approved"),
    (_traversal, 18, "manifest"), (_extra_file, 18, "manifest"), (_missing_file, 18, "manifest"),
    (_rotation_not_signed_by_previous, 10, "signature"), (_network, 16, "network"),
])
@pytest.mark.parametrize("dest_kind", ["absent", "empty"])
@pytest.mark.parametrize("cache", ["cache", "no-cache"])
def test_each_refusal_leaves_dest_as_it_was(node, attack, code, kind, dest_kind, cache):
    dest = node.tmp / "mnt-models"
    if dest_kind == "empty":
        dest.mkdir()
    node.use_cache = cache == "cache"
    attack(node)
    _refused(node.fetch(dest), code, kind)
    assert _tree(dest) == (None if dest_kind == "absent" else {})
    if dest_kind == "empty":
        assert list(dest.iterdir()) == []
    # Neither a root nor a serial was persisted for a fetch that failed.
    assert not (node.cache / "trust" / "roots").exists() and not (node.cache / "trust" / "serials.json").exists()


def test_a_lower_serial_is_refused_after_a_higher_one_was_accepted(node):
    node.release(serial=5)
    assert node.fetch(node.tmp / "one").returncode == 0
    node.release(serial=4)
    _refused(node.fetch(node.tmp / "two"), 12, "rollback")
    assert not (node.tmp / "two").exists()
    node.release(serial=5)
    assert node.fetch(node.tmp / "three").returncode == 0


def test_a_dest_with_other_content_is_refused_untouched(node):
    node.release()
    dest = node.tmp / "busy"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    _refused(node.fetch(dest), 17, "destination")
    assert _tree(dest) == {"notes.txt": b"mine"}
    assert node.standin.blob_gets == []  # refused before a byte was downloaded


def test_a_rotation_signed_by_both_roots_is_walked_and_kept_in_the_cache_only_after_success(node):
    new = SigningKey.generate()
    node.standin.roots[2] = sign_root(root_document(2, [new.public_key], 1, LATER), [node.key, new])
    pinned = node.root_file.read_bytes()
    node.release(keys=[new], root_version=2, expires=NOW - dt.timedelta(seconds=1))
    _refused(node.fetch(node.tmp / "expired"), 11, "expired")
    assert not (node.cache / "trust" / "roots" / "2.json").exists()
    node.release(keys=[new], root_version=2)
    ok = node.fetch(node.tmp / "dest")
    assert ok.returncode == 0, ok.stderr
    assert (node.cache / "trust" / "roots" / "2.json").exists() and node.root_file.read_bytes() == pinned
    # The next fetch trusts root 2 from the cache (walked again from the pin) even if the registry is quiet.
    del node.standin.roots[2]
    assert node.fetch(node.tmp / "dest2").returncode == 0


def _bytes_requested(gets: list[dict], sizes: dict[str, int]) -> dict[str, int]:
    total: dict[str, int] = {}
    for g in gets:
        digest = g["path"].rsplit("/", 1)[-1]
        if g["range"]:
            first, last = g["range"].removeprefix("bytes=").split("-")
            total[digest] = total.get(digest, 0) + int(last) - int(first) + 1
        else:
            total[digest] = total.get(digest, 0) + sizes[digest]
    return total


def test_two_processes_fetching_one_model_into_one_cache_download_each_blob_once(node):
    node.release()
    sizes = {f["sha256"]: f["size"] for f in node.files}
    one, two = node.popen_fetch(node.tmp / "pod-a"), node.popen_fetch(node.tmp / "pod-b")
    for process in (one, two):
        _, err = process.communicate(timeout=180)
        assert process.returncode == 0, err
    requested = _bytes_requested(node.standin.blob_gets, sizes)
    assert requested == {d: s for d, s in sizes.items() if s > 0}
    assert _tree(node.tmp / "pod-a") == _tree(node.tmp / "pod-b")


def test_an_interrupted_download_resumes_where_it_stopped(node):
    node.release()
    big = next(f for f in node.files if f["path"] == "big.txt")
    node.standin.cut_after = 100 * 1024
    _refused(node.fetch(node.tmp / "dest"), 16, "network")
    assert not (node.tmp / "dest").exists()
    partial = node.cache / "tenants" / "acme" / "partial" / big["sha256"]
    assert partial.exists() and partial.with_name(partial.name + ".parts.json").exists()
    first = len(node.standin.blob_gets)
    node.standin.cut_after = None
    ok = node.fetch(node.tmp / "dest")
    assert ok.returncode == 0, ok.stderr
    assert (node.tmp / "dest" / "big.txt").read_bytes() == BIG
    summary = _summary(ok)
    assert summary["resumed_bytes"] > 0
    again = _bytes_requested(node.standin.blob_gets[first:], {big["sha256"]: big["size"]})
    assert again[big["sha256"]] == big["size"] - summary["resumed_bytes"] < big["size"]
    assert not partial.exists()


def test_cache_warm_once_fills_the_cache_then_fetch_downloads_nothing(node):
    node.release()
    warm = node.cli("cache", "warm", "acme/tiny@prod", "--trust-root", str(node.root_file), "--once", "--json")
    assert warm.returncode == 0, warm.stderr
    gets = len(node.standin.blob_gets)
    assert gets > 0
    ok = node.fetch(node.tmp / "dest")
    assert ok.returncode == 0 and len(node.standin.blob_gets) == gets
    assert _summary(ok)["cached_files"] == len(node.files)


def test_cache_verify_finds_removes_and_reports_a_corrupted_blob(node):
    node.release()
    assert node.fetch(node.tmp / "dest").returncode == 0
    clean = node.cli("cache", "verify", "--cache", str(node.cache), "--json")
    assert clean.returncode == 0 and _summary(clean)["bad"] == 0
    big = next(f for f in node.files if f["path"] == "big.txt")
    cached = node.cache / "tenants" / "acme" / "blobs" / "sha256" / big["sha256"][:2] / big["sha256"]
    cached.chmod(0o644)
    with open(cached, "r+b") as f:
        f.write(b"X")
    bad = node.cli("cache", "verify", "--cache", str(node.cache), "--json")
    _refused(bad, 13, "digest")
    assert big["sha256"][:16] in bad.stderr and not cached.exists()
    assert json.loads(bad.stdout.splitlines()[0])["digest"] == big["sha256"]


# --- what the cache and a fetched DEST may no longer do: hand out bytes nobody hashed -----------------------


def _cached_blob(node, digest: str) -> Path:
    return node.cache / "tenants" / "acme" / "blobs" / "sha256" / digest[:2] / digest


def _flip(path: Path, offset: int) -> None:
    """What a root process does to a file it can reach: mode bits do not stop it."""
    path.chmod(0o644)
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))


def _big(node) -> dict:
    return next(f for f in node.files if f["path"] == "big.txt")


def test_a_byte_flipped_in_the_cache_is_never_handed_out_the_blob_is_downloaded_again(node):
    node.release()
    assert node.fetch(node.tmp / "first").returncode == 0
    big = _big(node)
    _flip(_cached_blob(node, big["sha256"]), 2_500_000)  # same size, verified seconds ago (--recheck-hours 24)
    gets = len(node.standin.blob_gets)
    ok = node.fetch(node.tmp / "second")
    assert ok.returncode == 0, ok.stderr
    assert (node.tmp / "second" / "big.txt").read_bytes() == BIG
    summary = _summary(ok)
    assert (summary["rejected_cached_files"], summary["downloaded_files"]) == (1, 1)
    assert summary["cached_files"] == len({f["sha256"] for f in node.files}) - 1
    assert {g["path"].rsplit("/", 1)[-1] for g in node.standin.blob_gets[gets:]} == {big["sha256"]}
    assert hashlib.sha256(_cached_blob(node, big["sha256"]).read_bytes()).hexdigest() == big["sha256"]


def test_dest_shares_no_inode_with_the_cache_so_a_pod_writing_its_dest_changes_no_other_pod(node):
    node.release()
    first = node.tmp / "pod-a"
    assert node.fetch(first).returncode == 0
    for f in node.files:
        st = (first / f["path"]).stat()
        assert st.st_nlink == 1 and st.st_ino != _cached_blob(node, f["sha256"]).stat().st_ino, f["path"]
        assert stat.S_IMODE(st.st_mode) == 0o444
    big = _big(node)
    _flip(first / "big.txt", 1234)  # root in pod A writes its own /mnt/models
    assert hashlib.sha256(_cached_blob(node, big["sha256"]).read_bytes()).hexdigest() == big["sha256"]
    gets = len(node.standin.blob_gets)
    ok = node.fetch(node.tmp / "pod-b")
    assert ok.returncode == 0, ok.stderr
    assert (node.tmp / "pod-b" / "big.txt").read_bytes() == BIG and len(node.standin.blob_gets) == gets


def test_a_partial_changed_after_its_bytes_were_hashed_never_reaches_dest_nor_a_later_dest(node):
    """Another root process on the node rewrites a part of the cache's partial file once it is on disk.

    The cold fetch's DEST must hold the bytes the fetch hashed, not what the partial holds by the time the
    download ends (a fetch that copies or reads back the partial into DEST hands that change out unhashed);
    the tampered blob that enters the cache is caught by the next fetch's copy and downloaded again.
    """
    node.release()
    big = _big(node)
    partial = node.cache / "tenants" / "acme" / "partial" / big["sha256"]
    tampered: list[str] = []

    def tamper(path: str, wanted: str | None) -> None:
        # One stream (--parallel 1): part 0 is on disk before part 1 is asked for.
        if path.endswith(big["sha256"]) and wanted == f"bytes={1 << 20}-{(2 << 20) - 1}":
            _flip(partial, 4321)
            tampered.append(wanted)

    node.standin.before_blob = tamper
    dest = node.tmp / "pod-a"
    ok = node.cli("fetch", "acme/tiny@prod", str(dest), "--trust-root", str(node.root_file), "--part-size", PART,
                  "--parallel", "1", "--json")
    assert ok.returncode == 0, ok.stderr
    assert tampered and _summary(ok)["downloaded_files"] == len({f["sha256"] for f in node.files})
    assert (dest / "big.txt").read_bytes() == BIG
    assert node.cli("verify", str(dest), "--trust-root", str(node.root_file)).returncode == 0
    # What the cache took in is the partial as changed: never handed out, downloaded again.
    assert _cached_blob(node, big["sha256"]).read_bytes() != BIG
    node.standin.before_blob = None
    again = node.fetch(node.tmp / "pod-b")
    assert again.returncode == 0, again.stderr
    assert (node.tmp / "pod-b" / "big.txt").read_bytes() == BIG
    assert (_summary(again)["rejected_cached_files"], _summary(again)["downloaded_files"]) == (1, 1)


def _alter_file(node, target: Path) -> None:
    _flip(target / "big.txt", 99)


def _alter_signature(node, target: Path) -> None:
    (target / "model.sig").chmod(0o644)
    (target / "model.sig").write_text(json.dumps({**node.bundle, "note": "x"}))


def _delete_file(node, target: Path) -> None:
    (target / "config.json").unlink()


def _delete_cached(node, target: Path) -> None:
    _cached_blob(node, _big(node)["sha256"]).unlink()


def _revoke(node, target: Path) -> None:
    _revoked(node)


@pytest.mark.parametrize("fast_path,change,code,kind", [
    ("noop", _alter_file, 13, "digest"), ("noop", _alter_signature, 13, "digest"),
    ("noop", _delete_file, 17, "destination"), ("noop", _revoke, 14, "revoked"),
    ("cache-hit", _delete_cached, 0, "ok"), ("cache-hit", _revoke, 14, "revoked"),
])
def test_each_fast_path_with_the_state_changed_underneath(node, fast_path, change, code, kind):
    """A no-op fetch (DEST already holds the release) and a cache hit, after bytes changed, went, or were revoked."""
    node.release()
    dest = node.tmp / "dest"
    assert node.fetch(dest).returncode == 0
    target = dest if fast_path == "noop" else node.tmp / "other"
    change(node, dest)
    before = _tree(target)
    result = node.fetch(target)
    if code:
        _refused(result, code, kind)
        assert _tree(target) == before
        return
    assert result.returncode == 0, result.stderr
    assert (target / "big.txt").read_bytes() == BIG and _summary(result)["downloaded_files"] == 1


def test_a_noop_fetch_of_an_intact_dest_rehashes_it_and_downloads_nothing(node):
    node.release()
    dest = node.tmp / "dest"
    assert node.fetch(dest).returncode == 0
    gets = len(node.standin.blob_gets)
    again = node.fetch(dest)
    assert again.returncode == 0 and _summary(again)["noop"] and len(node.standin.blob_gets) == gets


def test_a_dest_inside_its_own_cache_or_holding_it_is_refused_as_usage(node):
    node.release()
    (node.tmp / "cache-link").symlink_to(node.cache, target_is_directory=True)
    for dest in (node.cache / "models", node.cache / "tenants" / "acme" / "blobs" / "x", node.cache,
                 node.tmp / "cache-link" / "models", node.tmp):
        result = node.fetch(dest)
        _refused(result, 2, "usage")
        assert "inside the node cache" in result.stderr
    assert not (node.cache / "models").exists() and not (node.cache / "tenants" / "acme" / "blobs").exists()
    assert node.standin.blob_gets == []


def _plain(node, *args: str) -> subprocess.CompletedProcess:
    return node.cli(*args, "--trust-root", str(node.root_file))


def test_without_json_a_person_gets_readable_lines_with_json_a_program_gets_json_lines(node):
    node.release()
    human = _plain(node, "fetch", "acme/tiny@prod", str(node.tmp / "a"), "--part-size", PART)
    assert human.returncode == 0, human.stderr
    lines = human.stdout.strip().splitlines()
    assert lines and not [line for line in lines if line.lstrip().startswith(("{", "["))], human.stdout
    assert lines[-1].startswith(f"acme/tiny@1 (serial 1) in {node.tmp / 'a'}: {len(node.files)} files")
    assert "download: " in human.stdout and human.stderr == ""  # no bar: stderr is not a terminal

    machine = node.fetch(node.tmp / "b")
    events = [json.loads(line)["event"] for line in machine.stdout.strip().splitlines()]
    assert {"phase", "summary"} <= set(events) and events[-1] == "summary"

    warm = _plain(node, "cache", "warm", "acme/tiny@prod", "--once")
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.strip() and not warm.stdout.lstrip().startswith("{"), warm.stdout
    warm_json = _plain(node, "cache", "warm", "acme/tiny@prod", "--once", "--json")
    assert json.loads(warm_json.stdout.strip().splitlines()[-1])["event"] == "summary"


def _on_a_terminal(node, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    """Run the CLI with stderr on a pseudo-terminal (a person's shell); return it and what the terminal got."""
    leader, follower = pty.openpty()
    process = subprocess.Popen([MODELREG, *args], stdout=subprocess.PIPE, stderr=follower, env=node.env())
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    out, _ = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, out.decode(), ""), \
        b"".join(chunks).decode(errors="replace")


def test_a_progress_bar_on_a_terminal_and_none_with_json(node):
    node.release()
    done, terminal = _on_a_terminal(node, "fetch", "acme/tiny@prod", str(node.tmp / "a"), "--trust-root",
                                    str(node.root_file), "--part-size", PART)
    assert done.returncode == 0, terminal
    assert "download" in terminal and "MiB" in terminal and "\x1b[" in terminal, terminal
    assert not done.stdout.lstrip().startswith("{")
    quiet, terminal = _on_a_terminal(node, "fetch", "acme/tiny@prod", str(node.tmp / "b"), "--trust-root",
                                     str(node.root_file), "--json")
    assert quiet.returncode == 0 and terminal == ""


@pytest.mark.seeded(builder=build_twin_world)
def test_two_files_with_the_same_bytes_come_from_one_download_and_each_is_hashed_cold_and_warm(node):
    node.release()
    for dest in (node.tmp / "cold", node.tmp / "warm"):
        ok = node.fetch(dest)
        assert ok.returncode == 0, ok.stderr
        assert (dest / "big.txt").read_bytes() == (dest / "copy" / "big-again.txt").read_bytes() == BIG
        assert (dest / "big.txt").stat().st_ino != (dest / "copy" / "big-again.txt").stat().st_ino
        assert _summary(ok)["copies"] == len(node.files)
    sizes = {f["sha256"]: f["size"] for f in node.files}
    assert _bytes_requested(node.standin.blob_gets, sizes)[_big(node)["sha256"]] == len(BIG)


def _outside_dest(node) -> dict[str, bytes] | None:
    """What a fetch without a cache may not write: the old default cache under HOME, and --cache's directory."""
    return {"home": _tree(node.tmp / "home"), "cache": _tree(node.cache)}


@pytest.mark.parametrize("dest_kind", ["absent", "empty"])
def test_without_a_cache_fetch_writes_only_inside_dest_and_every_byte_is_hashed(node, dest_kind):
    node.release()
    node.use_cache = False
    (node.tmp / "home").mkdir()
    dest = node.tmp / "mnt-models"
    if dest_kind == "empty":
        dest.mkdir()  # KServe's emptyDir: a mount point, filled from inside
    ok = node.fetch(dest)
    assert ok.returncode == 0, ok.stderr
    summary = _summary(ok)
    assert summary["downloaded_files"] == len(node.files) and summary["cached_files"] == 0
    for f in node.files:
        assert hashlib.sha256((dest / f["path"]).read_bytes()).hexdigest() == f["sha256"]
    assert json.loads((dest / "model.sig").read_text()) == node.bundle
    assert sorted(p.name for p in dest.iterdir()) == sorted({".git", "model.sig", *(f["path"].split("/")[0]
                                                                                  for f in node.files)})
    assert _outside_dest(node) == {"home": {}, "cache": None}
    # Again: the DEST that holds the release is re-hashed, still with nothing written elsewhere.
    again = node.fetch(dest)
    assert again.returncode == 0 and _summary(again)["noop"], again.stderr
    assert _outside_dest(node) == {"home": {}, "cache": None}
    assert node.cli("verify", str(dest), "--trust-root", str(node.root_file)).returncode == 0


def _served_root_sha256(node, version: int = 1) -> str:
    import httpx

    return hashlib.sha256(httpx.get(f"{node.standin.url}/v1/trust-root/{version}").content).hexdigest()


def test_a_trust_root_pinned_by_sha256_is_fetched_from_the_registry_and_walked_forward(node):
    node.use_cache = False
    pin = _served_root_sha256(node)
    # A rotation signed by root 1 and the new key: the fetch walks from the pinned root 1 to it.
    new = SigningKey.generate()
    node.standin.roots[2] = sign_root(root_document(2, [new.public_key], 1, LATER), [node.key, new])
    node.release(keys=[new], root_version=2)
    dest = node.tmp / "dest"
    ok = node.cli("fetch", "acme/tiny@prod", str(dest), "--trust-root-sha256", pin, "--json")
    assert ok.returncode == 0, ok.stderr
    assert (dest / "big.txt").read_bytes() == BIG
    verified = node.cli("verify", str(dest), "--trust-root-sha256", pin.upper())
    assert verified.returncode == 0, verified.stderr
    # The file and the pin together: the file must be the pinned bytes.
    both = node.cli("fetch", "acme/tiny@prod", str(node.tmp / "dest-2"), "--trust-root", str(node.root_file),
                    "--trust-root-sha256", hashlib.sha256(node.root_file.read_bytes()).hexdigest())
    assert both.returncode == 0, both.stderr


def test_a_wrong_pin_is_refused_before_the_manifest_and_dest_stays_absent(node):
    node.use_cache = False
    node.release()
    wrong = hashlib.sha256(b"another root").hexdigest()
    dest = node.tmp / "dest"
    refused = node.cli("fetch", "acme/tiny@prod", str(dest), "--trust-root-sha256", wrong)
    _refused(refused, 10, "signature")
    assert "the registry's trust root 1 hashes to sha256" in refused.stderr and wrong in refused.stderr
    assert not dest.exists() and node.standin.manifest_gets == []
    # The file given too, and not the pinned one: refused the same way.
    refused = node.cli("fetch", "acme/tiny@prod", str(dest), "--trust-root", str(node.root_file),
                       "--trust-root-sha256", wrong)
    _refused(refused, 10, "signature")
    assert not dest.exists()


def test_a_registry_serving_another_root_1_than_the_pinned_one_is_refused(node):
    node.use_cache = False
    pin = _served_root_sha256(node)
    # The attacker's registry: its own root 1 (self-signed, valid on its own) and releases it signs.
    attacker = SigningKey.generate()
    node.standin.roots = {1: sign_root(root_document(1, [attacker.public_key], 1, LATER), [attacker])}
    node.release(keys=[attacker])
    dest = node.tmp / "mnt-models"
    dest.mkdir()
    _refused(node.cli("fetch", "acme/tiny@prod", str(dest), "--trust-root-sha256", pin), 10, "signature")
    assert list(dest.iterdir()) == []
    # The same root 1 re-serialized (other whitespace) is other bytes: refused too, the pin is of bytes.
    node.standin.roots = {}
    original = json.loads(node.root_file.read_text())
    node.standin.raw_roots = {1: json.dumps(original, indent=1).encode()}
    _refused(node.cli("fetch", "acme/tiny@prod", str(dest), "--trust-root-sha256", pin), 10, "signature")
    assert list(dest.iterdir()) == []
