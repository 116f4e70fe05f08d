"""A release proven in the verifiable log, end to end: the registry's trust root names its log (key, one
real ``modelreg witness``, quorum 1), the manifest endpoint answers with the checkpoint and the inclusion
proofs of the version's approval and alias move (signed and cosigned at once when no checkpoint covered
them), and ``modelreg fetch`` accepts it, keeps the checkpoint, and on the next release checks that the
log grew consistently. The forgeries are in ``tests/integration/test_fetch_log_proofs.py``.
"""

from __future__ import annotations

import json
import os
import subprocess

import httpx
import pytest

from api.app import create_app
from registry.bootstrap import ensure_trust_root
from registry.domain.aliases import make_target
from registry.services import aliases
from registry.settings import LogWitness
from registry.signing.trust_root import parse_root
from registry.tlog.checkpoint import open_checkpoint
from tests.support.live_app import serve_in_thread
from tests.support.registry import make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version
from tests.support.server import MODELREG
from tests.support.tiny_model import tiny_model_files
from tests.support.witness import running_witness

ORIGIN = "registry.example/log"


@pytest.fixture
def witness(tmp_path):
    from registry.tlog.note import Ed25519Signer

    key = Ed25519Signer.generate(ORIGIN)
    (tmp_path / "log-key").write_text(key.skey + "\n")
    with running_witness(tmp_path / "witness", "witness.example/one", {ORIGIN: key.verifier().vkey}) as running:
        yield running


@pytest.fixture
def settings(settings, tmp_path, witness):
    return settings.model_copy(update={
        "log_key_file": tmp_path / "log-key", "log_witness_quorum": 1,
        "log_witnesses": [LogWitness(verifier_key=witness.vkey, url=witness.url)]})


def promote(container, admin, number):
    with container.session_factory() as session:
        aliases.promote(session, admin, "acme", "tiny", "prod", make_target(number), policy=container.policy,
                        clock=container.clock)


def test_fetch_accepts_a_logged_release_keeps_its_checkpoint_and_checks_the_next_extends_it(
        container, tmp_path, witness):
    admin = make_admin(container, "acme")
    numbers = [awaiting_version(container, admin, tmp_path / f"m{seed}", "acme", "tiny", seed=seed,
                                files=tiny_model_files(seed)) for seed in (41, 42)]
    for n in numbers:
        approve_standin(container, "acme", "tiny", n)
    promote(container, admin, numbers[0])
    ensure_trust_root(container)  # as `modelreg serve` does at start: the newest root names the log
    token = role_token(container, "node-1", "acme", "node")
    with serve_in_thread(create_app(container)) as url:
        root_file = tmp_path / "root.json"
        root_file.write_text(httpx.get(f"{url}/v1/trust-root", timeout=30).text)
        log = parse_root(json.loads(root_file.read_text())).log
        assert log.origin == ORIGIN and log.witnesses == (witness.vkey,) and log.quorum == 1
        env = {**os.environ, "MODELREG_URL": url, "MODELREG_TOKEN": token, "MODELREG_TRUST_ROOT": str(root_file),
               "MODELREG_CACHE": str(tmp_path / "cache")}

        answer = httpx.get(f"{url}/v1/models/acme/tiny/manifest", params={"ref": "prod"},
                           headers={"Authorization": f"Bearer {token}"}).json()
        opened = open_checkpoint(answer["log"]["checkpoint"].encode(), ORIGIN, log.log_verifier(),
                                 witnesses=log.witness_verifiers(), quorum=1)
        assert [e["event"]["action"] for e in answer["log"]["entries"]] == ["version.approved", "alias.promoted"]

        def fetch(ref, dest):
            return subprocess.run([MODELREG, "fetch", ref, str(tmp_path / dest), "--json"], env=env,
                                  capture_output=True, text=True, timeout=120)

        done = fetch("acme/tiny@prod", "first")
        assert done.returncode == 0, done.stderr
        (kept,) = (tmp_path / "cache" / "trust" / "log").glob("*.checkpoint")
        first_size = int(kept.read_text().split("\n")[1])
        assert first_size >= opened.checkpoint.size

        promote(container, admin, numbers[1])
        done = fetch("acme/tiny@prod", "second")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.strip().splitlines()[-1])["version"] == numbers[1]
        assert int(kept.read_text().split("\n")[1]) > first_size
        # A version number is proven by its approval alone.
        done = fetch(f"acme/tiny@{numbers[0]}", "pinned")
        assert done.returncode == 0, done.stderr
