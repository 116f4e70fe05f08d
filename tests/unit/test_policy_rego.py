"""The Rego tests beside the policies (policies/*_test.rego), run through regopy in `make test`.

Every ``test_`` rule of every test module is one pytest case; it passes when the rule is true.
(rego-cpp reports a false rule as undefined, so anything but ``true`` fails.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from registry.policy import PolicyEngine, default_policy_dir

POLICY_DIR = default_policy_dir()
_PACKAGE_RE = re.compile(r"^package\s+([\w.]+)", re.MULTILINE)
_TEST_RE = re.compile(r"^(test_\w+)\s+if\b", re.MULTILINE)


def _rego_tests() -> list[tuple[Path, str, str]]:
    cases = []
    for path in sorted(POLICY_DIR.glob("*_test.rego")):
        source = path.read_text()
        package = _PACKAGE_RE.search(source)
        assert package, f"{path.name} has no package"
        cases += [(path, package.group(1), name) for name in _TEST_RE.findall(source)]
    return cases


CASES = _rego_tests()


def test_every_policy_has_rego_tests():
    tested = {path.name.removesuffix("_test.rego") for path, _, _ in CASES}
    policies = {p.stem for p in POLICY_DIR.glob("*.rego") if not p.name.endswith("_test.rego")}
    assert policies and policies <= tested


@pytest.mark.parametrize(("path", "package", "rule"), CASES, ids=[f"{p.stem}::{r}" for p, _, r in CASES])
def test_rego(path: Path, package: str, rule: str):
    engine = PolicyEngine.from_directory(POLICY_DIR)
    assert engine.load_error is None
    rego = engine.interpreter({path.name: path.read_text()})
    output = rego.query(f"data.{package}.{rule}")
    assert output.ok(), str(output)
    assert output.results and output.results[0].expressions == [True], f"{rule} is {output}"
