"""A witness that was down when a release was issued cosigns later (ADR 0011, Witnesses): the registry
re-submits the newest checkpoint to every witness whose cosignature is missing, on the integration job's
due time with back-off (a ManualClock moves it, nothing sleeps), until the quorum holds; the release
fetched afterwards carries the cosignature and ``modelreg fetch`` accepts it, where before it refused.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess

import httpx
import pytest
from sqlalchemy import select

from api.app import create_app
from registry import audit
from registry.bootstrap import bootstrap, ensure_trust_root
from registry.clock import ManualClock
from registry.db.models import Job
from registry.domain.errors import UnverifiedNoteError
from registry.jobs import JobKind, job_key
from registry.services import tlog
from registry.settings import LogWitness
from registry.signing.trust_root import parse_root
from registry.tlog.checkpoint import open_checkpoint
from registry.tlog.note import Ed25519Signer
from tests.support.live_app import serve_in_thread
from tests.support.registry import drain, make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version
from tests.support.server import MODELREG, free_port
from tests.support.witness import make_witness_key, running_witness

ORIGIN = "registry.example/log"


def test_a_witness_down_at_approval_cosigns_on_resubmission_and_the_release_then_carries_it(settings, tmp_path):
    log_key = Ed25519Signer.generate(ORIGIN)
    (tmp_path / "log-key").write_text(log_key.skey + "\n")
    (tmp_path / "witness").mkdir()
    vkey = make_witness_key(tmp_path / "witness" / "key", "witness.example/one")
    port = free_port()  # nothing listens there until the witness comes up
    witnesses = [LogWitness(verifier_key=vkey, url=f"http://127.0.0.1:{port}")]
    settings = settings.model_copy(update={"log_key_file": tmp_path / "log-key", "log_checkpoint_interval": 0.0,
                                           "log_witness_quorum": 1, "log_witnesses": witnesses})
    clock = ManualClock(dt.datetime.now(dt.timezone.utc).replace(microsecond=0))
    container = bootstrap(settings, clock=clock)
    try:
        admin = make_admin(container, "acme")
        number = awaiting_version(container, admin, tmp_path / "model", "acme", "tiny", seed=7)
        approve_standin(container, "acme", "tiny", number)
        ensure_trust_root(container)
        token = role_token(container, "node-1", "acme", "node")

        def arm() -> bool:
            with container.session_factory() as session:
                return tlog.arm_integration(session, now=clock.now(), witnesses=witnesses, quorum=1)

        def due() -> dt.datetime:
            with container.session_factory() as session:
                run_after = session.scalar(select(Job.run_after).where(
                    Job.idempotency_key == job_key(JobKind.INTEGRATE_AUDIT_LOG.value)))
            return run_after.replace(tzinfo=dt.timezone.utc) if run_after.tzinfo is None else run_after

        with serve_in_thread(create_app(container)) as url:
            root_file = tmp_path / "root.json"
            root_file.write_text(httpx.get(f"{url}/v1/trust-root", timeout=30).text)
            log = parse_root(json.loads(root_file.read_text())).log
            env = {**os.environ, "MODELREG_URL": url, "MODELREG_TOKEN": token,
                   "MODELREG_TRUST_ROOT": str(root_file), "MODELREG_CACHE": str(tmp_path / "cache")}

            def release() -> bytes:
                r = httpx.get(f"{url}/v1/models/acme/tiny/manifest", params={"ref": str(number)},
                              headers={"Authorization": f"Bearer {token}"}, timeout=30)
                assert r.status_code == 200, r.text
                return r.json()["log"]["checkpoint"].encode()

            def fetch(dest: str) -> subprocess.CompletedProcess:
                return subprocess.run([MODELREG, "fetch", f"acme/tiny@{number}", str(tmp_path / dest)], env=env,
                                      capture_output=True, text=True, timeout=120)

            # The witness is down when the release is issued: its checkpoint is signed, cosigned by nobody.
            with pytest.raises(UnverifiedNoteError):
                open_checkpoint(release(), ORIGIN, log.log_verifier(), witnesses=log.witness_verifiers(), quorum=1)
            refused = fetch("refused")
            assert refused.returncode == 19, refused.stderr
            # The worker integrates and signs what is new (the fetch's audit events), and asks the witness.
            assert arm()
            drain(container)
            # The log has nothing new, yet the job is queued again for the missing cosignature, backing off
            # while the witness stays down: each wait as long as the checkpoint has gone uncosigned.
            gaps = []
            for _ in range(3):
                assert arm()
                gaps.append((due() - clock.now()).total_seconds())
                assert drain(container) == 0  # not due yet
                clock.advance(seconds=gaps[-1])
                assert drain(container) == 1  # due: submitted again, and refused again (nobody listens)
            assert gaps == [5.0, 5.0, 10.0]
            # A job waiting out its back-off does not hold back new events: it is made due at once.
            assert arm()
            with container.session_factory() as session:
                audit.append(session, actor="alice", action="test.event", subject="thing/1", tenant="acme")
                session.commit()
            assert arm() and due() == clock.now()
            assert drain(container) == 1
            with running_witness(tmp_path / "witness", "witness.example/one", {ORIGIN: log_key.verifier().vkey},
                                 port=port):
                assert arm()
                clock.advance(seconds=(due() - clock.now()).total_seconds())
                assert drain(container) == 1
                # The quorum holds: nothing more to ask, and the release now carries the cosignature.
                assert arm() is False
                opened = open_checkpoint(release(), ORIGIN, log.log_verifier(), witnesses=log.witness_verifiers(),
                                         quorum=1)
                assert opened.checkpoint.size >= 1
                done = fetch("accepted")
                assert done.returncode == 0, done.stderr
    finally:
        container.dispose()
