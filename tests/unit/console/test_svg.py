"""The console's pictures: text in them is escaped, bounds and baselines are drawn."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from xml.etree import ElementTree

from registry.console import svg

MARKUP = '<script>alert("x")</script>'


def test_the_metrics_chart_draws_value_bounds_and_baseline_and_escapes_names():
    rows = [{"suite": MARKUP, "metric": "accuracy", "value": 0.7, "min": 0.8, "max": None, "baseline": 0.75},
            {"suite": "sanity", "metric": "ungated", "value": 5.0, "min": None, "max": None, "baseline": None}]
    out = str(svg.metrics_chart(rows, "prod"))
    tree = ElementTree.fromstring(out)  # well-formed XML
    assert "<script>" not in out and "&lt;script&gt;" in out
    texts = "".join(tree.itertext())
    assert "ungated" not in texts  # only gated metrics when some are
    assert 'fill="#c23b3b"' in out  # below its minimum: a red bar
    assert "prod: 0.75" in texts
    assert svg.metrics_chart([], "prod") is None


def test_the_provenance_graph_escapes_a_submitters_label():
    version = SimpleNamespace(source_kind="upload", source_repo=MARKUP, resolved_revision="a" * 64, number=3,
                              state="approved", id=1)
    approval = SimpleNamespace(decision="approve", capacity="ml", principal=SimpleNamespace(name="mia"),
                               at=dt.datetime.now(dt.timezone.utc))
    alias = SimpleNamespace(name="prod", canary_version_id=None)
    out = str(svg.provenance_graph(version, [approval], [{"verdict": "safe"}], [{"suite": "s", "status": "completed"}],
                                   [alias], [{"principal": "node-7", "count": 2}]))
    tree = ElementTree.fromstring(out)
    texts = "".join(tree.itertext())
    assert "<script>" not in out and "alias prod" in texts and "node node-7" in texts
    # No nodes column for a viewer who may not see who fetched.
    assert "node-7" not in str(svg.provenance_graph(version, [], [], [], [alias], None))


def test_the_provenance_graph_counts_hf_downloads_beside_manifests():
    version = SimpleNamespace(source_kind="hf", source_repo="org/m", resolved_revision="a" * 64, number=1,
                              state="approved", id=1)
    nodes = [{"principal": "hf-only", "count": 0, "hf_downloads": 4},
             {"principal": "both", "count": 2, "hf_downloads": 1},
             {"principal": "node", "count": 3, "hf_downloads": 0}]
    texts = "".join(ElementTree.fromstring(str(svg.provenance_graph(version, [], [], [], [], nodes))).itertext())
    assert "4 /hf downloads" in texts and "2 manifests, 1 /hf downloads" in texts and "3 manifests" in texts
    assert "0 fetches" not in texts


def test_the_provenance_graph_counts_oci_pulls_too():
    version = SimpleNamespace(source_kind="hf", source_repo="org/m", resolved_revision="a" * 64, number=1,
                              state="approved", id=1)
    nodes = [{"principal": "puller", "count": 0, "hf_downloads": 0, "oci_pulls": 2},
             {"principal": "mixed", "count": 1, "hf_downloads": 1, "oci_pulls": 1}]
    texts = "".join(ElementTree.fromstring(str(svg.provenance_graph(version, [], [], [], [], nodes))).itertext())
    assert "2 OCI pulls" in texts and "1 manifests, 1 /hf downloads, 1 OCI pulls" in texts
