"""A fetch's phase timings and outcome as a node exporter textfile (``modelreg fetch --metrics-textfile``).

The node exporter's textfile collector reads ``*.prom`` files from one directory at each scrape; a file
must never be seen half written, so it is written beside its final name and renamed over it. One file
holds one fetch (the last one): give each init container or pod its own file name.

Series (labels ``model="tenant/name"`` and ``ref``, the alias or version asked for):

- ``modelreg_fetch_phase_seconds{phase}``: manifest, verify, base (an adapter's base release, with
  ``--with-base``), download, assemble (the phases that ran);
- ``modelreg_fetch_success``: 1 or 0, and ``modelreg_fetch_outcome{outcome}`` 1 for the outcome
  (``ok`` or the failure kind of the exit code table: ``revoked``, ``signature``, ``network``...);
- ``modelreg_fetch_timestamp_seconds``: when the fetch ended;
- on success, ``modelreg_fetch_version``, ``modelreg_fetch_serial``, ``modelreg_fetch_release_bytes``,
  ``modelreg_fetch_downloaded_bytes`` and ``modelreg_fetch_files{source}`` (``downloaded``, ``cached``).

``modelreg cache warm --metrics-textfile`` writes the node cache's revocation counters (no labels; totals
kept in the cache's index, so they survive a restart): ``modelreg_cache_revoked_versions_total``,
``modelreg_cache_revoked_blobs_removed_total``, ``modelreg_cache_revoked_bytes_removed_total``, and
``modelreg_cache_events_cursor`` (how far the event stream was applied), ``modelreg_cache_events_failing``
(1 while the stream fails: alert on it).

Written by hand, in the text exposition format: the fetch client needs no metrics library.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

from registry import statefile

_HELP = {
    "modelreg_fetch_phase_seconds": ("gauge", "Seconds the last modelreg fetch spent in each phase"),
    "modelreg_fetch_success": ("gauge", "1 when the last modelreg fetch succeeded, else 0"),
    "modelreg_fetch_outcome": ("gauge", "1 for the outcome of the last modelreg fetch (ok, or its failure kind)"),
    "modelreg_fetch_timestamp_seconds": ("gauge", "When the last modelreg fetch ended (Unix time)"),
    "modelreg_fetch_version": ("gauge", "The version the last modelreg fetch installed"),
    "modelreg_fetch_serial": ("gauge", "The release serial the last modelreg fetch installed"),
    "modelreg_fetch_release_bytes": ("gauge", "Bytes of the release the last modelreg fetch installed"),
    "modelreg_fetch_downloaded_bytes": ("gauge", "Bytes the last modelreg fetch downloaded (not from the cache)"),
    "modelreg_fetch_files": ("gauge", "Files of the last modelreg fetch, by where they came from"),
    "modelreg_cache_revoked_versions_total": ("counter", "Revoked versions removed from the node cache"),
    "modelreg_cache_revoked_blobs_removed_total": ("counter", "Blobs removed from the node cache for revocations"),
    "modelreg_cache_revoked_bytes_removed_total": ("counter", "Bytes removed from the node cache for revocations"),
    "modelreg_cache_events_cursor": ("gauge", "The event stream cursor the node cache has applied up to"),
    "modelreg_cache_events_failing": ("gauge", "1 while the event stream fails (a refused token): revocations "
                                               "are not applied"),
}


def cache_samples(totals: Mapping[str, int], cursor: int, events_failing: bool = False
                  ) -> list[tuple[str, dict, float]]:
    """The samples of ``cache warm``: ``NodeCache.revocation_totals()``, the applied cursor, and whether
    the event stream is failing (a refused token: revocations are not applied; alert on it)."""
    return [(f"modelreg_cache_{key}_total", {}, float(value)) for key, value in totals.items()] + [
        ("modelreg_cache_events_cursor", {}, float(cursor)),
        ("modelreg_cache_events_failing", {}, 1.0 if events_failing else 0.0)]


def fetch_samples(model: str, ref: str, outcome: str, timings: Mapping[str, float],
                  result: Mapping[str, Any] | None, now: float | None = None) -> list[tuple[str, dict, float]]:
    """The samples of one fetch: ``(name, labels, value)``.

    Args:
        outcome: ``ok``, or the failure's kind (``registry.client.errors.exit_code``).
        result: ``FetchResult.as_dict()`` of a fetch that succeeded, else None.
    """
    base = {"model": model, "ref": ref}
    samples = [("modelreg_fetch_phase_seconds", {**base, "phase": phase}, float(seconds))
               for phase, seconds in timings.items()]
    samples += [
        ("modelreg_fetch_success", base, 1.0 if outcome == "ok" else 0.0),
        ("modelreg_fetch_outcome", {**base, "outcome": outcome}, 1.0),
        ("modelreg_fetch_timestamp_seconds", base, time.time() if now is None else now),
    ]
    if result is not None:
        samples += [
            ("modelreg_fetch_version", base, float(result["version"])),
            ("modelreg_fetch_serial", base, float(result["serial"])),
            ("modelreg_fetch_release_bytes", base, float(result["bytes"])),
            ("modelreg_fetch_downloaded_bytes", base, float(result["downloaded_bytes"])),
            ("modelreg_fetch_files", {**base, "source": "downloaded"}, float(result["downloaded_files"])),
            ("modelreg_fetch_files", {**base, "source": "cached"}, float(result["cached_files"])),
        ]
    return samples


def render(samples: list[tuple[str, dict, float]]) -> str:
    """The text exposition of ``samples``, each metric's HELP and TYPE once, before its samples."""
    lines: list[str] = []
    seen: set[str] = set()
    for name, labels, value in sorted(samples, key=lambda s: list(_HELP).index(s[0])):
        if name not in seen:
            kind, help_text = _HELP[name]
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            seen.add(name)
        inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
        lines.append(f"{name}{{{inner}}} {value!r}" if inner else f"{name} {value!r}")
    return "\n".join(lines) + "\n"


def write_textfile(path: Path, samples: list[tuple[str, dict, float]]) -> None:
    """Write ``samples`` to ``path`` atomically (a temporary file in the same directory, renamed over it)."""
    path = Path(path)
    # 0644: the node exporter runs as another user.
    statefile.write_atomic(path, render(samples).encode(), mode=0o644)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
