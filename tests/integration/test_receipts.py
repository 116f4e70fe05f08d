"""The receipts service on SQLite and PostgreSQL: reports from many threads at once make one reporter and one
place each (the reporter's first reports race), a snapshot drops only its own reporter's places, and a
revocation appends one ``version.still_running`` per held place in its own transaction, never twice, and past
its bound one event counting the places it does not name."""

from __future__ import annotations

import threading

from sqlalchemy import func, select

from registry.auth import authenticate
from registry.db.models import AuditEvent, Receipt, ReceiptReporter
from registry.domain.receipts import parse_report
from registry.services import receipts
from tests.support.release_seed import MODEL, TENANT, revoke, seed_release


def _report(node: str, *paths: str, snapshot: bool = False, version: int = 1) -> dict:
    return {"program": "cache-warm", "node": node, "snapshot": snapshot, "places": [
        {"model": f"{TENANT}/{MODEL}", "version": version, "where": "path", "path": p} for p in paths]}


def test_concurrent_reports_snapshots_and_alerts(container, tmp_path, database_url):
    tokens = seed_release(tmp_path / "seed", 2, database_url=database_url)
    with container.session_factory() as session:
        first, second = (authenticate(session, t) for t in tokens)

    def send(principal, body: dict) -> dict:
        with container.session_factory() as session:
            return receipts.report(session, principal, parse_report(body), clock=container.clock, stale_after=900)

    errors: list[BaseException] = []

    def racer() -> None:
        try:
            send(first, _report("n1", "/a", "/b"))
        except BaseException as exc:  # noqa: BLE001 - told below
            errors.append(exc)

    threads = [threading.Thread(target=racer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    send(second, _report("n1", "/a"))  # another principal saying the same of the same place: its own receipt
    with container.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(ReceiptReporter)) == 2
        assert session.scalar(select(func.count()).select_from(Receipt)) == 3

    dropped = send(first, _report("n1", "/b", snapshot=True))
    assert dropped["dropped"] == 1 and dropped["recorded"] == 1
    with container.session_factory() as session:
        held = session.scalars(select(Receipt.principal).where(Receipt.dropped_at.is_(None))).all()
        assert sorted(held) == sorted([first.name, second.name])

    revoke(tmp_path / "seed", 1, database_url=database_url)
    with container.session_factory() as session:
        alerts = session.scalars(select(AuditEvent).where(AuditEvent.action == receipts.STILL_RUNNING)).all()
        assert sorted(a.details["principal"] for a in alerts) == sorted([first.name, second.name])
        assert {a.subject for a in alerts} == {f"{TENANT}/{MODEL}@1"}
    send(first, _report("n1", "/b"))  # held still, reported again: no second event
    with container.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(AuditEvent)
                              .where(AuditEvent.action == receipts.STILL_RUNNING)) == 2


def test_an_image_volume_digest_maps_back_to_its_version_by_config_or_manifest(container, tmp_path, database_url):
    """containerd reports an image volume's config digest, CRI-O its manifest's: either names the version of the
    model served with it (the artifact row as the OCI builder records it; kwatch's tests build real ones)."""
    from registry.db.models import Model, OciArtifact, Version

    tokens = seed_release(tmp_path / "seed", 1, database_url=database_url)
    manifest, config = "sha256:" + "a" * 64, "sha256:" + "c" * 64
    with container.session_factory() as session:
        principal = authenticate(session, tokens[0])
        v2 = session.scalars(select(Version).join(Model).where(Model.name == MODEL, Version.number == 2)).one()
        session.add(OciArtifact(version_id=v2.id, model_id=v2.model_id, shape="image",
                                media_type="application/vnd.oci.image.manifest.v1+json", manifest_digest=manifest,
                                manifest=b"{}", config_digest=config, config=b"{}",
                                created_at=container.clock.now()))
        # A digest served under another model names nothing of this one.
        other = Model(tenant_id=v2.model.tenant_id, name="other")
        session.add(other)
        session.flush()
        session.add(OciArtifact(version_id=v2.id, model_id=other.id, shape="other", media_type="x",
                                manifest_digest="sha256:" + "e" * 64, manifest=b"{}",
                                config_digest="sha256:" + "f" * 64, config=b"{}", created_at=container.clock.now()))
        session.commit()

    def pod(uid: str, digest: str) -> dict:
        return {"model": f"{TENANT}/{MODEL}", "image_digest": digest, "where": "pod", "namespace": "ml",
                "pod": f"llm-{uid}", "uid": uid, "volume": "model"}

    body = {"program": "cluster-watch", "node": "watcher", "places": [
        pod("containerd", config), pod("cri-o", manifest), pod("unknown", "sha256:" + "0" * 64),
        pod("elsewhere", "sha256:" + "f" * 64)]}
    with container.session_factory() as session:
        answer = receipts.report(session, principal, parse_report(body), clock=container.clock, stale_after=900)
    assert answer["recorded"] == 2 and [r["index"] for r in answer["rejected"]] == [2, 3]
    with container.session_factory() as session:
        held = session.execute(select(Receipt.pod, Version.number).join(Version, Version.id == Receipt.version_id)
                               .order_by(Receipt.pod)).all()
    assert [tuple(r) for r in held] == [("llm-containerd", 2), ("llm-cri-o", 2)]


def test_a_revocation_past_the_alert_bound_lists_the_first_places_and_counts_the_rest(container, tmp_path,
                                                                                       database_url):
    """The bound is a parameter (10,000 by default): at 2, five held places give two events of their own and one
    naming the three others and how to list them; every place is marked alerted, and a second pass adds nothing."""
    from registry import audit
    from registry.db.models import Model, Version
    from registry.db.session import begin_write
    from registry.domain import events as catalogue
    from registry.services.events import row_of

    tokens = seed_release(tmp_path / "seed", 1, database_url=database_url)
    with container.session_factory() as session:
        principal = authenticate(session, tokens[0])
        receipts.report(session, principal, parse_report(_report("n1", *(f"/p{i}" for i in range(5)))),
                        clock=container.clock, stale_after=900)
        held = session.scalars(select(Receipt.id).order_by(Receipt.id)).all()
    assert len(held) == 5

    with container.session_factory() as session:
        begin_write(session)
        v1 = session.scalars(select(Version).join(Model).where(Model.name == MODEL, Version.number == 1)).one()
        assert receipts.alert_still_running(session, v1, now=container.clock.now(), max_alerts=2) == 5
        session.commit()
        alerts = session.scalars(select(AuditEvent).where(AuditEvent.action == receipts.STILL_RUNNING)
                                 .order_by(AuditEvent.id)).all()
        assert [a.details.get("receipt") for a in alerts] == [held[0], held[1], None]
        summary = alerts[-1]
        assert summary.details == {"more_places": 3, "listed": 2,
                                   "list_with": f"modelreg provenance running {TENANT}/{MODEL}@1"}
        assert alerts[1].id == alerts[0].id + 1 and summary.id == alerts[1].id + 1
        [event] = catalogue.events_of(row_of(summary))
        assert event.data["more_places"] == 3 and event.data["list_with"].endswith(f"{TENANT}/{MODEL}@1")
        assert session.scalar(select(func.count()).select_from(Receipt).where(Receipt.alerted_at.is_(None))) == 0

        begin_write(session)
        assert receipts.alert_still_running(session, v1, now=container.clock.now(), max_alerts=2) == 0
        session.commit()
        assert session.scalar(select(func.count()).select_from(AuditEvent)
                              .where(AuditEvent.action == receipts.STILL_RUNNING)) == 3
        audit.verify(session)
