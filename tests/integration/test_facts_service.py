"""Recording a version's facts through the service, from a real blob store, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from registry.auth import load_principal
from registry.db.models import Principal, RoleBinding, Tenant, Version, VersionFacts
from registry.db.session import begin_write
from registry.domain.errors import InvalidStateError, PermissionDeniedError
from registry.facts import READER_VERSION
from registry.services import facts as facts_service
from registry.services import versions
from registry.services.versions import SubmitRequest
from registry.storage.s3 import S3BlobStore
from tests.support.registry import drain, make_admin
from tests.support.tiny_model import tiny_gguf, tiny_model_files


def _sealed_version(container, tmp_path, files, name="m", state="awaiting_approval") -> tuple[object, int]:
    admin = make_admin(container)
    root = tmp_path / name
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    with container.session_factory() as session:
        version, _ = versions.submit(session, admin, "acme", name, SubmitRequest(source=str(root)),
                                     open_source=container.open_source, limits=container.limits(),
                                     ports=container.ports)
        vid = version.id
    drain(container)
    with container.session_factory() as session:
        version = session.get(Version, vid)
        assert version.state == state, version.failure_detail
        assert version.sealed_at is not None
    return admin, vid


def _record(container, vid, blob_store=None):
    with container.session_factory() as session:
        begin_write(session)
        row = facts_service.record_facts(session, session.get(Version, vid), blob_store or container.blob_store,
                                         clock=container.clock)
        session.commit()
        return row.facts


def test_record_and_read_facts(container, tmp_path):
    files = tiny_model_files(3)
    files["tiny-Q8_0.gguf"] = tiny_gguf()
    admin, vid = _sealed_version(container, tmp_path, files)
    with container.session_factory() as session:
        # Sealing recorded them; recording again replaces them.
        sealed = facts_service.read_facts(session, admin, "acme", "m", 1)
    assert sealed is not None and sealed["weights"]["formats"]["value"] == ["gguf", "safetensors"]
    recorded = _record(container, vid)
    assert recorded["reader_version"] == READER_VERSION
    _record(container, vid)  # idempotent: the row is replaced, not duplicated
    with container.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(VersionFacts)) == 1
        found = facts_service.read_facts(session, admin, "acme", "m", 1)
    assert found["weights"]["formats"]["value"] == ["gguf", "safetensors"]
    assert [s["tensor_elements"] for s in found["weights"]["sets"]] == [6224, 10304]
    assert found["architecture"]["num_hidden_layers"] == {"value": 2, "source": "config.json num_hidden_layers"}
    assert found["quantization"]["gguf_file_type"]["value"] == {"tiny-Q8_0.gguf": "MOSTLY_Q8_0"}
    assert found["reader_version"] == READER_VERSION and found["recorded_at"]
    # Two weight sets: the weight bytes are the caller's pick, the KV cache per token is not.
    estimate = facts_service.capacity(found, context=64, sequences=2)
    assert estimate.kv_bytes_per_token == {"fp16": 2 * 2 * 2 * 8 * 2, "fp8": 2 * 2 * 2 * 8}
    assert estimate.kv_cache_bytes == {"fp16": 128 * 64 * 2, "fp8": 64 * 64 * 2}
    assert estimate.total_bytes is None and "tensor_bytes" in estimate.unknown


def test_hostile_values_are_stored_as_unknowns(container, tmp_path):
    files = tiny_model_files(6)
    files["tokenizer_config.json"] = b'{"eos_token": "\\ud800", "chat_template": 7}'
    files["config.json"] = b'{"num_hidden_layers": 1e400, "rope_scaling": {"factor": 1e400}}'
    # The scanner fails this version (its findings are its business); the facts are read at sealing, before.
    _, vid = _sealed_version(container, tmp_path, files, state="failed")
    recorded = _record(container, vid)
    with container.session_factory() as session:
        assert session.get(VersionFacts, vid).facts == recorded
    assert "lone surrogate" in recorded["tokenizer"]["eos_token"]["unknown"]
    assert "not finite" in recorded["architecture"]["rope_scaling"]["unknown"]
    assert recorded["architecture"]["num_hidden_layers"]["unknown"] == (
        "config.json num_hidden_layers is inf (float), not a positive integer")


def test_reading_facts_needs_read_permission_in_the_tenant(container, tmp_path):
    _, vid = _sealed_version(container, tmp_path, tiny_model_files(4))
    _record(container, vid)
    with container.session_factory() as session:
        other = Tenant(name="other")
        outsider = Principal(name="outsider")
        session.add_all([other, outsider])
        session.flush()
        session.add(RoleBinding(principal_id=outsider.id, tenant_id=other.id, role="submitter", capacity=""))
        session.commit()
        principal = load_principal(outsider)
    with container.session_factory() as session:
        with pytest.raises(PermissionDeniedError):
            facts_service.read_facts(session, principal, "acme", "m", 1)


def test_facts_of_a_version_with_unstored_files_are_refused(container, tmp_path):
    admin = make_admin(container)
    root = tmp_path / "pending"
    root.mkdir()
    (root / "config.json").write_text("{}")
    with container.session_factory() as session:
        version, _ = versions.submit(session, admin, "acme", "p", SubmitRequest(source=str(root)),
                                     open_source=container.open_source, limits=container.limits(),
                                     ports=container.ports)
        with pytest.raises(InvalidStateError):
            facts_service.record_facts(session, version, container.blob_store, clock=container.clock)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_record_facts_through_s3_ranged_reads(container, tmp_path, s3_server, s3_bucket):
    _, vid = _sealed_version(container, tmp_path, tiny_model_files(5))
    s3 = S3BlobStore(s3_server.client(), s3_bucket, "facts")
    with container.session_factory() as session:
        for f in session.get(Version, vid).files:
            s3.put(container.blob_store.open_range(f.sha256), expected_sha256=f.sha256)
    recorded = _record(container, vid, s3)
    assert recorded["weights"]["parameters"]["value"] == 6224
    assert recorded["tokenizer"]["chat_template_sha256"]["value"]
