"""``modelreg fetch`` refuses a release that is not proven in the verifiable log its trust root names.

The stand-in manifest endpoint (``manifest_standin``) is a registry whose database and log key the
attacker holds: it serves releases signed by the node's trusted key, with checkpoints and proofs it
builds itself (``hostile_log``). An honest log is accepted and its checkpoint kept beside the serials;
each forgery (a fork at one size, a smaller tree after a larger, a rewritten old event, a truncated log,
another log key, a missing cosignature, a proof for another leaf or tree, events of another version)
is refused with exit 19 and one line, DEST untouched and the kept checkpoint as it was. A witness the node
requires itself (``--witness``) is required alike by every program that opens a release: ``fetch``,
``cache warm`` and ``serve-s3``.
"""

from __future__ import annotations

import copy
import json
import subprocess

import pytest
from botocore.exceptions import ClientError

from api.app import create_app
from registry.signing.trust_root import root_document, sign_root
from registry.tlog.note import Ed25519Signer
from tests.support.fetch_node import LATER, Node
from tests.support.hostile_log import HostileLog
from tests.support.live_app import serve_in_thread
from tests.support.manifest_standin import Standin
from tests.support.registry import make_admin
from tests.support.releases import approve_standin, awaiting_version
from tests.support.s3_endpoint import KEY, SECRET, s3_client
from tests.support.server import MODELREG, stop_process
from tests.support.tiny_model import tiny_model_files


@pytest.fixture
def logged(container, tmp_path, signing_key_pem):
    """A node whose trust root names the hostile log (one of its two witnesses required), and the log
    holding version 1's approval and its promotion to ``prod``."""
    admin = make_admin(container, "acme")
    awaiting_version(container, admin, tmp_path / "src", "acme", "tiny", files=tiny_model_files(1))
    approve_standin(container, "acme", "tiny", 1)
    with serve_in_thread(create_app(container)) as url, Standin(url) as standin:
        node = Node(container, tmp_path, standin, signing_key_pem)
        log = HostileLog()
        root = sign_root(root_document(1, [node.key.public_key], 1, LATER, log=log.trust(quorum=1)), [node.key])
        node.root_file.write_text(json.dumps(root))
        standin.roots[1] = root
        node.approval, node.move = log.release_events()
        standin.log_consistency = log.consistency
        yield node, log


def kept_checkpoints(node: Node) -> dict[str, bytes]:
    folder = node.cache / "trust" / "log"
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.checkpoint"))} if folder.is_dir() else {}


