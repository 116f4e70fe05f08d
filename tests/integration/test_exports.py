"""Exports of a version, on SQLite and PostgreSQL: the CycloneDX 1.6 ML-BOM and the signed SLSA provenance.

The version is the tiny transformers Llama with a model card README, built through the real services:
submitted from a directory, mirrored, sealed, scanned, evaluated by the shipped ``sanity`` suite and
approved by a security and an ML approver. The BOM is checked with ``cyclonedx-python-lib``'s own validator,
and the SLSA envelope with the public key the registry publishes (``GET /v1/keys``), by ``cryptography``.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import uuid

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from registry.auth import load_principal
from registry.clock import ManualClock
from registry.db.models import Principal
from registry.domain.errors import InvalidInputError, InvalidStateError, PermissionDeniedError
from registry.domain.serving_profile import parse_serving_profile
from registry.services import approvals, evals, exports, units, versions
from registry.services.versions import SubmitRequest
from registry.signing.dsse import pae
from tests.support.registry import make_admin, role_token
from tests.support.releases import awaiting_version
from tests.support.tiny_llm import tiny_llm_files

TENANT, NAME = "acme", "tiny"
README = b"""---
license: mit
pipeline_tag: text-generation
datasets:
  - acme/refusals
  - acme/facts
language: [en, fr]
base_model: acme/base
---
# Tiny

## Direct Use

Smoke tests of serving stacks.

## Bias, Risks, and Limitations

Two layers: it knows nothing.

## Ethical Considerations

