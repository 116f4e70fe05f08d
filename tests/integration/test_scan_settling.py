"""Scanning a version costs the same per job however many files it holds, and a blob listed under many
paths is scanned once per way loaders open it (issue 18)."""

from __future__ import annotations

import pickle

from sqlalchemy import event, func, select

from registry.db.models import Job, ScanResult, Version
from registry.jobs import JobKind
from registry.services import scans, versions
from registry.services.versions import SubmitRequest
from tests.support import scan_samples
from tests.support.registry import drain
from workers.handler_registry import HandlerRegistry
from workers.handlers import build_handlers
from workers.loop import Worker

SCAN_BLOB = JobKind.SCAN_BLOB.value


def _submit(container, admin, tmp_path, name, files):
    root = tmp_path / name
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    with container.session_factory() as session:
        version, _ = versions.submit(session, admin, "acme", name, SubmitRequest(source=str(root)),
                                     open_source=container.open_source, limits=container.limits(),
                                     ports=container.ports)
        return version.id


def _drain_all_but_scans(container):
    handlers = build_handlers()
    worker = Worker(container, HandlerRegistry([handlers.get(k) for k in handlers.kinds() if k != SCAN_BLOB]),
                    worker_id="not-scanning")
    while worker.run_once():
        pass


def _take_queued_scans(container):
    """The payloads of the queued scan jobs, marked done: the test runs them itself."""
    with container.session_factory() as session:
        queued = session.scalars(select(Job).where(Job.kind == SCAN_BLOB, Job.state == "queued")
                                 .order_by(Job.id)).all()
        payloads = [job.payload for job in queued]
        for job in queued:
            job.state = "succeeded"
        session.commit()
        return payloads


def _state(container, version_id):
    with container.session_factory() as session:
        return session.get(Version, version_id).state


def _statements_per_scan_job(container, admin, tmp_path, files: int) -> list[int]:
    """Seal a version of ``files`` distinct blobs, then run each of its scan jobs counting SQL statements."""
    vid = _submit(container, admin, tmp_path, f"m{files}",
                  {f"shards/part-{i:05d}.txt": f"shard {i} of {files}\n".encode() for i in range(files)})
    _drain_all_but_scans(container)
    assert _state(container, vid) == "scanning"
    payloads = _take_queued_scans(container)
    assert len(payloads) == files
    engine = container.session_factory.kw["bind"]
    counts = []

    def count(*_args):
        counts[-1] += 1

    event.listen(engine, "before_cursor_execute", count)
    try:
        for payload in payloads:
            counts.append(0)
            scans.scan_blob(container.session_factory, payload["digest"], payload["path"], ports=container.ports,
                            run_modelscan=False)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert _state(container, vid) == "awaiting_approval"
    return counts


def test_settling_a_scan_costs_the_same_statements_whatever_the_file_count(container, admin, tmp_path):
    small = _statements_per_scan_job(container, admin, tmp_path, 4)
    large = _statements_per_scan_job(container, admin, tmp_path, 40)
    # Every job but the last settles nothing; the last decides the version, once.
    assert max(large[:-1]) == max(small[:-1]), (small, large)
    assert large[-1] == small[-1], (small, large)


def _spy_scans(monkeypatch) -> list[str]:
    """The paths our engine was run under (the real engine runs; the list only records it)."""
    ran: list[str] = []
    real = scans.scan_stream

    def counting(path, *args, **kwargs):
        ran.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(scans, "scan_stream", counting)
    return ran


def test_a_blob_under_many_paths_is_scanned_once_per_loader(container, admin, tmp_path, monkeypatch):
    ran = _spy_scans(monkeypatch)
    weights = pickle.dumps({"layer": [1.0, 2.0]}, protocol=2)
    same_loader = [f"d{i}/weights.bin" for i in range(30)]
    torch_named = ["a/model.pt", "b/model.pth", "c/model.ckpt"]
    files = {path: weights for path in same_loader + torch_named + ["e/weights.pkl"]}
    vid = _submit(container, admin, tmp_path, "many", files)
    drain(container)
    assert _state(container, vid) == "awaiting_approval"
    # torch.load's names (.pt, .pth, .ckpt) are one loader; .bin (torch.load or ggml) and .pkl are two more.
    assert len(ran) == 3, ran
    with container.session_factory() as session:
        ours = session.scalars(select(ScanResult).where(ScanResult.scanner == "modelreg")).all()
        assert {r.path for r in ours} == set(files) and {r.verdict for r in ours} == {"safe"}
        assert session.scalar(select(func.count()).select_from(Job).where(Job.kind == SCAN_BLOB)) == 3
        from registry.db.models import ScanWait

        assert session.scalar(select(func.count()).select_from(ScanWait)) == 0
        assert set(session.scalars(select(Job.tenant).where(Job.kind == SCAN_BLOB))) == {"acme"}

    # Another version lists the blob under a new path of a loader already scanned: its result is reused.
    again = _submit(container, admin, tmp_path, "again", {"other/place/pytorch_model.bin": weights})
    drain(container)
    assert _state(container, again) == "awaiting_approval" and len(ran) == 3
    with container.session_factory() as session:
        copied = session.scalar(select(ScanResult).where(ScanResult.path == "other/place/pytorch_model.bin",
                                                         ScanResult.scanner == "modelreg"))
        assert copied.verdict == "safe"


def test_an_unsafe_blob_under_many_paths_fails_the_version_naming_every_path(container, admin, tmp_path,
                                                                              monkeypatch):
    ran = _spy_scans(monkeypatch)
    evil = scan_samples.pip_main()
    paths = [f"dir{i}/extra.pkl" for i in range(12)]
    vid = _submit(container, admin, tmp_path, "evil", {p: evil for p in paths})
    drain(container)
    assert len(ran) == 1
    with container.session_factory() as session:
        v = session.get(Version, vid)
        assert (v.state, v.failure_reason) == ("failed", "unsafe_file")
        assert v.failure_detail["files"] == sorted(paths)


def test_onnx_bytes_are_checked_against_each_paths_own_directory(container, admin, tmp_path, monkeypatch):
    """Under a name no loader opens (so one scan key), ONNX bytes are still resolved per path: their
    external data is relative to the file, and only one of these directories holds it."""
    from tests.support import format_samples

    ran = _spy_scans(monkeypatch)
    model = format_samples.onnx_model(external="weights.data")
    vid = _submit(container, admin, tmp_path, "onnx", {
        "with/graph.dat": model, "with/weights.data": bytes(64), "without/graph.dat": model})
    drain(container)
    assert {p for p in ran if p.endswith("graph.dat")} == {"with/graph.dat", "without/graph.dat"}
    with container.session_factory() as session:
        verdicts = dict(session.execute(select(ScanResult.path, ScanResult.verdict).where(
            ScanResult.scanner == "modelreg", ScanResult.path.like("%graph.dat"))).all())
        findings = session.scalar(select(ScanResult.findings).where(
            ScanResult.scanner == "modelreg", ScanResult.path == "without/graph.dat"))
    assert verdicts["with/graph.dat"] == "safe", verdicts
    assert verdicts["without/graph.dat"] == "suspicious"
    assert any(f["rule_id"] == "onnx.external-data.missing" for f in findings)
    assert _state(container, vid) == "awaiting_approval"
