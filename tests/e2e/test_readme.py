"""The README's "Use" section, its blocks run line by line in one bash exactly as written, on a local and an S3 store.

A README command that stops working fails here: it is the first thing a user runs. Only the registry
URL is replaced, by the test server's. Everything else runs as printed, from a working directory laid
out as the README assumes (a checkout): the server's data directory is ``./.modelreg`` and
``docs/example-model`` is the shipped example model. A line may state its exit status in its comment
(``# refused (exit 1)``); every other line must exit 0. The walk-through is the three journeys, each
person with their own token: an administrator sets up, Alice submits, Bob and Carol approve, Carol
promotes, a node fetches and verifies, version 2 goes out and back, and Dave asks the ten questions.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.server import free_port, start_server

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
BIN = Path(sys.executable).parent


LOG_CHECKS = "**The verifiable log's checks**"


def use_block() -> list[str]:
    """The command lines of every code block under ``## Use``, in order, then the verifiable log's checks
    under ``## Audit`` (run on the registry the walk-through left)."""
    text = README.read_text()
    section = text.split("\n## Use\n", 1)[1].split("\n## ", 1)[0]
    blocks = section.split("```")[1::2]
    assert len(blocks) >= 2, "the Use section lost its walk-through or its second block"
    audit = text.split("\n## Audit\n", 1)[1].split("\n## ", 1)[0]
    assert LOG_CHECKS in audit, "the Audit section lost the verifiable log's checks"
    blocks.append(audit.split(LOG_CHECKS, 1)[1].split("```")[1])
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def expected_exit(line: str) -> int:
    found = re.search(r"#.*\(exit (\d+)\)", line)
    return int(found.group(1)) if found else 0


def substitute(line: str, placeholders: dict[str, str]) -> str:
    for placeholder, value in placeholders.items():
        line = re.sub(rf"(?<![\w/.-]){re.escape(placeholder)}(?![\w-])", value, line)
    return line


def run_block(lines: list[str], workdir: Path, env: dict[str, str]) -> list[tuple[str, int, str, str]]:
    """Run ``lines`` in one bash (``export`` carries over); each line's status, stdout and stderr."""
    logs = workdir / ".readme-run"
    logs.mkdir()
    script = []
    for i, line in enumerate(lines):
        # Braces, not a subshell: an `export` on one line holds for the next ones.
        script.append(f"{{ {line}\n}} >{logs}/{i}.out 2>{logs}/{i}.err; echo $? >{logs}/{i}.rc")
    subprocess.run(["bash", "-c", "\n".join(script)], cwd=workdir, env=env, timeout=900, check=True)
    return [(line, int((logs / f"{i}.rc").read_text()), (logs / f"{i}.out").read_text(),
             (logs / f"{i}.err").read_text()) for i, line in enumerate(lines)]


