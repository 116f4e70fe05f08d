"""Pictures drawn on the server as SVG: a version's provenance graph, eval metrics against their bounds.

Every text that reaches the drawing is escaped here (it may be a label a submitter chose); the result
is :class:`markupsafe.Markup`, placed in the page as is. Colours are presentation attributes, never
``style``, so the console's Content-Security-Policy needs no inline style.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from markupsafe import Markup, escape

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 170, 40, 40, 14, 10
MAX_PER_COLUMN = 8
COLOURS = {"ok": "#e6f4ea", "bad": "#fde7e9", "wait": "#fff4ce", "plain": "#eef2f7"}


def _short(text: Any, limit: int = 26) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _box(x: int, y: int, title: str, detail: str, tone: str) -> str:
    return (f'<g><title>{escape(title)}: {escape(detail)}</title>'
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{COLOURS[tone]}" '
            f'stroke="#5b6b7f"/>'
            f'<text x="{x + 8}" y="{y + 16}" font-size="12" font-weight="bold" fill="#1d2733">{escape(_short(title))}'
            f'</text><text x="{x + 8}" y="{y + 31}" font-size="11" '
            f'fill="#1d2733">{escape(_short(detail, 30))}</text></g>')


def provenance_graph(version: Any, approvals: Sequence[Any], scans: Sequence[dict[str, Any]],
                     evals: Sequence[dict[str, Any]], aliases: Sequence[Any],
                     nodes: Sequence[dict[str, Any]] | None) -> Markup:
    """Upstream repo and revision → version → scans, evals, approvals → aliases → nodes that fetched it.

    ``nodes`` is None when the viewer may not see who fetched (not an auditor): that column is left out.
    """
    verdicts = [s["verdict"] for s in scans]
    bad = [v for v in verdicts if v in ("unsafe", "suspicious")]
    columns: list[list[tuple[str, str, str]]] = [
        [(f"{version.source_kind} source", f"{version.source_repo}@{(version.resolved_revision or '?')[:12]}",
          "plain")],
        [(f"version {version.number}", version.state,
          "ok" if version.state == "approved" else "bad" if version.state in ("failed", "rejected", "revoked")
          else "wait")],
        [("scans", f"{len(verdicts)} files, {len(bad)} flagged" if verdicts else "none yet",
          "bad" if bad else "ok" if verdicts else "wait")]
        + [(f"eval {e['suite']}", e["status"], "ok" if e["status"] == "completed" else
            "bad" if e["status"] == "failed" else "wait") for e in evals]
        + [(f"{a.decision} ({a.capacity})", a.principal.name, "ok" if a.decision == "approve" else "bad")
           for a in approvals],
        [(f"alias {a.name}", "canary" if a.canary_version_id == version.id else "main", "ok") for a in aliases],
    ]
    if nodes is not None:
        columns.append([(f"node {n['principal']}", _node_traffic(n), "plain") for n in nodes])
    columns = [c[:MAX_PER_COLUMN] for c in columns if c]
    height = PAD * 2 + max(len(c) for c in columns) * (BOX_H + GAP_Y) - GAP_Y
    width = PAD * 2 + len(columns) * (BOX_W + GAP_X) - GAP_X
    parts: list[str] = []
    placed: list[list[tuple[int, int]]] = []
    for i, column in enumerate(columns):
        x = PAD + i * (BOX_W + GAP_X)
        top = (height - (len(column) * (BOX_H + GAP_Y) - GAP_Y)) // 2
        placed.append([(x, top + j * (BOX_H + GAP_Y)) for j in range(len(column))])
    for i in range(1, len(columns)):
        # Each box links back to the version (column 1) or, for the first two columns, to the one before.
        sources = placed[i - 1] if i <= 2 else placed[1]
        for (x, y) in placed[i]:
            for (sx, sy) in sources[:1] if i > 2 else sources:
                parts.append(f'<line x1="{sx + BOX_W}" y1="{sy + BOX_H // 2}" x2="{x}" y2="{y + BOX_H // 2}" '
                             f'stroke="#8795a8" stroke-width="1.5" marker-end="url(#arrow)"/>')
    for column, spots in zip(columns, placed):
        for (title, detail, tone), (x, y) in zip(column, spots):
            parts.append(_box(x, y, title, detail, tone))
    label = f"Provenance of version {version.number}"
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(label)}" class="graph"><title>{escape(label)}</title>'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#8795a8"/></marker></defs>'
        + "".join(parts) + "</svg>")


def metrics_chart(rows: Iterable[dict[str, Any]], baseline_alias: str | None) -> Markup | None:
    """One bar per gated metric (one with bounds or a baseline value; every metric when none is): its value,
    its bounds (red ticks) and the baseline's value (a blue diamond), each row on its own scale from zero."""
    rows = [r for r in rows if r["value"] is not None]
    gated = [r for r in rows if r["min"] is not None or r["max"] is not None or r["baseline"] is not None]
    rows = (gated or rows)[:40]
    if not rows:
        return None
    label_w, bar_w, row_h = 230, 300, 30
    width, height = label_w + bar_w + 150, PAD * 2 + row_h * len(rows)
    parts = []
    for i, r in enumerate(rows):
        numbers = [v for v in (r["value"], r["min"], r["max"], r["baseline"]) if isinstance(v, (int, float))]
        low, high = min(0.0, *numbers), max(*numbers, 0.0)
        if high == low:
            high = low + 1.0
        high = high + (high - low) * 0.1

        def at(value: float) -> float:
            return label_w + (value - low) / (high - low) * bar_w

        y = PAD + i * row_h
        ok = (r["min"] is None or r["value"] >= r["min"]) and (r["max"] is None or r["value"] <= r["max"])
        parts.append(f'<text x="0" y="{y + 15}" font-size="12" fill="#1d2733">'
                     f'{escape(_short(str(r["suite"]) + " · " + str(r["metric"]), 36))}</text>')
        parts.append(f'<rect x="{label_w}" y="{y + 4}" width="{bar_w}" height="14" fill="#eef2f7"/>')
        parts.append(f'<rect x="{at(min(low, 0.0)):.1f}" y="{y + 4}" '
                     f'width="{max(at(r["value"]) - at(min(low, 0.0)), 1):.1f}" '
                     f'height="14" fill="{"#3c8d5a" if ok else "#c23b3b"}"><title>{escape(r["metric"])} = '
                     f'{escape(r["value"])}</title></rect>')
        for bound in ("min", "max"):
            if isinstance(r[bound], (int, float)):
                parts.append(f'<line x1="{at(r[bound]):.1f}" x2="{at(r[bound]):.1f}" y1="{y}" y2="{y + 22}" '
                             f'stroke="#c23b3b" stroke-width="2"><title>{bound} {escape(r[bound])}</title></line>')
        if isinstance(r["baseline"], (int, float)):
            bx, by = at(r["baseline"]), y + 11
            parts.append(f'<path d="M {bx:.1f} {by - 6} L {bx + 6:.1f} {by} L {bx:.1f} {by + 6} L {bx - 6:.1f} {by} z" '
                         f'fill="#2f6fd0"><title>{escape(baseline_alias or "baseline")}: '
                         f'{escape(r["baseline"])}</title></path>')
        bounds = " ".join(f"{'≥' if b == 'min' else '≤'} {format(r[b], '.4g')}" for b in ("min", "max")
                          if isinstance(r[b], (int, float)))
        parts.append(f'<text x="{label_w + bar_w + 8}" y="{y + 15}" font-size="12" fill="#1d2733">'
                     f'{escape(format(r["value"], ".4g"))} {escape(bounds)}</text>')
    label = "Eval metrics against their thresholds" + (f" and the {baseline_alias} baseline" if baseline_alias else "")
    return Markup(f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
                  f'height="{height}" role="img" aria-label="{escape(label)}" class="chart">'
                  f'<title>{escape(label)}</title>' + "".join(parts) + "</svg>")


def _node_traffic(node: dict) -> str:
    """What a principal took: manifests (``count``), downloads through ``/hf`` and OCI pulls, each only if any."""
    said = [f"{node['count']} manifests"] if node.get("count") else []
    if node.get("hf_downloads"):
        said.append(f"{node['hf_downloads']} /hf downloads")
    if node.get("oci_pulls"):
        said.append(f"{node['oci_pulls']} OCI pulls")
    return ", ".join(said) or "0 fetches"