def refused(node: Node, name: str) -> None:
    dest = node.tmp / name
    before = kept_checkpoints(node)
    result = node.fetch(dest)
    assert result.returncode == 19, (result.returncode, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: log: "), result.stderr
    assert not dest.exists()
    assert kept_checkpoints(node) == before


def accepted(node: Node, name: str) -> None:
    result = node.fetch(node.tmp / name)
    assert result.returncode == 0, result.stderr


def test_an_honest_log_is_accepted_and_its_checkpoint_kept_then_extended(logged):
    node, log = logged
    node.release(log=log.proof((node.approval, node.move)))
    accepted(node, "first")
    (kept,) = kept_checkpoints(node).values()
    assert kept.decode() == node.standin.manifests[("acme", "tiny", "prod")]["log"]["checkpoint"]
    assert node.standin.consistency_gets == []
    for _ in range(3):
        log.append("version.submitted", "acme/other@2")
    node.release(serial=2, log=log.proof((node.approval, node.move)))
    accepted(node, "second")
    assert node.standin.consistency_gets == [(4, 7)]
    (newer,) = kept_checkpoints(node).values()
    assert newer.decode().startswith(f"{log.origin}\n7\n")


def _no_proof(node, log):
    node.release()


def _another_log_key(node, log):
    node.release(log=log.proof((node.approval, node.move), key=Ed25519Signer.generate(log.origin)))


def _no_cosignature(node, log):
    node.release(log=log.proof((node.approval, node.move), cosigners=()))


def _inclusion_proof_of_another_leaf(node, log):
    proof = log.proof((node.approval, node.move))
    proof["entries"][0] = log.entry(node.approval, len(log.events), index=0)
    node.release(log=proof)


def _proof_against_a_tree_never_signed(node, log):
    proof = log.proof((node.approval, node.move))
    log.append("version.submitted", "acme/other@9")
    proof["entries"] = [log.entry(e, len(log.events)) for e in (node.approval, node.move)]
    node.release(log=proof)


def _events_of_another_version(node, log):
    approval = log.append("version.approved", "acme/tiny@2", {"state": "approved"})
    node.release(log=log.proof((approval, node.move)))


def _an_edited_event(node, log):
    proof = log.proof((node.approval, node.move))
    proof["entries"][1]["event"] = {**node.move, "details": {**node.move["details"], "to": 1, "comment": "x"}}
    node.release(log=proof)


@pytest.mark.parametrize("forge", [_no_proof, _another_log_key, _no_cosignature, _inclusion_proof_of_another_leaf,
                                   _proof_against_a_tree_never_signed, _events_of_another_version,
                                   _an_edited_event])
def test_a_release_not_proven_in_the_log_is_refused(logged, forge):
    node, log = logged
    forge(node, log)
    refused(node, "dest")


def _fetch(node: Node, witness: str) -> tuple[bool, str]:
    dest = node.tmp / f"dest-{len(list(node.tmp.glob('dest-*')))}"
    result = node.fetch(dest, "acme/tiny@prod", "--witness", witness)
    assert result.returncode in (0, 19), result.stderr
    assert dest.exists() == (result.returncode == 0)
    return result.returncode == 0, result.stderr


def _cache_warm(node: Node, witness: str) -> tuple[bool, str]:
    result = node.cli("cache", "warm", "acme/tiny@prod", "--once", "--trust-root", str(node.root_file),
                      "--witness", witness, "--json")
    assert result.returncode in (0, 19), result.stderr
    return result.returncode == 0, result.stderr


def _serve_s3(node: Node, witness: str) -> tuple[bool, str]:
    """``serve-s3`` as a node runs it; a ListObjectsV2 of the release opens it (AccessDenied when refused)."""
    env = {**node.env(), "MODELREG_S3_ACCESS_KEY_ID": KEY, "MODELREG_S3_SECRET_ACCESS_KEY": SECRET}
    process = subprocess.Popen([MODELREG, "serve-s3", "--port", "0", "--json", "--trust-root", str(node.root_file),
                                "--witness", witness], env=env, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    try:
        line = process.stdout.readline()
        assert line, process.stderr.read()
        try:
            listed = s3_client(json.loads(line)["url"]).list_objects_v2(Bucket="acme", Prefix="tiny@prod/")
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "AccessDenied", exc.response
            return False, exc.response["Error"]["Message"]
        assert {o["Key"] for o in listed["Contents"]} == {f"tiny@prod/{f['path']}" for f in node.files}
        return True, ""
    finally:
        stop_process(process)


@pytest.mark.parametrize("program", [_fetch, _cache_warm, _serve_s3], ids=["fetch", "cache-warm", "serve-s3"])
def test_a_witness_the_node_requires_itself_must_have_cosigned_in_every_node_program(logged, program):
    """``--witness`` (the node's own witness, beside its root's) holds alike for every program that opens a
    release: one its witness did not cosign is refused, nothing of it kept; once cosigned it is accepted."""
    node, log = logged
    node.release(log=log.proof((node.approval, node.move), cosigners=(0,)))
    witness = log.witnesses[1].verifier().vkey
    accepted, why = program(node, witness)
    assert not accepted and "cosignatures" in why, why
    assert kept_checkpoints(node) == {}
    node.release(log=log.proof((node.approval, node.move), cosigners=(0, 1)))
    accepted, why = program(node, witness)
    assert accepted, why
    assert len(kept_checkpoints(node)) == 1


# --- after a checkpoint was accepted: the log the node saw must only grow -------------------------------


def _fork_at_the_same_size(node, log):
    forked = copy.deepcopy(log.events)
    forked[-1]["subject"] = "acme/other@666"
    log.events = forked
    node.release(serial=2, log=log.proof((node.approval, node.move)))


def _a_smaller_tree(node, log):
    node.release(serial=2, log=log.proof((node.approval, node.move), size=len(log.events) - 1))


def _a_rewritten_old_event(node, log):
    log.events[0] = {**log.events[0], "actor": "mallory"}
    log.append("version.submitted", "acme/other@3")
    node.release(serial=2, log=log.proof((node.approval, node.move)))


def _a_truncated_log(node, log):
    del log.events[-1]
    for n in range(3):
        log.append("version.submitted", f"acme/other@{n + 10}")
    node.release(serial=2, log=log.proof((node.approval, node.move)))


@pytest.mark.parametrize("forge", [_fork_at_the_same_size, _a_smaller_tree, _a_rewritten_old_event,
                                   _a_truncated_log])
def test_a_checkpoint_that_does_not_extend_the_accepted_one_is_refused(logged, forge):
    node, log = logged
    node.release(log=log.proof((node.approval, node.move)))
    accepted(node, "first")
    # Even with every cosignature the attacker could get: the node's own kept checkpoint refuses it.
    forge(node, log)
    refused(node, "second")
