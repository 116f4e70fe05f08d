"""Scan benchmark: our engine against modelscan on the same files, in the same run.

Builds, in a temporary directory, a mixed sample directory (every bypass sample and ordinary file
of ``tests/support/scan_samples.py`` plus a torch state dict of a few MB) and a sparse 2 GB
safetensors file (a valid header; the data section is a hole, which is all a header validator
reads). Prints:

(a) the scan time of the 2 GB safetensors file with our engine;
(b) our time on the mixed directory against modelscan's Python API and its CLI, as ratios;
(c) a detection table: which samples each scanner flagged;
(d) the scanner's regression set (the library-written benign corpus of
    ``tests/support/benign_corpus.py`` and the peer-scanner families of
    ``tests/support/peer_families.py``): misses and false positives of both scanners on the same
    files. A miss is an attack left ``safe`` (or, for modelscan, errored on); a false positive is a
    benign file not left ``safe``.

(e) the scan stage of the pipeline on versions of many files (``--many-files 1000,3000,10000``): a
    migrated SQLite database, a local blob store, a version of N distinct small files submitted,
    mirrored and sealed, then its ``scan_blob`` jobs run by a worker in this process until the version
    is decided; printed per size: the seconds and the time per file (linear when it stays flat), and the
    same for one blob listed under N paths (one scan).

Run: ``.venv/bin/python bench/scan.py`` (``--regression-only`` runs only (d), ``--many-files-only`` only
(e); ``--many-files 10,20`` sets (e)'s sizes, ``--cases`` and ``--rounds`` its cases and rounds, ``--tmp-dir`` where its
databases and blobs go).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The script's own directory comes first on sys.path and holds bench/queue.py, which would shadow
# the standard library's queue module (torch imports it): put the repository root there instead.
sys.path[0] = str(Path(__file__).resolve().parents[1])

from registry.scanning import Verdict, scan_directory, scan_file  # noqa: E402 (after sys.path[0] is set)
from registry.scanning.modelscan_adapter import scan_path_with_modelscan  # noqa: E402 (after sys.path[0] is set)
from tests.support import format_samples as F  # noqa: E402 (after sys.path[0] is set)
from tests.support import scan_samples as S  # noqa: E402 (after sys.path[0] is set)
from tests.support.benign_corpus import build_all  # noqa: E402 (after sys.path[0] is set)
from tests.support.peer_families import FAMILIES  # noqa: E402 (after sys.path[0] is set)

BY_DESIGN = {"torch_jit_save_scripted"}
"""Benign corpus samples meant ``suspicious`` (TorchScript is code: see test_benign_corpus.py)."""

FLAGGED = (Verdict.UNSAFE, Verdict.SUSPICIOUS)


def build_mixed(root: Path) -> dict[str, tuple[str, str]]:
    """Write every sample as ``<sample>/<file name>``; returns rel path -> (sample, expected)."""
    expected: dict[str, tuple[str, str]] = {}
    for sample, build in S.MALICIOUS.items():
        name, data, want = build()
        rel = f"{sample}/{name}"
        (root / sample).mkdir()
        (root / rel).write_bytes(data)
        expected[rel] = (sample, want)
    for sample, build in S.ORDINARY.items():
        name, data = build()
        rel = f"{sample}/{name}"
        (root / sample).mkdir()
        (root / rel).write_bytes(data)
        expected[rel] = (sample, "safe")
    for sample, name, data, want in _format_samples(root):
        rel = f"{sample}/{name}"
        (root / sample).mkdir(exist_ok=True)
        (root / rel).write_bytes(data)
        expected[rel] = (sample, want)
    (root / "big_state_dict").mkdir()
    (root / "big_state_dict/pytorch_model.bin").write_bytes(S.torch_zip(S.torch_state_dict(mb=6)))
    expected["big_state_dict/pytorch_model.bin"] = ("big_state_dict", "safe")
    return expected


def _format_samples(root: Path) -> list[tuple[str, str, bytes, str]]:
    """The formats modelscan does not open (safetensors, GGUF, ONNX, Keras, configs), ordinary and not."""
    scratch = Path(tempfile.mkdtemp(dir=root.parent))
    template_name, evil_template = next(iter(F.MALICIOUS_CHAT_TEMPLATES.items()))
    lambda_cfg = F.keras_sequential_config()
    lambda_cfg["config"]["layers"].append(F.keras_lambda_layer())
    samples = [
        ("safetensors_ordinary", "model.safetensors", F.safetensors_ordinary(), "safe"),
        ("safetensors_all_dtypes", "model.safetensors", F.safetensors_torch_all_dtypes(), "safe"),
        ("safetensors_header_hole", "model.safetensors",
         F.safetensors_raw({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}, bytes(4) + S.pip_main()),
         "unsafe"),
        ("gguf_ordinary_llama3", "model.gguf",
         F.gguf_llama_realistic(scratch / "a.gguf", chat_template=F.CHAT_TEMPLATE_LLAMA3).read_bytes(), "safe"),
        (template_name, "model.gguf",
         F.gguf_llama_realistic(scratch / "b.gguf", chat_template=evil_template).read_bytes(), "unsafe"),
        ("onnx_ordinary", "model.onnx", F.onnx_model(), "safe"),
        ("onnx_external_data_path_traversal", "model.onnx", F.onnx_model(external="../../etc/passwd"), "unsafe"),
        ("keras_ordinary", "model.keras", F.keras_archive(F.keras_sequential_config()), "safe"),
        ("keras_lambda_layer_cve_2024_3660", "model.keras", F.keras_archive(lambda_cfg), "unsafe"),
        ("tokenizer_config_ordinary", "tokenizer_config.json", json.dumps(F.tokenizer_config()).encode(), "safe"),
        ("tokenizer_config_template_ssti", "tokenizer_config.json",
         json.dumps(F.tokenizer_config(chat_template=evil_template)).encode(), "unsafe"),
    ]
    shutil.rmtree(scratch, ignore_errors=True)
    return samples


def build_sparse_safetensors(path: Path, size: int = 2 << 30) -> None:
    """A valid safetensors header describing one U8 tensor that fills the file; data is a hole."""
    hlen = 0
    for _ in range(4):
        n = size - 8 - hlen
        header = json.dumps({"__metadata__": {"format": "pt"},
                             "weight": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}})
        raw = header.encode()
        raw += b" " * (-len(raw) % 8)
        if len(raw) == hlen:
            break
        hlen = len(raw)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        f.truncate(size)


def build_regression(root: Path) -> dict[str, tuple[str, str]]:
    """Write the benign corpus and the peer families under ``root``; rel path -> (kind, wanted verdict).

    ``kind`` is ``attack``, ``benign`` or ``by-design`` (benign files meant ``suspicious``).
    """
    expected: dict[str, tuple[str, str]] = {}
    (root / "benign").mkdir()
    for sample, d in build_all(root / "benign").items():
        for p in sorted(d.rglob("*")):
            if p.is_file():
                by_design = sample in BY_DESIGN
                expected[p.relative_to(root).as_posix()] = ("by-design" if by_design else "benign",
                                                            "suspicious" if by_design else "safe")
    for name, fam in FAMILIES.items():
        d = root / "families" / name
        d.mkdir(parents=True)
        (d / fam.filename).write_bytes(fam.build())
        kind = "attack" if fam.attack else ("benign" if fam.want == "safe" else "by-design")
        expected[f"families/{name}/{fam.filename}"] = (kind, fam.want)
    return expected


def regression(tmp: Path) -> None:
    """(d): misses and false positives of modelreg and modelscan on the regression set."""
    root = tmp / "regression"
    root.mkdir()
    t = time.perf_counter()
    expected = build_regression(root)
    t_build = time.perf_counter() - t
    ours: dict[str, Verdict] = {}
    t = time.perf_counter()
    for top in sorted(root.iterdir()):
        for sample in sorted(top.iterdir()):
            # One version per sample directory: each file knows its siblings (ONNX external data).
            for scan in scan_directory(sample):
                ours[f"{sample.relative_to(root).as_posix()}/{scan.path}"] = scan.verdict
    t_ours = time.perf_counter() - t
    t = time.perf_counter()
    theirs = {s.path: s.verdict for s in scan_path_with_modelscan(root)}
    t_ms = time.perf_counter() - t
    kinds = {k: sum(v[0] == k for v in expected.values()) for k in ("attack", "benign", "by-design")}
    print(f"\n(d) regression set: {len(expected)} files built in {t_build:.1f} s: {kinds['attack']} attacks, "
          f"{kinds['benign']} benign, {kinds['by-design']} suspicious by design")
    for label, got, secs in (("modelreg", ours, t_ours), ("modelscan", theirs, t_ms)):
        misses = sorted(p for p, (k, _) in expected.items()
                        if k == "attack" and got.get(p, Verdict.SAFE) not in FLAGGED)
        fps = sorted(p for p, (k, _) in expected.items()
                     if k == "benign" and got.get(p, Verdict.SAFE) is not Verdict.SAFE)
        errors = sum(got.get(p) is Verdict.ERROR for p in expected)
        exact = sum(got.get(p, Verdict.SAFE).value == want for p, (_, want) in expected.items())
        print(f"    {label:10s} misses {len(misses):3d}/{kinds['attack']}  "
              f"false positives {len(fps):3d}/{kinds['benign']}  "
              f"errors {errors:3d}  verdict as meant {exact}/{len(expected)}  ({secs:.1f} s)")
        for p in (misses + fps)[:8] if label == "modelreg" else []:
            print(f"        {p}: {got.get(p, Verdict.SAFE).value}, meant {expected[p][1]}")


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def many_files(tmp: Path, sizes: list[int], rounds: int, cases: list[str]) -> None:
    """(e): the pipeline's scan stage on versions of ``sizes`` files, distinct blobs and one blob."""
    from pydantic import SecretStr

    from registry.bootstrap import bootstrap
    from registry.db.models import Version
    from registry.jobs import JobKind
    from registry.services import versions
    from registry.services.versions import SubmitRequest
    from registry.settings import Settings
    from registry.signing.keys import SigningKey
    from tests.support.registry import make_admin
    from workers.handler_registry import HandlerRegistry
    from workers.handlers import build_handlers
    from workers.loop import Worker

    handlers = build_handlers()
    scanning = HandlerRegistry([handlers.get(JobKind.SCAN_BLOB.value)])
    others = HandlerRegistry([handlers.get(k) for k in handlers.kinds() if k != JobKind.SCAN_BLOB.value])
    pem = SigningKey.generate().private_pem().decode()
    print(f"\n(e) scan stage of a version of N files (SQLite, local blobs, 1 worker), load {os.getloadavg()[0]:.2f}")
    for round_index in range(rounds):
        for case in cases:
            for n in sizes:
                work = tmp / f"many-{round_index}-{case.replace(' ', '-')}-{n}"
                model = work / "model"
                model.mkdir(parents=True)
                for i in range(n):
                    path = model / f"shards/{i // 1000:03d}/part-{i:05d}.bin"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    # A small torch-style pickle: distinct bytes per file, or the same bytes under every path.
                    path.write_bytes(pickle.dumps({"shard": i if case == "distinct" else 0}, protocol=2))
                settings = Settings(data_dir=work / "data", database_url=f"sqlite:///{work / 'registry.db'}",
                                    blob_store_url=(work / "blobs").as_uri(), signing_key_pem=SecretStr(pem),
                                    local_source_roots=[tmp], max_files_per_version=max(n, 10_000))
                container = bootstrap(settings, migrate=True)
                try:
                    admin = make_admin(container, "bench")
                    with container.session_factory() as session:
                        version, _ = versions.submit(session, admin, "bench", "many", SubmitRequest(source=str(model)),
                                                     open_source=container.open_source, limits=container.limits(),
                                                     ports=container.ports)
                        version_id = version.id
                    started = time.perf_counter()
                    worker = Worker(container, others, worker_id="bench-pipeline")
                    while worker.run_once():
                        pass
                    t_mirror = time.perf_counter() - started
                    started = time.perf_counter()
                    worker = Worker(container, scanning, worker_id="bench-scan")
                    jobs = 0
                    while worker.run_once():
                        jobs += 1
                    t_scan = time.perf_counter() - started
                    with container.session_factory() as session:
                        state = session.get(Version, version_id).state
                finally:
                    container.dispose()
                    shutil.rmtree(work, ignore_errors=True)
                print(f"    round {round_index + 1} {case:8s} N={n:6d}: scan stage {t_scan:7.2f} s, "
                      f"{t_scan / n * 1000:6.2f} ms per file, {jobs} scan jobs, ended {state} "
                      f"(mirror+seal {t_mirror:.1f} s), load {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--regression-only", action="store_true", help="only (d)")
    parser.add_argument("--many-files-only", action="store_true", help="only (e)")
    parser.add_argument("--many-files", default="1000,3000,10000", help="(e): comma-separated file counts")
    parser.add_argument("--rounds", type=int, default=1, help="(e): rounds")
    parser.add_argument("--cases", default="distinct,one blob", help="(e): 'distinct', 'one blob' or both")
    parser.add_argument("--tmp-dir", help="where the temporary files go (e.g. /dev/shm: no disk syncs)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="modelreg-bench-scan-", dir=args.tmp_dir))
    try:
        if not (args.regression_only or args.many_files_only):
            mixed_dir(tmp)
        if not args.many_files_only:
            regression(tmp)
        if not args.regression_only:
            many_files(tmp, [int(n) for n in args.many_files.split(",")], args.rounds, args.cases.split(","))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def mixed_dir(tmp: Path) -> None:
    """(a)-(c): the 2 GiB safetensors file and the mixed directory, timed and compared."""
    mixed = tmp / "mixed"
    mixed.mkdir()
    expected = build_mixed(mixed)
    st = tmp / "big" / "model.safetensors"
    st.parent.mkdir()
    build_sparse_safetensors(st)

    scan_file(st)  # warm imports
    t_st, st_scan = timed(lambda: scan_file(st), repeat=5)
    print(f"(a) 2 GiB safetensors ({st.stat().st_size} bytes, sparse): {t_st * 1000:.1f} ms, "
          f"format={st_scan.format} verdict={st_scan.verdict.value}")

    t_ours, ours = timed(lambda: scan_directory(mixed))
    t_ms, theirs = timed(lambda: scan_path_with_modelscan(mixed))
    report = tmp / "modelscan.json"
    cli = shutil.which("modelscan") or str(Path(sys.executable).parent / "modelscan")
    t = time.perf_counter()
    proc = subprocess.run([cli, "-p", str(mixed), "-r", "json", "-o", str(report)], capture_output=True, text=True)
    t_cli = time.perf_counter() - t
    n = len(expected)
    print(f"(b) mixed directory, {n} files, {sum(p.stat().st_size for p in mixed.rglob('*') if p.is_file())} bytes:")
    print(f"    modelreg engine     {t_ours * 1000:8.1f} ms")
    print(f"    modelscan (API)     {t_ms * 1000:8.1f} ms   ratio modelscan/modelreg = {t_ms / t_ours:.2f}")
    print(f"    modelscan (CLI)     {t_cli * 1000:8.1f} ms   ratio modelscan/modelreg = {t_cli / t_ours:.2f}  "
          f"(exit {proc.returncode})")

    ours_by = {s.path: s for s in ours}  # type: ignore[union-attr]
    theirs_by = {s.path: s for s in theirs}  # type: ignore[union-attr]
    print("\n(c) detection (flagged = unsafe or suspicious; E = error)")
    print(f"    {'sample':44s} {'expected':10s} {'modelreg':10s} {'modelscan':10s}")
    stats = {"ours_hit": 0, "ms_hit": 0, "bad": 0, "ours_fp": 0, "ms_fp": 0, "good": 0}
    for rel, (sample, want) in sorted(expected.items(), key=lambda kv: (kv[1][1] == "safe", kv[1][0])):
        o = ours_by[rel].verdict
        m = theirs_by[rel].verdict if rel in theirs_by else Verdict.SAFE
        if want == "safe":
            stats["good"] += 1
            stats["ours_fp"] += o is not Verdict.SAFE
            stats["ms_fp"] += m is not Verdict.SAFE
        else:
            stats["bad"] += 1
            stats["ours_hit"] += o in FLAGGED
            stats["ms_hit"] += m in FLAGGED
        print(f"    {sample:44s} {want:10s} {o.value:10s} {m.value:10s}")
    print(
        f"\n    bypass samples flagged: modelreg {stats['ours_hit']}/{stats['bad']}, "
        f"modelscan {stats['ms_hit']}/{stats['bad']}"
    )
    print(
        f"    ordinary files not safe: modelreg {stats['ours_fp']}/{stats['good']}, "
        f"modelscan {stats['ms_fp']}/{stats['good']} (modelscan errors count here)"
    )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
