"""``modelreg audit verify --checkpoint FILE``: the log today extends a checkpoint saved earlier, proven from the
checkpoint, tiles and a proof over HTTP, never by replaying events.

Against the real registry (served by uvicorn) a log that grew passes and ``--save`` keeps the new checkpoint.
Against hostile stand-ins (tests/support/log_standin.py) it refuses, with exit 1 and one line: a fork at the
saved size, a fork behind a larger tree, a truncated log, a checkpoint signed by another key or with a
broken signature, a log key swapped in ``/v1/keys``, tiles of another tree behind a proof that is right,
and a proof endpoint that lies beside honest tiles.
"""

from __future__ import annotations

import json

import pytest

from api.app import create_app
from registry import audit
from registry.cli import main
from registry.services import tlog
from registry.tlog import merkle
from registry.tlog.note import Ed25519Signer
from tests.support.live_app import serve_in_thread
from tests.support.log_standin import LogStandin, signed_checkpoint

ORIGIN = "registry.example/log"


def append_and_sign(container, count: int) -> None:
    with container.session_factory() as session:
        for i in range(count):
            audit.append(session, actor="alice", action="test.event", subject=f"thing/{i}")
        session.commit()
    tlog.integrate_audit_log(container.session_factory)
    tlog.sign_checkpoint_if_due(container.session_factory, container.log_key, interval=10,
                                now=container.clock.now(), on_demand=True)