@pytest.mark.parametrize("store", ["local", "s3"])
def test_readme_use_block_runs_as_written(store, tmp_path, request):
    workdir = tmp_path / "work"
    shutil.copytree(REPO / "docs" / "example-model", workdir / "docs" / "example-model")

    server_env: dict[str, str] = {}
    if store == "s3":
        s3 = request.getfixturevalue("s3_server")
        bucket = request.getfixturevalue("s3_bucket")
        server_env.update(MODELREG_BLOB_STORE_URL=f"s3://{bucket}/registry", MODELREG_S3_ENDPOINT_URL=s3.endpoint_url,
                          MODELREG_S3_ACCESS_KEY_ID=s3.access_key, MODELREG_S3_SECRET_ACCESS_KEY=s3.secret_key)
    server = start_server(workdir / ".modelreg", extra_env=server_env)
    try:
        leftovers = plant_leftovers(store, workdir, request)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MODELREG_")}
        # The user's shell has the server's settings (gc reads them) and the tools on its PATH.
        env.update(server_env, PATH=f"{BIN}{os.pathsep}{env['PATH']}", NO_COLOR="1", TERM="dumb")
        # The witness's port too: the local and s3 runs may be on at once.
        placeholders = {"http://127.0.0.1:8080": server.url, "8790": str(free_port())}
        lines = [substitute(line, placeholders) for line in use_block()]
        results = run_block(lines, workdir, env)
    finally:
        server.stop()

    failures = [f"`{line}` exited {rc}, want {expected_exit(line)}\n  stdout: {out[-600:]}\n  stderr: {err[-600:]}"
                for line, rc, out, err in results if rc != expected_exit(line)]
    assert not failures, "README commands that do not work as written:\n" + "\n".join(failures)

    def output(fragment: str) -> tuple[str, str]:
        """The output of the one command line containing ``fragment``."""
        (found,) = [(out, err) for line, _rc, out, err in results if fragment in line.split("#")[0]]
        return found

    example = workdir / "docs" / "example-model"
    # Alice's submission waits for approval; she may not approve; Bob and Carol's approvals make it approved.
    assert "needs an approval by security" in output("modelreg status acme/tiny 1")[0]
    assert "permission-denied" in output("$ALICE modelreg approve acme/tiny 1")[1]
    assert output("$CAROL modelreg approve acme/tiny 1 --capacity ml")[0].startswith("acme/tiny@1: approved")
    assert output("modelreg evals acme/tiny 1  ")[0].splitlines()[1].startswith("  sanity: completed, weights-sanity")
    # The node's copy: prod after the rollback is version 1, the example model byte for byte, signed.
    served = workdir / "serving" / "tiny"
    for path in example.iterdir():
        assert (served / path.name).read_bytes() == path.read_bytes(), path.name
    assert "Verification succeeded" in output("model_signing verify key serving/tiny")[0]
    assert (workdir / "registry.pub").read_bytes() == signing_key_pem(workdir / ".modelreg")
    v2 = json.loads((workdir / "v2.json").read_text())
    assert v2["version"] == 2 and v2["state"] == "awaiting_approval", v2
    assert "revoked" in output("modelreg fetch acme/tiny@2")[1]
    assert not (workdir / "serving" / "tiny-again").exists()
    generation_config = json.loads((workdir / "serving" / "tiny-next" / "generation_config.json").read_text())
    assert generation_config["max_new_tokens"] == 16
    # Dave's ten questions, answered about what happened above.
    origin = output("provenance origin acme/tiny@prod")[0]
    assert "submitted by alice" in origin and "None" not in origin, origin
    assert output("provenance files acme/tiny@prod")[0].startswith("acme/tiny@1 (alias prod): approved")
    assert "model-00001-of-00002.safetensors: safe" in output("provenance scans acme/tiny@prod")[0]
    assert "sanity" in output("provenance evals acme/tiny@prod")[0]
    assert "Apache-2.0 (allow-listed)" in output("provenance license acme/tiny@prod")[0]
    approvals = output("provenance approvals acme/tiny@prod")[0]
    assert "by bob as security" in approvals and "by carol as ml" in approvals
    assert "separation of duties: held" in approvals
    moves = output("provenance alias acme/tiny prod")[0]
    assert "rollback" in moves and "None" not in moves, moves
    assert "node-1" in output("provenance nodes acme/tiny@2")[0]
    assert "node-1" in output("provenance revoked-nodes --tenant acme")[0]
    assert "acme/tiny@1" in output("provenance blob sha256:")[0]
    assert json.loads((workdir / "bom.json").read_text())["bomFormat"] == "CycloneDX"
    saved = json.loads((workdir / "checkpoints.json").read_text())
    assert len(saved) >= 1 and {"event_id", "event_hash", "envelope"} <= saved[-1].keys(), saved

    # The second block.
    weights_only = json.loads(output("modelreg submit docs/example-model --model acme/weights-only")[0])
    assert weights_only["state"] == "awaiting_approval" and weights_only["source"]["kind"] == "upload"
    assert {f["path"] for f in weights_only["files"]} == {
        p.name for p in example.iterdir() if p.name.endswith((".json", ".safetensors"))}
    assert "source-not-allowed" in output("modelreg submit /srv")[1]
    assert output("modelreg version show acme/tiny 1")[0].startswith("acme/tiny@1: approved")
    assert json.loads(output("modelreg scan docs/example-model")[0])["verdict"] == "safe"
    assert json.loads((workdir / "slsa.json").read_text())["payloadType"] == "application/vnd.in-toto+json"
    assert "audit log intact" in output("modelreg audit verify --data-dir .modelreg  ")[0]
    assert output("modelreg audit checkpoint --data-dir .modelreg")[0].startswith("checkpoint of event ")
    assert f"{len(saved)} checkpoint(s) hold" in output("modelreg audit verify --data-dir .modelreg --checkpoints")[0]
    witness_key = output("modelreg witness --key w.key --init")[0].strip()
    assert witness_key.startswith("witness.example/w1+")
    assert output("modelreg witness --key w.key --log")[0].startswith(f"witness {witness_key} on http://")
    assert output("/healthz")[0] == "ok\n"
    check_leftovers(store, leftovers, output("modelreg gc")[0], request)


def signing_key_pem(data_dir: Path) -> bytes:
    from registry.signing.keys import SigningKey

    return SigningKey.from_file(data_dir / "keys" / "signing-key.pem").public_key.public_pem()


def plant_leftovers(store: str, workdir: Path, request) -> dict[str, object]:
    """What crashed writers leave: one over a day old (gc removes it), one fresh (gc leaves it)."""
    if store == "local":
        tmp = workdir / ".modelreg" / "blobs" / "tmp"
        old, fresh = tmp / "put-crashed-long-ago", tmp / "put-crashed-just-now"
        old.write_bytes(b"half a file")
        fresh.write_bytes(b"half a file")
        two_days_ago = time.time() - 2 * 86400
        os.utime(old, (two_days_ago, two_days_ago))
        return {"old": old, "fresh": fresh}
    client = request.getfixturevalue("s3_server").client()
    bucket = request.getfixturevalue("s3_bucket")
    upload = client.create_multipart_upload(Bucket=bucket, Key="registry/tmp/crashed-just-now")
    return {"upload": upload["UploadId"]}


def check_leftovers(store: str, leftovers: dict[str, object], gc_output: str, request) -> None:
    if store == "local":
        assert not leftovers["old"].exists() and leftovers["fresh"].exists()
        assert gc_output.splitlines()[0] == "swept 1 incomplete upload(s)"
        assert gc_output.splitlines()[1].startswith("deleted 0 unreferenced blob(s)")
        return
    # SeaweedFS cannot be made to hold an upload started a day ago: the README's gc ran against the
    # bucket (it lists it, a bad setting would fail it) and left the fresh upload alone.
    client = request.getfixturevalue("s3_server").client()
    bucket = request.getfixturevalue("s3_bucket")
    uploads = client.list_multipart_uploads(Bucket=bucket, Prefix="registry/tmp/").get("Uploads", [])
    assert [u["UploadId"] for u in uploads] == [leftovers["upload"]]
    assert gc_output.splitlines()[0] == "swept 0 incomplete upload(s)"
