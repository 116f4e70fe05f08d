"""`modelreg fetch` against the real manifest and trust-root endpoints: the node half of a release, end to end.

A version made by the pipeline, approved and promoted to ``prod``; a node principal's token; the trust root
the registry publishes. The fetch verifies and fills DEST (``model_signing verify key`` accepts it), follows
``prod`` when it moves (a higher serial), walks a key rotation, and refuses a revoked release. The hostile
cases (forged signatures, expired or rolled-back releases, flipped bytes) are in ``fetch_client/``,
whose stand-in server is the attacker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from api.app import create_app
from registry.domain.aliases import make_target
from registry.services import aliases, revocations
from tests.support.live_app import serve_in_thread
from tests.support.registry import make_admin, role_token
from tests.support.releases import approve_standin, awaiting_version
from tests.support.server import MODELREG
from tests.support.tiny_model import tiny_model_files

MODEL_SIGNING = Path(sys.executable).parent / "model_signing"


@pytest.fixture
def node(container, tmp_path):
    admin = make_admin(container, "acme")
    numbers = [awaiting_version(container, admin, tmp_path / f"m{seed}", "acme", "tiny", seed=seed,
                                files=tiny_model_files(seed)) for seed in (41, 42)]
    for n in numbers:
        approve_standin(container, "acme", "tiny", n)
    promote(container, admin, numbers[0])
    token = role_token(container, "node-1", "acme", "node")
    with serve_in_thread(create_app(container)) as url:
        import httpx

        root = tmp_path / "root.json"
        root.write_text(httpx.get(f"{url}/v1/trust-root", timeout=30).text)
        env = {**os.environ, "MODELREG_URL": url, "MODELREG_TOKEN": token, "MODELREG_TRUST_ROOT": str(root),
               "MODELREG_CACHE": str(tmp_path / "cache")}
        yield {"url": url, "env": env, "root": root, "admin": admin, "numbers": numbers, "tmp": tmp_path}


def promote(container, admin, number):
    with container.session_factory() as session:
        aliases.promote(session, admin, "acme", "tiny", "prod", make_target(number), policy=container.policy,
                        clock=container.clock)


def run(env, *args):
    return subprocess.run([MODELREG, *args], env=env, capture_output=True, text=True, timeout=120)


def test_fetch_verify_and_model_signing_accept_the_release(node, tmp_path, container):
    dest = tmp_path / "dest"
    done = run(node["env"], "fetch", "modelreg://acme/tiny@prod", str(dest), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["version"] == node["numbers"][0] and summary["serial"] == 1
    assert {p.name for p in dest.iterdir()} >= set(tiny_model_files(41)) | {"model.sig"}
    for path, data in tiny_model_files(41).items():
        assert (dest / path).read_bytes() == data
    assert run(node["env"], "verify", str(dest)).returncode == 0
    key = tmp_path / "registry.pub"
    assert run(node["env"], "keys", "export", "-o", str(key)).returncode == 0
    checked = subprocess.run([MODEL_SIGNING, "verify", "key", str(dest), "--public_key", str(key),
                              "--signature", str(dest / "model.sig")], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    again = run(node["env"], "fetch", "acme/tiny@prod", str(dest), "--json")
    assert again.returncode == 0 and json.loads(again.stdout.strip().splitlines()[-1])["noop"] is True


def test_fetch_follows_prod_when_it_moves_and_refuses_a_revoked_release(node, tmp_path, container):
    first, second = node["numbers"]
    assert run(node["env"], "fetch", "acme/tiny@prod", str(tmp_path / "a")).returncode == 0
    promote(container, node["admin"], second)
    moved = run(node["env"], "fetch", "acme/tiny@prod", str(tmp_path / "b"), "--json")
    assert moved.returncode == 0, moved.stderr
    summary = json.loads(moved.stdout.strip().splitlines()[-1])
    assert (summary["version"], summary["serial"]) == (second, 2)
    with container.session_factory() as session:
        revocations.revoke(session, node["admin"], "acme", "tiny", second, "bad weights", clock=container.clock)
    refused = run(node["env"], "fetch", "acme/tiny@prod", str(tmp_path / "c"))
    assert refused.returncode == 14 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "revoked" in refused.stderr and not (tmp_path / "c").exists()
    unapproved = run(node["env"], "fetch", "acme/tiny@9", str(tmp_path / "d"))
    assert unapproved.returncode != 0 and not (tmp_path / "d").exists()


def test_fetch_walks_a_key_rotation_from_the_pinned_root(node, tmp_path, container):
    rotated = subprocess.run([MODELREG, "keys", "rotate", "--data-dir", str(container.settings.data_dir)],
                             env={**os.environ, "MODELREG_DATABASE_URL": container.settings.database_url,
                                  "MODELREG_BLOB_STORE_URL": container.settings.resolved_blob_store_url(),
                                  "MODELREG_SIGNING_KEY_PEM":
                                      container.settings.signing_key_pem.get_secret_value(),
                                  "MODELREG_PRESIGN_SECRET": "test-presign-secret-0123456789ab"},
                             capture_output=True, text=True)
    assert rotated.returncode == 0, rotated.stderr
    import httpx

    assert httpx.get(f"{node['url']}/v1/trust-root", timeout=30).json() != json.loads(node["root"].read_text())
    done = run(node["env"], "fetch", "acme/tiny@prod", str(tmp_path / "dest"), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(node["root"].read_text())["payload"]  # the pinned file is never rewritten
    stored = list((tmp_path / "cache" / "trust" / "roots").glob("*.json"))
    assert [p.name for p in stored] == ["2.json"]


def _textfile(path: Path) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("model", "ref")))): s.value
            for family in text_string_to_metric_families(path.read_text()) for s in family.samples
            if s.labels.get("model") == "acme/tiny" and s.labels.get("ref") == "prod"}


def test_fetch_writes_its_timings_and_outcome_for_the_node_exporter(node, tmp_path, container):
    collector = tmp_path / "textfile-collector"
    collector.mkdir()
    prom = collector / "modelreg-fetch.prom"
    done = run(node["env"], "fetch", "acme/tiny@prod", str(tmp_path / "a"), "--json", "--metrics-textfile", str(prom))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    written = _textfile(prom)
    phases = {dict(labels)["phase"]: v for (name, labels), v in written.items()
              if name == "modelreg_fetch_phase_seconds"}
    assert phases == pytest.approx(summary["timings"])
    assert set(phases) == {"manifest", "verify", "download", "assemble"}
    assert written["modelreg_fetch_success", ()] == 1
    assert written["modelreg_fetch_outcome", (("outcome", "ok"),)] == 1
    assert written["modelreg_fetch_version", ()] == summary["version"]
    assert written["modelreg_fetch_downloaded_bytes", ()] == summary["downloaded_bytes"] > 0

    first, _ = node["numbers"]
    with container.session_factory() as session:
        revocations.revoke(session, node["admin"], "acme", "tiny", first, "bad weights", clock=container.clock)
    refused = run(node["env"], "fetch", "acme/tiny@prod", str(tmp_path / "b"), "--metrics-textfile", str(prom))
    assert refused.returncode == 14, refused.stderr
    written = _textfile(prom)
    assert written["modelreg_fetch_success", ()] == 0
    assert written["modelreg_fetch_outcome", (("outcome", "revoked"),)] == 1
    assert ("modelreg_fetch_outcome", (("outcome", "ok"),)) not in written, "the file holds the last fetch only"
    assert ("modelreg_fetch_version", ()) not in written
    assert [p.name for p in collector.iterdir()] == [prom.name], "a temporary file was left behind"
