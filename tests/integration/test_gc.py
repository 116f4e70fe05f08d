"""Garbage collection of blobs: what nothing references goes after its grace period, and a referenced
blob never goes, even while submissions race the collector (on SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import threading
import time

import pytest
from sqlalchemy import select, update

from registry.db.models import Blob, BlobOwner, Version
from registry.domain.errors import BlobsNotUploadedError
from registry.domain.files import FileEntry
from registry.domain.states import VersionState
from registry.services import gc, versions
from registry.services.versions import SubmitRequest
from workers.handler_registry import HandlerRegistry
from workers.handlers import build_handlers
from workers.loop import Worker

SHARED = b"shared weights " * 4096


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def upload(container, admin, data: bytes) -> str:
    with container.session_factory() as session:
        versions.upload_blob(session, admin, "acme", sha(data), io.BytesIO(data), len(data),
                             blob_store=container.blob_store)
    return sha(data)


def submit_files(container, admin, name: str, files: dict[str, bytes]) -> Version:
    entries = [FileEntry(path, len(data), sha(data)) for path, data in files.items()]
    with container.session_factory() as session:
        version, _ = versions.submit_uploaded(session, admin, "acme", name, entries, label=name,
                                              limits=container.limits(), ports=container.ports)
        return version


def delete_version(container, version_id: int) -> None:
    """What retention does to a version, as far as garbage collection is concerned."""
    with container.session_factory() as session:
        session.execute(update(Version).where(Version.id == version_id)
                        .values(deleted_at=container.clock.now(), deleted_by="test"))
        session.commit()


def age_blobs(container, hours: float) -> None:
    with container.session_factory() as session:
        then = container.clock.now() - dt.timedelta(hours=hours)
        session.execute(update(Blob).values(last_used_at=then, created_at=then))
        session.commit()


def stored_intact(container, digest: str) -> bool:
    store = container.blob_store
    if not store.exists(digest):
        return False
    return hashlib.sha256(b"".join(store.open_range(digest))).hexdigest() == digest


def collect(container, hours: float = 24.0) -> gc.GcReport:
    return gc.collect(container.session_factory, container.blob_store, container.clock,
                      dt.timedelta(hours=hours), orphan_age=dt.timedelta(hours=hours))


def test_old_unreferenced_blobs_go_young_and_referenced_ones_stay(store_container, admin):
    container = store_container
    kept = upload(container, admin, b"in a version")
    submit_files(container, admin, "m", {"w.bin": b"in a version"})
    old_garbage = upload(container, admin, b"nobody uses this")
    age_blobs(container, 48)
    young_garbage = upload(container, admin, b"uploaded a moment ago")
    upload(container, admin, b"of a deleted version")
    deleted_version = submit_files(container, admin, "gone", {"x.bin": b"of a deleted version"})
    delete_version(container, deleted_version.id)
    age_blobs_of = sha(b"of a deleted version")
    with container.session_factory() as session:
        session.execute(update(Blob).where(Blob.digest == age_blobs_of)
                        .values(last_used_at=container.clock.now() - dt.timedelta(hours=30)))
        session.commit()
    # Bytes a crashed writer left without a row: old ones go, new ones stay.
    orphan = container.blob_store.put(io.BytesIO(b"orphaned bytes")).digest

    report = collect(container, hours=24)

    assert report.deleted == 2 and report.deleted_bytes == len(b"nobody uses this") + len(b"of a deleted version")
    assert not container.blob_store.exists(old_garbage) and not container.blob_store.exists(age_blobs_of)
    assert stored_intact(container, kept) and stored_intact(container, young_garbage)
    assert container.blob_store.exists(orphan) and report.orphans_deleted == 0
    with container.session_factory() as session:
        rows = set(session.scalars(select(Blob.digest)))
        owners = set(session.scalars(select(BlobOwner.digest)))
    assert rows == owners == {kept, young_garbage}

    report = collect(container, hours=0)
    assert report.orphans_deleted == 1 and not container.blob_store.exists(orphan)
    assert report.kept_referenced == 1 and stored_intact(container, kept)
    assert not container.blob_store.exists(young_garbage)


def test_a_deleted_blob_is_uploaded_again_before_a_version_may_use_it(container, admin):
    upload(container, admin, b"abc")
    age_blobs(container, 48)
    assert collect(container).deleted == 1
    with pytest.raises(BlobsNotUploadedError):
        submit_files(container, admin, "m", {"a": b"abc"})
    upload(container, admin, b"abc")
    version = submit_files(container, admin, "m", {"a": b"abc"})
    assert stored_intact(container, version.files[0].sha256)


def _mirror_worker(container) -> Worker:
    handlers = build_handlers()
    kinds = ("resolve_version", "mirror_file", "seal_version")
    return Worker(container, HandlerRegistry([handlers.get(k) for k in kinds]), worker_id="gc-race")


def test_gc_racing_submissions_never_deletes_a_referenced_blob(container, admin, tmp_path):
    """Submissions keep taking up a blob that was just unreferenced (each version is deleted once
    checked) while the collector runs without a grace period: every version, while it exists, finds
    every one of its blobs stored and intact."""
    rounds = 25
    stop = threading.Event()
    problems: list[str] = []
    reports: list[gc.GcReport] = []

    def collector():
        while not stop.is_set():
            reports.append(collect(container, hours=0))

    def check(version_id: int, label: str) -> None:
        with container.session_factory() as session:
            version = session.get(Version, version_id)
            for f in version.files:
                if f.sha256 is None or not stored_intact(container, f.sha256):
                    problems.append(f"{label}: {f.path} ({f.sha256}) is gone while referenced")

    def uploader():
        for i in range(rounds):
            files = {"shared.bin": SHARED, "own.txt": f"upload {i}".encode()}
            for _ in range(50):
                try:
                    for data in files.values():
                        upload(container, admin, data)
                    version = submit_files(container, admin, "up", files)
                    break
                except (BlobsNotUploadedError, gc.BlobVanishedError):
                    continue  # the collector took a blob between upload and submit: upload again

            else:
                problems.append(f"upload round {i} never got its version in")
                continue
            check(version.id, f"upload round {i}")
            delete_version(container, version.id)

    def mirrorer():
        worker = _mirror_worker(container)
        for i in range(rounds):
            source = tmp_path / f"src{i}"
            source.mkdir()
            (source / "shared.bin").write_bytes(SHARED)
            (source / "own.txt").write_text(f"mirror {i}")
            with container.session_factory() as session:
                version, _ = versions.submit(session, admin, "acme", "mir", SubmitRequest(source=str(source)),
                                             open_source=container.open_source, limits=container.limits(),
                                             ports=container.ports)
                version_id = version.id
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                worker.run_once()
                with container.session_factory() as session:
                    state = session.get(Version, version_id).state
                if state != VersionState.MIRRORING.value and state != VersionState.SUBMITTED.value:
                    break
            if state != VersionState.SEALED.value and state != VersionState.SCANNING.value:
                problems.append(f"mirror round {i} ended {state}")
                continue
            check(version_id, f"mirror round {i}")
            delete_version(container, version_id)

    def guarded(target):
        def run():
            try:
                target()
            except Exception as exc:  # a thread's error fails the test, not only a warning
                problems.append(f"{target.__name__} raised {exc!r}")
        return run

    threads = [threading.Thread(target=guarded(t)) for t in (collector, uploader, mirrorer)]
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join(timeout=600)
    stop.set()
    threads[0].join(timeout=120)

    assert problems == [], "\n".join(problems)
    # The race was real: the shared blob was collected between submissions, again and again.
    assert sum(r.deleted for r in reports) >= 5, [r.as_dict() for r in reports[-3:]]


class KilledError(BaseException):
    """The gc process dying at a blob store delete: no handler of ours catches it, nothing more commits."""


class KilledAtDelete:
    """The blob store of a gc process killed at its first delete: ``after_bytes`` once they are gone."""

    def __init__(self, store, *, after_bytes: bool) -> None:
        self._store, self._after_bytes = store, after_bytes

    def __getattr__(self, name):
        return getattr(self._store, name)

    def delete(self, digest: str) -> None:
        if self._after_bytes:
            self._store.delete(digest)
        raise KilledError


def rows_without_bytes(container) -> list[str]:
    with container.session_factory() as session:
        return [d for d in session.scalars(select(Blob.digest)) if not container.blob_store.exists(d)]


def test_gc_killed_after_deleting_bytes_leaves_no_row_a_submission_could_list(store_container, admin):
    container = store_container
    garbage = upload(container, admin, b"garbage about to be collected")
    age_blobs(container, 48)
    with pytest.raises(KilledError):
        gc.collect(container.session_factory, KilledAtDelete(container.blob_store, after_bytes=True),
                   container.clock, dt.timedelta(hours=24))

    assert not container.blob_store.exists(garbage)
    assert rows_without_bytes(container) == []
    # The submission that used to be sealed, signed, then failed scan_error is refused up front.
    with pytest.raises(BlobsNotUploadedError):
        submit_files(container, admin, "late", {"w.bin": b"garbage about to be collected"})


def test_gc_killed_before_deleting_bytes_leaves_an_orphan_the_next_run_collects(store_container, admin):
    container = store_container
    garbage = upload(container, admin, b"garbage left by a killed collector")
    age_blobs(container, 48)
    with pytest.raises(KilledError):
        gc.collect(container.session_factory, KilledAtDelete(container.blob_store, after_bytes=False),
                   container.clock, dt.timedelta(hours=24))
    with container.session_factory() as session:
        assert session.get(Blob, garbage) is None, "the row outlived the collector's first transaction"
    assert container.blob_store.exists(garbage)

    report = collect(container, hours=0)
    assert report.orphans_deleted == 1 and not container.blob_store.exists(garbage)


def test_each_collection_that_deletes_is_one_audit_event_with_bounded_digests(container, admin, monkeypatch):
    from registry import audit
    from registry.db.models import AuditEvent

    monkeypatch.setattr(gc, "AUDITED_DIGESTS", 2)
    digests = sorted(upload(container, admin, f"garbage {i}".encode()) for i in range(3))
    age_blobs(container, 48)
    orphan = container.blob_store.put(io.BytesIO(b"orphaned by a crashed writer")).digest

    report = collect(container, hours=0)
    assert (report.deleted, report.orphans_deleted) == (3, 1)
    assert collect(container, hours=0).deleted == 0  # nothing deleted: nothing recorded

    with container.session_factory() as session:
        events = session.scalars(select(AuditEvent).where(AuditEvent.action == "blobs.collected")).all()
        assert audit.verify(session).events > 0
    assert len(events) == 1
    (event,) = events
    assert event.actor == "system" and event.subject == "blob-store"
    assert event.details["deleted"] == 3 and event.details["orphans_deleted"] == 1
    assert event.details["digests"] == digests[:2] and event.details["digests_omitted"] == 2
    assert orphan not in event.details["digests"]


def test_bytes_recorded_again_between_the_collectors_two_steps_stay(container, admin, monkeypatch):
    data = b"unreferenced, then uploaded again"
    digest = upload(container, admin, data)
    age_blobs(container, 48)
    delete_bytes = gc._delete_unrecorded_bytes

    def upload_first(*args, **kwargs):
        # The row is gone and committed; an uploader finds no blob, puts the bytes and records them.
        upload(container, admin, data)
        return delete_bytes(*args, **kwargs)

    monkeypatch.setattr(gc, "_delete_unrecorded_bytes", upload_first)
    assert collect(container).deleted == 0
    assert stored_intact(container, digest) and rows_without_bytes(container) == []


def test_a_writer_recording_while_the_collector_deletes_bytes_puts_them_again(container, admin):
    data = b"recorded while the collector deletes"
    digest = upload(container, admin, data)
    age_blobs(container, 48)
    deleting, outcome = threading.Event(), {}

    class SlowDelete:
        """The collector's store: it holds the digest's lock while the writer arrives."""

        def __getattr__(self, name):
            return getattr(container.blob_store, name)

        def delete(self, key: str) -> None:
            deleting.set()
            time.sleep(1.0)
            container.blob_store.delete(key)

    def writer() -> None:
        deleting.wait(30)
        try:
            upload(container, admin, data)
            outcome["result"] = "recorded"
        except Exception as exc:  # noqa: BLE001  (the outcome is what the test checks)
            outcome["result"] = type(exc).__name__

    thread = threading.Thread(target=writer)
    thread.start()
    gc.collect(container.session_factory, SlowDelete(), container.clock, dt.timedelta(hours=24))
    thread.join(30)
    # The writer waited for the collector's lock, then found its bytes gone: put them again.
    assert outcome["result"] == "BlobVanishedError", outcome
    assert rows_without_bytes(container) == []
    upload(container, admin, data)
    assert stored_intact(container, digest)
