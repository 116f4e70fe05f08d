"""The watcher's bounded pieces, without an API server or a registry: watch lines (an overlong one skipped whole,
a line split across chunks joined), reports cut to the registry's limits, and what the inventory owes the
registry as pods come, change and go (``registry/node/cluster_watch.py``)."""

from __future__ import annotations

import json

from registry.domain.receipts import MAX_PLACES, MAX_REPORT_BYTES, parse_report
from registry.node.cluster_watch import (
    MAX_EVENT_BYTES,
    MAX_PLACES_PER_REPORT,
    PROGRAM,
    Inventory,
    PodPlace,
    _batches,
    _lines,
)
from registry.node.cluster_watch import (
    MAX_REPORT_BYTES as WATCH_MAX_REPORT_BYTES,
)
from tests.support.kube_pods import pod

HOST = "modelreg.example"
CONFIG = "sha256:" + "2" * 64


def test_lines_are_joined_across_chunks_and_an_overlong_one_is_skipped_whole():
    chunks = [b'{"a":', b' 1}\n{"b"', b": 2}\n", b"x" * (MAX_EVENT_BYTES + 10), b"y\n", b'{"c": 3}']
    assert list(_lines(iter(chunks))) == [b'{"a": 1}', b'{"b": 2}', b'{"c": 3}']


def test_reports_stay_within_the_registrys_limits():
    assert MAX_PLACES_PER_REPORT <= MAX_PLACES and WATCH_MAX_REPORT_BYTES < MAX_REPORT_BYTES
    places = [(PodPlace("acme/llm", CONFIG, "n" * 63, "p" * 253, "u" * 64, "v" * 200, "node-1"), True)
              for _ in range(1200)]
    batches = list(_batches(places, "cluster"))
    assert sum(len(b) for b in batches) == 1200
    for batch in batches:
        body = {"program": PROGRAM, "node": "cluster", "scope": "s" * 200, "snapshot": False,
                "places": [p.body(h) for p, h in batch]}
        assert len(batch) <= MAX_PLACES_PER_REPORT and len(json.dumps(body)) <= MAX_REPORT_BYTES
        parse_report(body)


def _pod(name: str, uid: str, ref: str = f"{HOST}/acme/llm:1", namespace: str = "serving"):
    return pod(namespace, name, uid=uid, volumes={"model": ref}, reported={"model": CONFIG})


def test_the_inventory_owes_holds_and_drops_and_only_this_registrys_images():
    inventory = Inventory(frozenset({HOST}), "cluster")
    inventory.replace([_pod("a", "ua"), _pod("b", "ub", ref="docker.io/acme/llm:1"),
                       _pod("c", "uc", namespace="scratch")], frozenset({"serving"}))
    assert inventory.snapshot_owed
    assert {(p.pod, held) for p, held in inventory.changed.items()} == {("a", True)}
    inventory.changed.clear()
    inventory.update("ua", _pod("a", "ua"))  # nothing changed: nothing owed
    assert inventory.changed == {}
    inventory.update("ua", None)
    inventory.update("ud", _pod("d", "ud"))
    assert {(p.pod, held) for p, held in inventory.changed.items()} == {("a", False), ("d", True)}
    assert [p.pod for p in inventory.held()] == ["d"]
    # A place held then dropped before any report is owed once, as dropped.
    inventory.changed.clear()
    inventory.update("ue", _pod("e", "ue"))
    inventory.update("ue", None)
    assert {(p.pod, held) for p, held in inventory.changed.items()} == {("e", False)}


def test_a_refused_model_is_left_out_from_then_on():
    inventory = Inventory(frozenset({HOST}), "cluster")
    inventory.replace([_pod("a", "ua"), _pod("b", "ub", ref=f"{HOST}/other/secret:1")], frozenset({"serving"}))
    inventory.refuse("other/secret")
    assert [p.model for p in inventory.changed] == ["acme/llm"]
    assert [p.model for p in inventory.held()] == ["acme/llm"]
    inventory.update("uc", _pod("c", "uc", ref=f"{HOST}/other/secret:2"))
    assert [p.pod for p in inventory.changed] == ["a"]
