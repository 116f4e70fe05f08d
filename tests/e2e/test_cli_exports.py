"""`modelreg provenance export` against `modelreg serve`: an auditor exports the CycloneDX ML-BOM and the signed
SLSA provenance of a version mirrored from a Hugging Face hub, scanned, evaluated and approved, and checks them
with `cyclonedx-python-lib`'s validator and the key `modelreg keys export` writes."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from registry.signing.dsse import pae
from tests.support.hf_upstream import HfUpstream
from tests.support.server import start_server
from tests.support.tiny_llm import tiny_llm_files

README = b"---\nlicense: mit\npipeline_tag: text-generation\ndatasets: [org/corpus]\n---\n# Tiny\n"
FILES = {**tiny_llm_files(), "README.md": README}


@pytest.fixture(scope="module")
def hub():
    with HfUpstream() as upstream:
        upstream.add_repo("org/tiny", card_data={"license": "mit"})
        upstream.revision = upstream.commit("org/tiny", FILES)
        yield upstream


@pytest.fixture(scope="module")
def server(tmp_path_factory, hub):
    s = start_server(tmp_path_factory.mktemp("exports") / "data",
                     extra_env={"MODELREG_HF_ALLOWED_ENDPOINTS": json.dumps([hub.url])})
    s.cli("tenant", "create", "team", check=True)
    s.tokens = {}
    for name, role, capacity in (("sam", "submitter", ""), ("sec", "approver", "security"),
                                 ("mia", "approver", "ml"), ("aud", "auditor", "")):
        s.cli("principal", "create", name, check=True)
        grant = ["principal", "grant", name, "--tenant", "team", "--role", role]
        s.cli(*grant, *(["--capacity", capacity] if capacity else []), check=True)
        s.tokens[name] = s.cli("principal", "token", name, check=True).stdout.strip()
    submitted = s.cli("submit", "hf://org/tiny", "--model", "team/tiny", "--hf-endpoint", hub.url, "--wait",
                      "--json", token=s.tokens["sam"], timeout=300)
    assert submitted.returncode == 0, submitted.stderr
    s.version = json.loads(submitted.stdout)["version"]
    for name, capacity in (("sec", "security"), ("mia", "ml")):
        s.cli("approve", "team/tiny", str(s.version), "--capacity", capacity, token=s.tokens[name], check=True)
    yield s
    s.stop()


def stored(server) -> dict[str, str]:
    """The version's files as the registry lists them (the hub adds a .gitattributes), checked against FILES."""
    scanned = json.loads(server.cli("version", "scans", "team/tiny", str(server.version), "--json",
                                    token=server.tokens["aud"], check=True).stdout)
    files = {f["path"]: f["sha256"] for f in scanned["files"]}
    assert {path: hashlib.sha256(body).hexdigest() for path, body in FILES.items()}.items() <= files.items()
    return files


def test_an_auditor_exports_a_valid_cyclonedx_ml_bom(server, hub, tmp_path):
    out = tmp_path / "tiny.cdx.json"
    done = server.cli("provenance", "export", "team/tiny", str(server.version), "--format", "cyclonedx",
                      "-o", str(out), "--json", token=server.tokens["aud"], check=True)
    data = out.read_bytes()
    assert json.loads(done.stdout) == {"format": "cyclonedx", "model": "team/tiny", "version": server.version,
                                       "path": str(out), "bytes": len(data),
                                       "sha256": hashlib.sha256(data).hexdigest()}
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(data.decode()) is None
    [model] = json.loads(data)["components"]
    assert model["purl"] == f"pkg:huggingface/org/tiny@{hub.revision}?repository_url={hub.url.rstrip('/')}"
    assert {c["name"]: c["hashes"][0]["content"] for c in model["components"] if c["type"] == "file"} == stored(server)
    assert model["modelCard"]["modelParameters"]["datasets"] == [{"type": "dataset", "name": "org/corpus"}]
    assert any(m["type"] == "sanity.failed_checks" for m in model["modelCard"]["quantitativeAnalysis"]
               ["performanceMetrics"])
    printed = server.cli("provenance", "export", "team/tiny", str(server.version), "--format", "cyclonedx",
                         token=server.tokens["aud"], check=True)
    assert json.loads(printed.stdout)["components"][0]["modelCard"] == model["modelCard"]


def test_the_slsa_export_verifies_with_the_exported_public_key(server, hub, tmp_path):
    out, pem = tmp_path / "tiny.intoto.jsonl", tmp_path / "registry.pub"
    written = server.cli("provenance", "export", "team/tiny", str(server.version), "--format", "slsa", "-o",
                         str(out), token=server.tokens["aud"], check=True)
    assert written.stdout.startswith(f"wrote the slsa export of team/tiny@{server.version} to {out}")
    server.cli("keys", "export", "-o", str(pem), token=server.tokens["aud"], check=True)
    envelope = json.loads(out.read_bytes())
    payload, sig = base64.b64decode(envelope["payload"]), base64.b64decode(envelope["signatures"][0]["sig"])
    key = serialization.load_pem_public_key(pem.read_bytes())
    key.verify(sig, pae(envelope["payloadType"], payload), ec.ECDSA(hashes.SHA256()))
    tampered = payload.replace(hub.revision.encode(), hub.revision[::-1].encode())
    with pytest.raises(InvalidSignature):
        key.verify(sig, pae(envelope["payloadType"], tampered), ec.ECDSA(hashes.SHA256()))
    statement = json.loads(payload)
    assert {s["name"]: s["digest"]["sha256"] for s in statement["subject"]} == stored(server)
    [upstream] = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert upstream == {"uri": f"git+{hub.url.rstrip('/')}/org/tiny", "name": "org/tiny",
                        "digest": {"gitCommit": hub.revision}}


def test_others_get_one_readable_line(server):
    args = ("provenance", "export", "team/tiny", str(server.version), "--format")
    denied = server.cli(*args, "slsa", token=server.tokens["sam"])
    assert denied.returncode == 1 and len(denied.stderr.strip().splitlines()) == 1
    assert "may not audit in tenant 'team'" in denied.stderr
    unknown = server.cli(*args, "spdx", token=server.tokens["aud"])
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    missing = server.cli("provenance", "export", "team/tiny", "99", "--format", "slsa", token=server.tokens["aud"])
    assert missing.returncode == 1 and "version-not-found" in missing.stderr
