"""Every repository path the README and the docs name exists, none points outside, and no docstring names a
missing document."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import source_tree

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", "docs/architecture.md", "docs/scanning.md", "docs/signing.md", "docs/hub-protocol.md"]
TOP = ("registry/", "api/", "workers/", "tests/", "docs/", "migrations/", "policies/", "bench/", "deploy/")
# A path-looking token: a top-level directory of the repository, then path characters.
PATH_RE = re.compile(r"(?<![\w./-])((?:%s)[\w./-]*)" % "|".join(re.escape(t) for t in TOP))


def named_paths(text: str) -> set[str]:
    return {m.group(1).rstrip(".,") for m in PATH_RE.finditer(text)}


@pytest.mark.parametrize("doc", DOCS)
def test_every_named_path_exists(doc: str) -> None:
    text = (ROOT / doc).read_text()
    paths = named_paths(text)
    assert paths, f"{doc} names no path: the pattern is broken"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert missing == []


@pytest.mark.parametrize("doc", DOCS)
def test_no_doc_points_outside_the_repository(doc: str) -> None:
    assert "../" not in (ROOT / doc).read_text()


def test_the_pattern_finds_paths() -> None:
    found = named_paths("see `registry/jobs.py`, and docs/adr/, not xregistry/a")
    assert found == {"registry/jobs.py", "docs/adr/"}


DOC_RE = re.compile(r"(?<![\w./-])(docs/[\w./-]+\.md)")


def test_every_document_a_module_names_exists() -> None:
    """A docstring or comment that points at ``docs/...`` points at a file this repository holds."""
    missing = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for package in ("registry", "api", "workers", "tests", "bench")
        for path in source_tree.python_files(package)
        for name in DOC_RE.findall(source_tree.text(path))
        if not (ROOT / name).exists()
    )
    assert missing == []


def test_the_architecture_page_names_every_service_module() -> None:
    text = (ROOT / "docs/architecture.md").read_text()
    modules = sorted(p.stem for p in (ROOT / "registry/services").glob("*.py") if p.stem != "__init__")
    assert [m for m in modules if f"registry/services/{m}.py" not in text] == []


def test_the_docs_index_lists_every_topic_doc_and_the_adr_index_every_adr() -> None:
    """docs/README.md links each docs/*.md; docs/adr/README.md links each ADR file."""
    docs_index = (ROOT / "docs/README.md").read_text()
    adr_index = (ROOT / "docs/adr/README.md").read_text()
    assert [p.name for p in sorted((ROOT / "docs").glob("*.md"))
            if p.name != "README.md" and f"]({p.name})" not in docs_index] == []
    assert [p.name for p in sorted((ROOT / "docs/adr").glob("0*.md")) if f"]({p.name})" not in adr_index] == []


def test_the_readme_links_the_docs_a_user_needs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert [d for d in ("docs/README.md", "docs/events.md", "docs/webhooks.md", "docs/scanning.md",
                        "docs/signing.md", "docs/architecture.md") if d not in readme] == []
    audit = readme[readme.index("\n## Audit"):readme.index("\n## ", readme.index("\n## Audit") + 1)]
    assert "verifiable" in audit and "docs/adr/0011-verifiable-log.md" in audit