Never use it to decide about people.
"""

# Registry-held parts of the unit, beside the tiny Llama's chat template, generation config, tokenizer and weights.
UNIT_PARTS = {
    "prompts/support.jinja": b"You are acme's support assistant. {{ question }}\n",
    "serving-profile.json": parse_serving_profile({
        "engine": "vllm", "gpu": {"type": "L4", "count": 1},
        "settings": {"max_model_len": 512, "max_num_seqs": 4}}).canonical_json().encode(),
}


def principal(container, name: str):
    with container.session_factory() as session:
        return load_principal(session.scalar(select(Principal).where(Principal.name == name)))


@pytest.fixture
def built(container, tmp_path):
    """acme/tiny@1: sealed, scanned, evaluated and approved through the services; its files by path."""
    admin = make_admin(container)
    files = {**tiny_llm_files(), "README.md": README, **UNIT_PARTS}
    number = awaiting_version(container, admin, tmp_path / "m", TENANT, NAME, files=files)
    for name, capacity in (("sec", "security"), ("mia", "ml")):
        role_token(container, name, TENANT, "approver", capacity)
        with container.session_factory() as session:
            status = approvals.decide(session, principal(container, name), TENANT, NAME, number,
                                      approvals.ApprovalRequest("approve", capacity, "", []),
                                      ports=container.ports)
    assert status.state == "approved", status.unmet
    role_token(container, "aud", TENANT, "auditor")
    return number, files


def export(container, who, fmt: str, number: int = 1, tenant: str = TENANT, name: str = NAME) -> exports.Export:
    with container.session_factory() as session:
        return exports.export(session, who, tenant, name, number, fmt, keyring=container.keyring,
                              blob_store=container.blob_store, clock=container.clock,
                              root_expiry=dt.timedelta(days=365))


def test_the_cyclonedx_bom_validates_and_carries_hashes_license_and_the_model_card(container, built):
    number, files = built
    done = export(container, principal(container, "aud"), "cyclonedx", number)
    assert done.media_type == "application/vnd.cyclonedx+json; version=1.6"
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(done.content.decode()) is None
    doc = done.document()
    assert (doc["bomFormat"], doc["specVersion"]) == ("CycloneDX", "1.6")
    [model] = doc["components"]
    assert (model["type"], model["group"], model["name"], model["version"]) == (
        "machine-learning-model", TENANT, NAME, str(number))
    hashes = {c["name"]: c["hashes"] for c in model["components"] if c["type"] == "file"}
    assert hashes == {path: [{"alg": "SHA-256", "content": hashlib.sha256(data).hexdigest()}]
                      for path, data in files.items()}
    assert model["licenses"] == [{"license": {"id": "MIT", "acknowledgement": "concluded"}}]
    props = {(p["name"], p["value"]) for p in model["properties"]}
    assert ("modelreg:state", "approved") in props and ("modelreg:license:readme", "MIT") in props
    assert {v for k, v in props if k == "modelreg:approval"} and ("modelreg:eval:sanity", "completed") in props
    card = model["modelCard"]
    assert card["modelParameters"]["task"] == "text-generation"
    assert card["modelParameters"]["datasets"] == [{"type": "dataset", "name": "acme/refusals"},
                                                   {"type": "dataset", "name": "acme/facts"}]
    assert card["modelParameters"]["architectureFamily"] == "llama"
    assert card["modelParameters"]["inputs"] == [{"format": "text"}]
    with container.session_factory() as session:
        _, [sanity] = evals.version_evals(session, principal(container, "aud"), TENANT, NAME, number)
    suite_slice = f"suite=sanity runner={sanity['runner']}@{sanity['runner_version']}"
    metrics = {m["type"]: float(m["value"]) for m in card["quantitativeAnalysis"]["performanceMetrics"]
               if m["slice"] == suite_slice}
    assert metrics == sanity["metrics"] and metrics["sanity.failed_checks"] == 0
    assert card["considerations"]["useCases"] == ["Smoke tests of serving stacks."]
    assert card["considerations"]["technicalLimitations"] == ["Two layers: it knows nothing."]
    assert card["considerations"]["ethicalConsiderations"] == [{"name": "Never use it to decide about people."}]


def test_the_bom_lists_each_unit_component_with_the_digest_the_version_shows_and_its_members(container, built):
    number, files = built
    done = export(container, principal(container, "aud"), "cyclonedx", number)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(done.content.decode()) is None
    [model] = done.document()["components"]
    listed = {c["bom-ref"]: c for c in model["components"] if c["type"] == "data"}
    with TestClient(create_app(container)) as client:
        shown = client.get(f"/v1/models/{TENANT}/{NAME}/versions/{number}",
                           headers={"Authorization": f"Bearer {role_token(container, 'ann', TENANT, 'submitter')}"})
    assert shown.status_code == 200, shown.text
    shown_digests = {c["name"]: c["digest"] for c in shown.json()["components"]}
    with container.session_factory() as session:
        version = versions.read_version(session, principal(container, "aud"), TENANT, NAME, number)
        unit = units.components_of(session, version)
    assert shown_digests == {c.name: c.digest for c in unit}
    assert {"chat_templates", "config", "generation_config", "prompt_templates", "serving_profile", "tokenizer",
            "weights"} <= shown_digests.keys()
    assert set(listed) == {f"component:{name}" for name in shown_digests}
    for component in unit:
        entry = listed[f"component:{component.name}"]
        assert (entry["name"], entry["hashes"]) == (component.name, [{"alg": "SHA-256", "content": component.digest}])
        members = [p["value"] for p in entry["properties"] if p["name"] == "modelreg:member"]
        assert sorted(members) == sorted(f"{m.sha256}  {m.name}" for m in component.members)
        # An auditor recomputes the digest from the listed members alone (the lines sorted by member).
        lines = sorted(members, key=lambda line: line.split("  ", 1)[1])
        assert hashlib.sha256("".join(f"{line}\n" for line in lines).encode()).hexdigest() == component.digest
    prompt_members = [p["value"] for p in listed["component:prompt_templates"]["properties"]]
    assert prompt_members == [f"{hashlib.sha256(files['prompts/support.jinja']).hexdigest()}  prompts/support.jinja"]
    profile = [p["value"] for p in listed["component:serving_profile"]["properties"]]
    assert profile == [f"{hashlib.sha256(files['serving-profile.json']).hexdigest()}  serving-profile.json"]


def test_the_file_components_written_directly_are_byte_for_byte_what_the_library_writes(container, built):
    # The library builds every file component as an object (the reference); the default writes their JSON.
    serial = uuid.UUID(int=7)
    clock = ManualClock(dt.datetime(2026, 12, 1, 12, tzinfo=dt.timezone.utc))
    with container.session_factory() as session:
        version = versions.read_version(session, principal(container, "aud"), TENANT, NAME, built[0])
        fast, again, slow = (exports.cyclonedx_bom(session, version, blob_store=container.blob_store, clock=clock,
                                                   serial_number=serial, reference=reference)
                             for reference in (False, False, True))
    assert fast == again == slow
    [model] = json.loads(fast)["components"]
    assert {p["name"] for c in model["components"] if c["type"] == "file" for p in c["properties"]} >= {
        "modelreg:size", "modelreg:scan:verdict", "modelreg:scan"}


def test_a_planted_invalid_model_card_field_is_caught_by_the_validator(container, built):
    doc = export(container, principal(container, "aud"), "cyclonedx", built[0]).document()
    doc["components"][0]["modelCard"]["modelParameters"]["approach"] = {"type": "guesswork"}
    with pytest.raises(exports.BomSchemaError) as caught:
        exports.validate_bom(json.dumps(doc))
    assert "approach" in caught.value.path
    doc["components"][0]["modelCard"]["modelParameters"].pop("approach")
    doc["components"][0]["modelCard"]["unknownField"] = 1
    with pytest.raises(exports.BomSchemaError):
        exports.validate_bom(json.dumps(doc))


def test_the_api_serves_each_format_and_a_document_that_would_fail_the_schema_is_a_500(container, built,
                                                                                     monkeypatch):
    token = role_token(container, "aud2", TENANT, "auditor")
    path = f"/v1/provenance/{TENANT}/{NAME}/versions/{built[0]}/export"
    with TestClient(create_app(container), raise_server_exceptions=False) as client:
        def get(fmt: str):
            return client.get(path, params={"format": fmt}, headers={"Authorization": f"Bearer {token}"})

        bom, slsa, unknown = get("cyclonedx"), get("slsa"), get("spdx")
        monkeypatch.setattr(exports, "model_card", lambda *a: {"modelParameters": {"approach": {"type": "guess"}}})
        broken = get("cyclonedx")
    assert bom.status_code == 200 and bom.headers["content-type"] == "application/vnd.cyclonedx+json; version=1.6"
    assert exports.validate_bom(bom.content) is None
    assert bom.headers["content-disposition"] == f'attachment; filename="{TENANT}-{NAME}-{built[0]}.cdx.json"'
    assert slsa.status_code == 200 and slsa.headers["content-type"] == "application/vnd.dsse.envelope.v1+json"
    assert unknown.status_code == 422 and unknown.json()["type"].endswith("/invalid-input")
    assert broken.status_code == 500 and broken.headers["content-type"] == "application/problem+json"
    assert "modelCard" not in broken.text and "guess" not in broken.text


def test_the_slsa_statement_names_every_file_and_verifies_with_the_published_key(container, built):
    number, files = built
    done = export(container, principal(container, "aud"), "slsa", number)
    assert done.media_type == "application/vnd.dsse.envelope.v1+json"
    envelope = done.document()
    with TestClient(create_app(container)) as client:
        [published] = client.get("/v1/keys").json()["keys"]
    public_key = serialization.load_pem_public_key(published["public_key_pem"].encode())
    payload = base64.b64decode(envelope["payload"])

    def verify(env: dict, body: bytes) -> None:
        public_key.verify(base64.b64decode(env["signatures"][0]["sig"]), pae(env["payloadType"], body),
                          ec.ECDSA(hashes.SHA256()))

    verify(envelope, payload)
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert envelope["signatures"][0]["keyid"] == published["key_id"]
    statement = json.loads(payload)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert {s["name"]: s["digest"]["sha256"] for s in statement["subject"]} == {
        path: hashlib.sha256(data).hexdigest() for path, data in files.items()}
    build = statement["predicate"]["buildDefinition"]
    assert build["buildType"] == exports.BUILD_TYPE
    assert build["externalParameters"]["source"]["kind"] == "local"
    assert build["externalParameters"]["submittedBy"] == "admin-acme"
    [upstream] = build["resolvedDependencies"]
    assert upstream["digest"] and upstream["uri"].startswith("file://")
    assert build["internalParameters"]["policy"]["bundle_digest"]
    assert {a["capacity"] for a in build["internalParameters"]["approvals"]} == {"security", "ml"}
    run = statement["predicate"]["runDetails"]
    assert run["metadata"]["invocationId"] == f"{TENANT}/{NAME}@{number}"
    assert run["metadata"]["startedOn"] <= run["metadata"]["finishedOn"]

    # One flipped byte of the payload, or of the signature, and it no longer verifies.
    flipped = bytearray(payload)
    flipped[len(flipped) // 2] ^= 0x01
    with pytest.raises(InvalidSignature):
        verify(envelope, bytes(flipped))
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[-1] ^= 0x01
    with pytest.raises(InvalidSignature):
        verify({**envelope, "signatures": [{"sig": base64.b64encode(bytes(sig)).decode()}]}, payload)


def test_only_auditors_and_administrators_export_and_only_sealed_versions(container, built, tmp_path):
    role_token(container, "reader", TENANT, "submitter")
    role_token(container, "outsider", "other", "auditor")
    for who in ("reader", "outsider"):
        with pytest.raises(PermissionDeniedError):
            export(container, principal(container, who), "slsa", built[0])
    assert export(container, principal(container, "admin-acme"), "slsa", built[0]).content
    with pytest.raises(InvalidInputError):
        export(container, principal(container, "aud"), "spdx", built[0])
    # A version still mirroring (its jobs not run) has no signed manifest: nothing to export yet.
    (tmp_path / "m2").mkdir()
    (tmp_path / "m2" / "config.json").write_bytes(b'{"model_type": "unsealed"}')
    with container.session_factory() as session:
        version, _ = versions.submit(session, principal(container, "admin-acme"), TENANT, "unsealed",
                                     SubmitRequest(source=str(tmp_path / "m2")), open_source=container.open_source,
                                     limits=container.limits(), ports=container.ports)
        number = version.number
    with pytest.raises(InvalidStateError):
        export(container, principal(container, "aud"), "cyclonedx", number, name="unsealed")


HOSTILE_README = ("---\n"
                  "pipeline_tag: [not, a, string]\n"
                  "datasets: [1, {a: b}, \"evil\\u202e\\x1b[31m\", \"\\ud800\"]\n"
                  "language: \"\\ud800\"\n"
                  "base_model: " + "x" * 10_000 + "\n"
                  "---\n"
                  "## Limitations\n" + "\x1b]0;title\x07" + "y" * 100_000 + "\n").encode()


def test_a_hostile_readme_still_gives_a_valid_bom_with_its_text_bounded_and_escaped(container, tmp_path):
    admin = make_admin(container)
    number = awaiting_version(container, admin, tmp_path / "h", TENANT, "hostile",
                              files={"config.json": b'{"model_type": "plain"}', "README.md": HOSTILE_README})
    role_token(container, "aud", TENANT, "auditor")
    done = export(container, principal(container, "aud"), "cyclonedx", number, name="hostile")
    exports.validate_bom(done.content)
    done.content.decode("ascii")  # every non-ASCII character escaped: no lone surrogate reaches the wire
    [model] = done.document()["components"]
    card = model["modelCard"]
    assert "task" not in card.get("modelParameters", {})
    assert [d["name"] for d in card["modelParameters"]["datasets"]] == ["evil\\u202e\\x1b[31m", "\\ud800"]
    [limitations] = card["considerations"]["technicalLimitations"]
    assert len(limitations) <= 2 * exports.MAX_TEXT and "\x1b" not in limitations and "\x07" not in limitations
    base = [p["value"] for p in model["properties"] if p["name"] == "modelreg:card:base_model"]
    assert base == ["x" * 256]
