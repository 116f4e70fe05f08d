"""The README's "Use" block, run line by line in one bash exactly as written, on a local and an S3 store.

A README command that stops working fails here: it is the first thing a user runs. Only these
placeholders are replaced (``PLACEHOLDERS``): the registry URL by the test server's, and ``DIR`` by
a directory holding the model's files (the user's copy). Everything else runs as printed, from a
working directory laid out as the README assumes: the server's data directory is ``./.modelreg``,
``./my-model-dir`` and ``./some-dir`` exist, and the server's ``MODELREG_HF_ENDPOINT`` is a local
hub holding ``org/model``. A line may state its exit status in its comment (``# refused (exit 1)``);
every other line must exit 0.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.hf_upstream import GITATTRIBUTES, HfUpstream
from tests.support.server import start_server
from tests.support.tiny_model import tiny_model_files

README = Path(__file__).resolve().parents[2] / "README.md"
BIN = Path(sys.executable).parent


def use_block() -> list[str]:
    """The command lines of the code block under ``## Use``."""
    section = README.read_text().split("## Use", 1)[1]
    block = section.split("```", 2)[1]
    return [line for line in block.splitlines() if line.strip()]


def expected_exit(line: str) -> int:
    found = re.search(r"#.*\(exit (\d+)\)", line)
    return int(found.group(1)) if found else 0


def substitute(line: str, placeholders: dict[str, str]) -> str:
    for placeholder, value in placeholders.items():
        line = re.sub(rf"(?<![\w/.-]){re.escape(placeholder)}(?![\w-])", value, line)
    return line


@pytest.fixture(scope="module")
def hub():
    with HfUpstream() as upstream:
        upstream.add_repo("org/model", card_data={"license": "mit"})
        upstream.commit("org/model", tiny_model_files(3))
        yield upstream


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
def test_readme_use_block_runs_as_written(store, hub, tmp_path, request):
    workdir = tmp_path / "work"
    workdir.mkdir()
    model = tiny_model_files(3)
    # The user's copy of org/model, as a Hub download leaves it.
    copy = tmp_path / "copy"
    for path, data in {**model, ".gitattributes": GITATTRIBUTES}.items():
        (copy / path).parent.mkdir(parents=True, exist_ok=True)
        (copy / path).write_bytes(data)
    for name in ("my-model-dir", "some-dir"):
        for path, data in tiny_model_files(5).items():
            (workdir / name / path).parent.mkdir(parents=True, exist_ok=True)
            (workdir / name / path).write_bytes(data)
    (workdir / "my-model-dir" / "notes.txt").write_text("left out by --include")

    server_env = {"MODELREG_HF_ENDPOINT": hub.url}
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
        placeholders = {"http://127.0.0.1:8080": server.url, "DIR": str(copy)}
        lines = [substitute(line, placeholders) for line in use_block()]
        results = run_block(lines, workdir, env)
    finally:
        server.stop()

    failures = [f"`{line}` exited {rc}, want {expected_exit(line)}\n  stdout: {out[-600:]}\n  stderr: {err[-600:]}"
                for line, rc, out, err in results if rc != expected_exit(line)]
    assert not failures, "README commands that do not work as written:\n" + "\n".join(failures)

    by_command = {line.split("#")[0].strip(): (out, err) for line, _rc, out, err in results}

    def output(prefix: str) -> tuple[str, str]:
        """The output of the one command that is ``prefix`` exactly, else that starts with it."""
        if prefix in by_command:
            return by_command[prefix]
        (found,) = [v for k, v in by_command.items() if k.startswith(prefix)]
        return found

    uploaded = json.loads(output("modelreg submit ./my-model-dir")[0])
    assert uploaded["state"] == "awaiting_approval" and uploaded["source"]["kind"] == "upload"
    assert {f["path"] for f in uploaded["files"]} == {p for p in tiny_model_files(5) if p.endswith((".json", ".safetensors"))}
    assert "source-not-allowed" in output("modelreg submit /srv")[1]
    assert output("modelreg version show acme/model 1")[0].startswith("acme/model@1: awaiting_approval")
    evals = output("modelreg evals acme/model 1")[0].splitlines()
    assert evals[0] == "acme/model@1: awaiting_approval" and evals[1].startswith("  sanity: completed, weights-sanity")
    assert "Verification succeeded" in output("model_signing verify key")[0]
    signature = json.loads((copy / "model.sig").read_text())
    assert {"mediaType", "verificationMaterial", "dsseEnvelope"} <= signature.keys()
    assert (workdir / "registry.pub").read_bytes() == signing_key_pem(workdir / ".modelreg")
    assert json.loads(output("modelreg scan ./some-dir")[0])["verdict"] == "safe"
    assert "audit log intact" in output("modelreg audit verify --data-dir .modelreg")[0]
    assert output("modelreg audit checkpoint --data-dir .modelreg")[0].startswith("checkpoint of event ")
    saved = json.loads((workdir / "checkpoints.json").read_text())
    assert len(saved) >= 1 and {"event_id", "event_hash", "envelope"} <= saved[-1].keys(), saved
    assert f"{len(saved)} checkpoint(s) hold" in output("modelreg audit verify --data-dir .modelreg --checkpoints")[0]
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
