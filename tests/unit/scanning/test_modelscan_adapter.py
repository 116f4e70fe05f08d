"""modelscan as a second opinion: recorded faithfully, and shown not to be enough on its own."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np

from registry.scanning import Severity, Verdict, scan_stream
from registry.scanning.modelscan_adapter import modelscan_version, scan_file_with_modelscan, scan_path_with_modelscan
from tests.support import scan_samples as S


def test_directory_scan_records_issues_errors_and_versions(tmp_path: Path) -> None:
    (tmp_path / "payload.pkl").write_bytes(S.reduce_pickle())
    (tmp_path / "arr.npy").write_bytes(S.npy(np.arange(4, dtype=np.float32)))
    (tmp_path / "README.md").write_bytes(b"# hi\n")
    scans = {s.path: s for s in scan_path_with_modelscan(tmp_path, {"payload.pkl": "pickle"})}
    assert set(scans) == {"payload.pkl", "arr.npy", "README.md"}
    for s in scans.values():
        assert (s.scanner, s.scanner_version) == ("modelscan", modelscan_version())
    payload = scans["payload.pkl"]
    assert payload.verdict is Verdict.UNSAFE and payload.format == "pickle"
    assert payload.findings[0].rule_id == "modelscan.critical"
    assert "getcwd" in payload.findings[0].location
    # With numpy 2 modelscan's .npy scanner fails: that is an error, never a clean result.
    assert scans["arr.npy"].verdict is Verdict.ERROR
    assert any(f.rule_id == "modelscan.error" and f.severity is Severity.ERROR for f in scans["arr.npy"].findings)
    assert scans["README.md"].verdict is Verdict.SAFE


def test_blob_without_extension_is_shown_under_the_sniffed_format(tmp_path: Path) -> None:
    blob = tmp_path / "ab" / ("cd" * 32)
    blob.parent.mkdir()
    blob.write_bytes(S.reduce_pickle())
    assert scan_file_with_modelscan(blob, name="model.bin").verdict is Verdict.SAFE  # .bin: no pickle read
    scan = scan_file_with_modelscan(blob, name="model.bin", fmt="pickle")
    assert scan.path == "model.bin" and scan.verdict is Verdict.UNSAFE
    assert scan.findings[0].location.startswith("model.bin ")


def test_modelscan_misses_bypasses_that_we_flag(tmp_path: Path) -> None:
    # Why modelscan never decides alone: deny-list bypasses and disguised containers pass it.
    missed = []
    for sample in ("pip_main", "cprofile_run", "uuid_get_command_stdout", "gzip_pickle_joblib", "sevenz_signature_pt"):
        name, data, _ = S.MALICIOUS[sample]()
        path = tmp_path / sample / name
        path.parent.mkdir()
        path.write_bytes(data)
        ours = scan_stream(name, io.BytesIO(data), len(data))
        assert ours.verdict in (Verdict.UNSAFE, Verdict.SUSPICIOUS)
        # An error is not a detection either: it says nothing about the payload.
        if scan_file_with_modelscan(path, name=name).verdict not in (Verdict.UNSAFE, Verdict.SUSPICIOUS):
            missed.append(sample)
    assert {"pip_main", "cprofile_run", "gzip_pickle_joblib"} <= set(missed), missed


def test_a_scan_in_a_child_process_records_what_one_in_process_does(tmp_path: Path) -> None:
    blob = tmp_path / ("ef" * 32)
    blob.write_bytes(S.reduce_pickle())
    here = scan_file_with_modelscan(blob, name="model.bin", fmt="pickle", isolated=False)
    there = scan_file_with_modelscan(blob, name="model.bin", fmt="pickle", isolated=True)
    assert there.as_dict() == here.as_dict() and there.verdict is Verdict.UNSAFE
    gone = scan_file_with_modelscan(tmp_path / "missing", name="gone.pkl", fmt="pickle", isolated=True)
    assert gone.verdict is Verdict.ERROR and gone.findings[0].rule_id == "modelscan.error"


def test_a_process_that_judged_a_version_scans_with_modelscan_and_never_imports_tensorflow(tmp_path: Path) -> None:
    # TensorFlow imported after regopy aborts the process (free(): invalid pointer); modelscan imports it.
    # A worker loads the policy (regopy) and then scans: the scan must go to a child, this process must live
    # and stay without TensorFlow (whose import costs every registry process seconds where it is installed).
    (tmp_path / "evil.pkl").write_bytes(S.reduce_pickle())
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from registry.policy import PolicyEngine, default_policy_dir\n"
        "PolicyEngine.from_directory(default_policy_dir())\n"
        "from registry.scanning.modelscan_adapter import scan_file_with_modelscan\n"
        f"scan = scan_file_with_modelscan(Path({str(tmp_path / 'evil.pkl')!r}), fmt='pickle')\n"
        "print(scan.verdict.value, 'tensorflow' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["unsafe", "False"]


def _child_imports_tensorflow(path: Path, fmt: str | None) -> tuple[dict, bool]:
    """The child's result for ``path`` and whether it imported TensorFlow (``python -m`` as the adapter runs it)."""
    script = (
        "import runpy, sys\n"
        "runpy.run_module('registry.scanning.modelscan_adapter', run_name='__main__')\n"
        "print(sys.modules.get('tensorflow') is not None, file=sys.stderr)\n"
    )
    request = f'{{"path": "{path}", "name": "{path.name}", "format": {"null" if fmt is None else repr(fmt)}}}'
    done = subprocess.run([sys.executable, "-c", script], input=request.replace("'", '"'), capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    return json.loads(done.stdout), done.stderr.strip().splitlines()[-1] == "True"


def test_the_child_imports_tensorflow_only_for_a_file_a_tensorflow_scanner_may_take(tmp_path: Path) -> None:
    # TensorFlow costs the child about 4 s of CPU; modelscan uses it for .pb, .keras, .h5 and zip members only.
    blob = tmp_path / ("ab" * 32)
    blob.write_bytes(S.reduce_pickle())
    result, imported = _child_imports_tensorflow(blob, "pickle")
    assert not imported and result["findings"] and result["findings"][0]["severity"] == "unsafe", result
    keras = tmp_path / "model.keras"
    keras.write_bytes(b"not a zip")
    _, imported = _child_imports_tensorflow(keras, None)
    assert imported
