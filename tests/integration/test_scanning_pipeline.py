"""Scanning inside the version pipeline: every file of a sealed version is scanned, results are
cached by blob, an unsafe file fails the version, and a rescan flags versions it turns unsafe."""

from __future__ import annotations

from sqlalchemy import func, select

from registry import audit
from registry.db.models import AuditEvent, Job, ScanResult, Version
from registry.scanning import SCANNER_VERSION
from registry.services import scans, versions
from registry.services.stages import scanning as scanning_stage
from registry.services.versions import SubmitRequest
from tests.support import scan_samples
from tests.support.registry import drain
from tests.support.tiny_model import tiny_model_files


def _dir(tmp_path, name, files):
    root = tmp_path / name
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return root


def _submit(container, admin, root, name):
    with container.session_factory() as session:
        version, _ = versions.submit(session, admin, "acme", name, SubmitRequest(source=str(root)),
                                     open_source=container.open_source, limits=container.limits(),
                                     ports=container.ports)
        return version.id


def _version(container, version_id):
    with container.session_factory() as session:
        v = session.get(Version, version_id)
        _ = v.files
        return v


def test_ordinary_model_is_scanned_safe_and_awaits_approval(container, admin, tmp_path):
    vid = _submit(container, admin, _dir(tmp_path, "m", tiny_model_files(1)), "m")
    drain(container)
    v = _version(container, vid)
    assert v.state == "awaiting_approval", v.failure_detail
    with container.session_factory() as session:
        rows = session.scalars(select(ScanResult).where(ScanResult.scanner == "modelreg")).all()
        assert {r.path for r in rows} == {f.path for f in v.files}
        assert {r.verdict for r in rows} == {"safe"}
        assert {r.format for r in rows if r.path.endswith(".safetensors")} == {"safetensors"}
        events = [e.action for e in session.scalars(select(AuditEvent).order_by(AuditEvent.id))]
        assert events[-3:] == ["version.scanned", "version.eval.recorded", "version.evaluated"]


def test_unsafe_pickle_fails_the_version_with_unsafe_file(container, admin, tmp_path):
    files = tiny_model_files(2)
    files["pytorch_model.bin"] = scan_samples.torch_zip_payload_in_data_pkl()
    vid = _submit(container, admin, _dir(tmp_path, "evil", files), "evil")
    drain(container)
    v = _version(container, vid)
    assert v.state == "failed" and v.failure_reason == "unsafe_file"
    assert v.failure_detail["files"] == ["pytorch_model.bin"]
    findings = v.failure_detail["findings"]["pytorch_model.bin"]
    assert any(f["severity"] == "unsafe" for f in findings)
    with container.session_factory() as session:
        # modelscan ran beside ours on the format it knows, and was recorded, not trusted.
        other = session.scalars(select(ScanResult).where(ScanResult.scanner == "modelscan")).all()
        assert [r.path for r in other] == ["pytorch_model.bin"]


def test_a_blob_shared_by_versions_is_scanned_once(container, admin, tmp_path):
    files = tiny_model_files(5)
    a = _submit(container, admin, _dir(tmp_path, "a", files), "a")
    drain(container)
    b = _submit(container, admin, _dir(tmp_path, "b", files), "b")
    with container.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Job).where(
            Job.kind == "scan_blob", Job.state == "queued")) == 0
    drain(container)
    assert _version(container, a).state == _version(container, b).state == "awaiting_approval"
    with container.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(ScanResult).where(
            ScanResult.scanner == "modelreg")) == len(files)


def test_rescan_with_a_new_scanner_version_flags_a_version_turned_unsafe(container, admin, tmp_path,
                                                                         monkeypatch):
    files = tiny_model_files(6)
    files["extra.pkl"] = scan_samples.pip_main()
    root = _dir(tmp_path, "old", files)
    # An older scanner let this file through: its cached verdicts are what the pipeline used.
    with container.session_factory() as session:
        from registry.sources.local import LocalDirectorySource

        for f in LocalDirectorySource(str(root)).resolve(None).files:
            session.add(ScanResult(blob_digest=f.sha256, path=f.path, scanner="modelreg",
                                   scanner_version=SCANNER_VERSION, format="pickle", verdict="safe", findings=[]))
        session.commit()
    vid = _submit(container, admin, root, "old")
    drain(container)
    assert _version(container, vid).state == "awaiting_approval"
    # A scanner upgrade: the stage queues by the version and the job records under it.
    monkeypatch.setattr(scans, "SCANNER_VERSION", SCANNER_VERSION + "+next")
    monkeypatch.setattr(scanning_stage, "SCANNER_VERSION", SCANNER_VERSION + "+next")
    with container.session_factory() as session:
        queued = scans.rescan_all(session, admin, ports=container.ports)
    assert queued == len(files)
    drain(container)
    v = _version(container, vid)
    assert v.state == "awaiting_approval" and v.flagged_at is not None and "extra.pkl" in v.flag_reason
    with container.session_factory() as session:
        flagged = session.scalars(select(AuditEvent).where(
            AuditEvent.action == "version.flagged_for_revocation")).all()
        assert len(flagged) == 1 and flagged[0].details["files"] == ["extra.pkl"]
        audit.verify(session)