def verify(capsys, saved, url: str, *extra: str) -> tuple[int, str, str]:
    code = main(["audit", "verify", "--checkpoint", str(saved), "--url", url, *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_log_that_grew_extends_the_saved_checkpoint(container, tmp_path, capsys):
    append_and_sign(container, 300)
    saved = tmp_path / "checkpoint"
    with container.session_factory() as session:
        saved.write_text(tlog.latest_checkpoint(session))
    append_and_sign(container, 40)
    with serve_in_thread(create_app(container)) as url:
        code, out, err = verify(capsys, saved, url, "--save", str(tmp_path / "newer"))
        assert (code, err) == (0, "")
        assert "size 300 -> 340" in out
        with container.session_factory() as session:
            assert (tmp_path / "newer").read_text() == tlog.latest_checkpoint(session)
        # The pinned key (as `modelreg keys export --log-output` writes it) works the same; another does not.
        pinned = tmp_path / "log.vkey"
        pinned.write_text(container.log_key.verifier().vkey + "\n")
        assert verify(capsys, saved, url, "--log-key", str(pinned))[0] == 0
        other = Ed25519Signer.generate(container.log_key.name).verifier().vkey
        code, _, err = verify(capsys, saved, url, "--log-key", other)
        assert code == 1 and err.count("\n") == 1


def tree(leaves: list[bytes]) -> merkle.MemoryHashes:
    return merkle.MemoryHashes(merkle.leaf_hash(leaf) for leaf in leaves)


HONEST = [b"event %d" % i for i in range(600)]


@pytest.fixture
def hostile(tmp_path):
    """A stand-in log of 600 honest leaves, and a checkpoint of its first 300 saved earlier."""
    key = Ed25519Signer.generate(ORIGIN)
    honest = tree(HONEST)
    saved = tmp_path / "checkpoint"
    saved.write_bytes(signed_checkpoint(key, honest, 300))
    with LogStandin(key, honest) as standin:
        yield standin, saved


def refused(capsys, saved, standin, words: str) -> None:
    code, out, err = verify(capsys, saved, standin.url)
    assert code == 1, out
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert words in err, err


def test_the_honest_stand_in_passes(hostile, capsys):
    standin, saved = hostile
    code, out, _ = verify(capsys, saved, standin.url)
    assert code == 0 and "size 300 -> 600" in out
    # Tiles and one proof: a few requests, no entries.
    assert not any("entries" in path for path in standin.requests)


def test_a_fork_at_the_saved_size_is_refused(hostile, capsys):
    standin, saved = hostile
    standin.hashes = tree([b"forked"] + HONEST[1:300])
    standin.checkpoint = signed_checkpoint(standin.key, standin.hashes)
    refused(capsys, saved, standin, "another root at size 300")


def test_a_fork_behind_a_larger_tree_is_refused(hostile, capsys):
    standin, saved = hostile
    standin.hashes = tree(HONEST[:10] + [b"rewritten"] + HONEST[11:])
    standin.checkpoint = signed_checkpoint(standin.key, standin.hashes)
    refused(capsys, saved, standin, "consistency proof")


def test_a_truncated_log_is_refused(hostile, capsys):
    standin, saved = hostile
    standin.checkpoint = signed_checkpoint(standin.key, standin.hashes, 299)
    refused(capsys, saved, standin, "smaller than the saved checkpoint")


def test_a_checkpoint_signed_by_another_key_is_refused(hostile, capsys):
    standin, saved = hostile
    standin.checkpoint = signed_checkpoint(Ed25519Signer.generate(ORIGIN), standin.hashes)
    refused(capsys, saved, standin, "note")


def test_a_broken_signature_of_the_log_key_is_refused(hostile, capsys):
    standin, saved = hostile
    body, _, signature = standin.checkpoint.decode().rpartition("\n\u2014 ")
    name, _, blob = signature.rstrip("\n").partition(" ")
    import base64

    raw = bytearray(base64.b64decode(blob))
    raw[-1] ^= 1
    standin.checkpoint = f"{body}\n\u2014 {name} {base64.b64encode(bytes(raw)).decode()}\n".encode()
    refused(capsys, saved, standin, "invalid signature")


def test_a_log_key_swapped_in_the_keys_answer_is_refused(hostile, capsys):
    standin, saved = hostile
    standin.key = Ed25519Signer.generate(ORIGIN)
    standin.checkpoint = signed_checkpoint(standin.key, standin.hashes)
    refused(capsys, saved, standin, "note")


def test_tiles_of_another_tree_are_refused_even_beside_a_true_proof(hostile, capsys):
    standin, saved = hostile
    honest_proof = merkle.consistency_proof(300, 600, standin.hashes)
    standin.hashes = tree(HONEST[:10] + [b"rewritten"] + HONEST[11:])
    standin.proof_hashes = honest_proof
    standin.checkpoint = signed_checkpoint(standin.key, tree(HONEST))  # the honest head over forged tiles
    refused(capsys, saved, standin, "consistency proof")


def test_a_lying_proof_endpoint_is_refused_beside_honest_tiles(hostile, capsys):
    standin, saved = hostile
    standin.proof_hashes = merkle.consistency_proof(300, 600, tree(HONEST[:10] + [b"x"] + HONEST[11:]))
    refused(capsys, saved, standin, "consistency proof")


def test_a_served_registry_integrates_signs_and_exports_its_log_key(tmp_path):
    """`modelreg serve` with workers: the worker's tick queues integrate_audit_log, the job signs a checkpoint
    that verifies with the key `modelreg keys export --log-output` writes, and a later one extends it."""
    import time

    import httpx

    from registry.tlog.checkpoint import open_checkpoint
    from registry.tlog.note import parse_verifier_key
    from tests.support.server import start_server

    def checkpoint_after(size: int) -> bytes:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            r = httpx.get(s.url + "/log/checkpoint")
            if r.status_code == 200 and int(r.content.split(b"\n")[1]) > size:
                return r.content
            time.sleep(0.05)
        raise AssertionError(f"no checkpoint past size {size}: {s.log.read_text()[-2000:]}")

    s = start_server(tmp_path / "data", {"MODELREG_LOG_CHECKPOINT_INTERVAL": "1",
                                         "MODELREG_AUDIT_CHECKPOINT_EVERY_SECONDS": "1",
                                         "MODELREG_LOG_ORIGIN": "models.example/log"}, workers=1)
    try:
        s.cli("tenant", "create", "t1", check=True)
        first = checkpoint_after(0)
        exported = s.cli("keys", "export", "-o", str(tmp_path / "registry.pub"), "--log-output",
                         str(tmp_path / "log.vkey"), check=True)
        vkey = (tmp_path / "log.vkey").read_text().strip()
        assert f"log key {vkey}" in exported.stdout
        opened = open_checkpoint(first, "models.example/log", parse_verifier_key(vkey)).checkpoint
        (tmp_path / "saved").write_bytes(first)
        s.cli("tenant", "create", "t2", check=True)
        checkpoint_after(opened.size)
        proven = s.cli("audit", "verify", "--checkpoint", str(tmp_path / "saved"), "--log-key", vkey, "--json")
        assert proven.returncode == 0, proven.stderr
        assert json.loads(proven.stdout)["new_size"] > opened.size
    finally:
        s.stop()
