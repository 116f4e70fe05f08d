"""The smoke runs of the benchmarks in bench/: each script with tiny sizes, and what its output must hold.

Three test modules share them out (``tests/e2e/test_bench_smoke*.py``, one ``GROUPS`` entry each), so that
the longest of the suite's files is not one worker's tail; ``tests/e2e/test_bench_smoke.py`` checks that
every script has an entry and a group.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"

SMOKE: dict[str, tuple[list[str], list[str]]] = {
    # script: (tiny arguments, patterns its output must hold: the figures it exists to print)
    "admission.py": (["--rate", "20", "--seconds", "1", "--connections", "2", "--rounds", "1"],
                     [*(rf"round 1 {scenario}\s*: 20 reviews at [\d.]+/s: p50 [\d.]+ ms, p99 [\d.]+ ms, "
                        rf"max [\d.]+ ms, errors 0, over 5 s \d+, p99/floor [\d.]+x"
                        for scenario in ("floor", "live", "cache")),
                      r"round 1: load average [\d. ]+ -> [\d. ]+"]),
    "bom.py": (["--files", "200", "--rounds", "1"],
               [r"a version of 205 files",
                r"round 1: old [\d.]+ s, new [\d.]+ s, old/new [\d.]+x \([\d.]+ MB, identical\)"]),
    "chunks.py": (["--mib", "8", "--rounds", "1"],
                  [r"round 1: 8 MiB  plain [\d.]+ s wall [\d.]+ s cpu  \|  tap [\d.]+ s wall [\d.]+ s cpu  \|  "
                   r"ratio wall [\d.]+x, cpu [\d.]+x"]),
    "fanout.py": (["--n", "8", "--rounds", "1", "--settle", "1", "--window", "1", "--tokens", "2"],
                  [r"round 1 stream  N=8: all new manifests in [\d.]+ s .*8 answered, 0 missed",
                   r"round 1 polling N=8: all new manifests in [\d.]+ s .*8 answered, 0 missed",
                   r"round 1: time to all [\d.]+x"]),
    "fetch.py": (["--size-gb", "0.02", "--shards", "2", "--parallel", "2", "--rounds", "1", "--verify-runs", "1"],
                 [r"round 1: raw [\d.]+ s before", r"cold/raw [\d.]+", r"ratio of medians [\d.]+"]),
    "log.py": (["--events", "600", "--appends", "40", "--rounds", "1", "--requests", "5"],
               [r"baseline audit.append: \d+ events/s one event per transaction",
                r"round 1: integrated 600 events in [\d.]+ s: \d+ events/s, [\d.]+x audit.append; inclusion p50 "
                r"[\d.]+ ms p99 [\d.]+ ms; consistency p50 [\d.]+ ms p99 [\d.]+ ms; tiles [\d.]+ B/event"]),
    "manifest.py": (["--clients", "4", "--requests", "2", "--interval", "0.05", "--rounds", "1"],
                    [r"round 1: 8 requests in [\d.]+ s .*p99 [\d.]+ ms.* errors 0"]),
    "mirror.py": (["--size-gb", "0.02", "--shards", "2", "--rounds", "1", "--seal-repetitions", "2",
                   "--part-size-mib", "5"],
                  [r"round 1: modelreg [\d.]+ s", r"ratio \(best/best\): [\d.]+", r"seal_version \(3 files, 2 runs\)"]),
    "oci.py": (["--size", "4M", "--rounds", "1"],
               [r"round 1: skopeo modelreg/reference [\d.]+ .*oras-py/raw GETs [\d.]+",
                r"skopeo copy from modelreg\s+[\d.]+ s\s+API RSS\s+[\d.]+ -> peak\s+[\d.]+ MiB"]),
    "oci_referrers.py": (["--versions", "2", "--requests", "10", "--rounds", "1"],
                         [r"round 1: miss p50 [\d.]+ ms, hit p50 [\d.]+ ms, miss/hit [\d.]+x \(5 misses, 5 hits\)"]),
    "policy.py": (["--decisions", "5", "--rounds", "1"],
                  [r"round 1: 5 promotion decisions, compiled each time [\d.]+ ms CPU, kept plan [\d.]+ ms CPU, "
                   r"old/new [\d.]+x \(same decision: \w+\)"]),
    "queue.py": (["--jobs", "40", "--workers", "2"],
                 [r"modelreg\s+2 process\(es\):\s+[\d.]+ s", r"modelreg x2 / raw UPDATE\.\.\.RETURNING x2: [\d.]+"]),
    "receipts.py": (["--nodes", "20", "--every", "1", "--rounds", "1", "--tokens", "2", "--alert-timeout", "60"],
                    [r"round 1: 20/20 reports answered in [\d.]+ s \(p50 \d+ ms, p99 \d+ ms; failures \{\}\); API CPU "
                     r"[\d.]+% of a core; database [\d.]+ transactions/s, [\d.]+ rows written/s",
                     r"revoke v1 \(in-process, [\d.]+ s to commit\) -> 20/20 version.still_running events at the "
                     r"receiver; the last [\d.]+ s after the commit"]),
    "scan.py": (["--many-files", "4,8"],
                [r"\(a\) 2 GiB safetensors .* ms", r"bypass samples flagged: modelreg \d+/\d+",
                 r"\(d\) regression set: \d+ files",
                 r"round 1 distinct N=\s+8: scan stage\s+[\d.]+ s,\s+[\d.]+ ms per file, "
                 r"8 scan jobs, ended awaiting_approval",
                 r"round 1 one blob N=\s+8: scan stage\s+[\d.]+ s,\s+[\d.]+ ms per file, "
                 r"1 scan jobs, ended awaiting_approval"]),
    "stream.py": (["--size", "24M", "--rounds", "1"],
                  [r"round 1: cold/direct [\d.]+ .*warm/direct [\d.]+ .*every sha256 equal",
                   r"\(b\) serve-s3 cold\s+[\d.]+ s .*serve-s3 cpu\s+[\d.]+ s\s+serve-s3 RSS\s+[\d.]+ -> peak\s+"
                   r"[\d.]+ MiB"]),
}

GROUPS: dict[str, list[str]] = {
    # What serving nodes run against (the longest: each starts a registry and node programs).
    "node": ["fanout.py", "fetch.py", "stream.py"],
    # The registry's own endpoints.
    "registry": ["admission.py", "log.py", "manifest.py", "oci.py", "oci_referrers.py", "policy.py", "receipts.py"],
    # The pipeline and its storage.
    "pipeline": ["bom.py", "chunks.py", "mirror.py", "queue.py", "scan.py"],
}


def scripts() -> list[str]:
    """Every benchmark script in bench/."""
    return sorted(p.name for p in BENCH.glob("*.py"))


def run_smoke(script: str) -> None:
    """Run ``script`` with its tiny arguments; fail unless it ends with 0 and prints its figures."""
    args, patterns = SMOKE[script]
    env = dict(os.environ, HF_HUB_DISABLE_TELEMETRY="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, str(BENCH / script), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{output[-4000:]}"
    for pattern in patterns:
        assert re.search(pattern, proc.stdout), f"{script} did not print {pattern!r}:\n{proc.stdout[-4000:]}"
