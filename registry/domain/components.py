"""The release unit's components: which part of a model each file (or part of a file) is, and their digests.

A version is one release unit. Its files fall into components: ``weights``, ``tokenizer``,
``chat_templates``, ``generation_config``, ``config``, ``prompt_templates``, ``serving_profile`` and
``other``. :data:`FILE_RULES` is the one table that classifies a file by its path. Two kinds of file hold
more than one component, and are split into *parts* read from their content when the version is sealed
(``registry/domain/parts.py``):

- ``tokenizer_config.json``: its ``chat_template`` (a string, or named templates) belongs to
  ``chat_templates``; the rest of the document (canonical JSON without that key) to ``tokenizer``.
- a GGUF file: the whole file is ``weights``; its ``tokenizer.chat_template*`` metadata values are also
  ``chat_templates`` members (a template edited inside a GGUF changes both).

A part is a member named ``PATH#PART``. When a file that would be split has no recorded parts (facts
recorded before parts were, or a file that could not be read), it is counted whole in every component it
may hold, so a change to it is never missed (fail closed).

A component's digest is the sha256 of its members' lines ``<sha256>  <member>\\n`` sorted by member (the
``sha256sum`` format): the same parts give the same digest whatever the file order or version.

Example:
    >>> files = [FileEntry("model.safetensors", 8, "a" * 64), FileEntry("tokenizer.json", 2, "b" * 64),
    ...          FileEntry("README.md", 1, "c" * 64)]
    >>> [c.name for c in unit_components(files, {})]
    ['weights', 'tokenizer', 'other']
    >>> classify("additional_chat_templates/tools.jinja"), classify("model-00001-of-00002.safetensors")
    ('chat_templates', 'weights')
    >>> classify("prompts/support.jinja"), classify("serving-profile.json"), classify("prompts/a/b.jinja")
    ('prompt_templates', 'serving_profile', 'other')
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from registry.domain.files import WEIGHT_FORMATS, FileEntry
from registry.domain.serving_profile import ENGINE_CONFIG_FILES

COMPONENTS: tuple[str, ...] = ("weights", "tokenizer", "chat_templates", "generation_config", "config",
                               "prompt_templates", "serving_profile", "other")
"""Every component, in the order they are listed."""

TEMPLATE_COMPONENTS = frozenset({"chat_templates", "prompt_templates"})
"""Components whose change a security approval must review (they shape every prompt the model sees)."""

TOKENIZER_CONFIG = "tokenizer_config.json"
PROMPTS_DIR = "prompts/"
"""Registry-held prompt templates are ``prompts/NAME.jinja`` at the unit's root."""
PROMPT_SUFFIX = ".jinja"
SERVING_PROFILE = "serving-profile.json"
"""The unit's serving profile, at its root: the canonical JSON of ``registry.domain.serving_profile``."""
UNIT_FILE = "modelreg-unit.json"
"""What ``modelreg fetch`` writes beside the files: the release's components and digests (never a version file)."""
UNIT_CHAT_TEMPLATE_FILE = "modelreg-chat-template.jinja"
"""Where ``modelreg fetch`` writes the chat template a serving profile names, for the engine config to point at."""
NODE_WRITTEN_FILES: tuple[str, ...] = (UNIT_FILE, UNIT_CHAT_TEMPLATE_FILE, *sorted(ENGINE_CONFIG_FILES.values()))
"""Every name ``modelreg fetch`` may write beside a unit's files. Sealing adds them to the signed bundle's
``ignore_paths`` (so ``model_signing verify`` on DEST sees only the signed files) unless the version lists one
of them itself; a release carries its components (and a node writes these files) only for such a version."""

# (match, value, component): the first rule that matches a file's path decides. ``name`` matches the
# file's base name, ``suffix`` the end of its base name, ``dir`` a leading directory of its path, ``path``
# the whole path, ``prompt`` a ``.jinja`` file directly in that root directory.
FILE_RULES: tuple[tuple[str, str, str], ...] = (
    ("prompt", PROMPTS_DIR, "prompt_templates"),
    ("path", SERVING_PROFILE, "serving_profile"),
    ("dir", "additional_chat_templates/", "chat_templates"),
    ("name", "chat_template.jinja", "chat_templates"),
    ("name", "chat_template.json", "chat_templates"),
    ("name", "generation_config.json", "generation_config"),
    ("name", TOKENIZER_CONFIG, "tokenizer"),
    ("name", "tokenizer.json", "tokenizer"),
    ("name", "tokenizer.model", "tokenizer"),
    ("name", "special_tokens_map.json", "tokenizer"),
    ("name", "added_tokens.json", "tokenizer"),
    ("name", "vocab.json", "tokenizer"),
    ("name", "vocab.txt", "tokenizer"),
    ("name", "merges.txt", "tokenizer"),
    ("name", "spiece.model", "tokenizer"),
    ("name", "sentencepiece.bpe.model", "tokenizer"),
    ("name", "spm.model", "tokenizer"),
    ("suffix", ".tiktoken", "tokenizer"),
    ("name", "config.json", "config"),
    ("name", "params.json", "config"),
    ("name", "preprocessor_config.json", "config"),
    ("name", "processor_config.json", "config"),
    ("name", "quantize_config.json", "config"),
    ("name", "quant_config.json", "config"),
    ("suffix", ".safetensors.index.json", "weights"),
    ("suffix", ".bin.index.json", "weights"),
    *(("suffix", suffix, "weights") for suffix in WEIGHT_FORMATS),
)
"""How a file's path decides its component; a path no rule matches is ``other``."""

SPLIT_FILES: Mapping[str, tuple[str, ...]] = {TOKENIZER_CONFIG: ("tokenizer", "chat_templates")}
"""Base names of files whose parts go to several components, and those components."""
GGUF_SUFFIXES = (".gguf", ".gguf.part")
"""A GGUF file's chat templates are members of ``chat_templates`` as well."""

PART_COMPONENTS: tuple[tuple[str, str], ...] = (
    ("chat_template", "chat_templates"),
    ("tokenizer.chat_template", "chat_templates"),
    ("without_chat_template", "tokenizer"),
)
"""A part's name (or the name before its ``/``) and the component it belongs to."""


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def classify(path: str) -> str:
    """The component a file belongs to by its path (before any split into parts)."""
    base = _base(path)
    for kind, value, component in FILE_RULES:
        if ((kind == "name" and base == value) or (kind == "suffix" and base.endswith(value))
                or (kind == "dir" and (path.startswith(value) or f"/{value}" in path))
                or (kind == "path" and path == value)
                or (kind == "prompt" and path.startswith(value) and "/" not in path[len(value):]
                    and path.endswith(PROMPT_SUFFIX))):
            return component
    return "other"


def part_component(part: str) -> str | None:
    """The component a named part belongs to, or None for a part name this table does not know."""
    head = part.split("/", 1)[0]
    for name, component in PART_COMPONENTS:
        if head == name:
            return component
    return None


@dataclass(frozen=True, slots=True)
class Member:
    """One member of a component: a file, or a part of one, and its sha256."""

    path: str
    sha256: str
    part: str | None = None

    @property
    def name(self) -> str:
        """``path``, or ``path#part`` for a part."""
        return self.path if self.part is None else f"{self.path}#{self.part}"


@dataclass(frozen=True, slots=True)
class Component:
    """One component of a unit: its name, its digest and its members (sorted by name)."""

    name: str
    digest: str
    members: tuple[Member, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "digest": self.digest,
                "members": [{"name": m.name, "sha256": m.sha256} for m in self.members]}


def component_digest(members: Iterable[Member]) -> str:
    """The sha256 of the members' ``<sha256>  <name>`` lines, sorted by name."""
    lines = "".join(f"{m.sha256}  {m.name}\n" for m in sorted(members, key=lambda m: m.name))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def unit_components(files: Sequence[FileEntry], parts: Mapping[str, Any]) -> tuple[Component, ...]:
    """The components of a unit from its files and the parts recorded for its split files.

    Args:
        files: The version's files.
        parts: ``path -> {part name: sha256}`` as recorded at seal (``facts["parts"]``); a path absent
            (or not a mapping) has no recorded parts and counts whole wherever it may belong.

    Returns:
        The components that have members, in :data:`COMPONENTS` order.
    """
    members: dict[str, list[Member]] = {c: [] for c in COMPONENTS}
    for entry in files:
        component = classify(entry.path)
        recorded = parts.get(entry.path) if isinstance(parts, Mapping) else None
        split = SPLIT_FILES.get(_base(entry.path))
        if split is not None and not isinstance(recorded, Mapping):
            for name in split:
                members[name].append(Member(entry.path, entry.sha256))
            continue
        if split is None:
            members[component].append(Member(entry.path, entry.sha256))
        if isinstance(recorded, Mapping):
            for part, digest in sorted(recorded.items()):
                owner = part_component(part) if isinstance(part, str) else None
                if owner is not None and isinstance(digest, str):
                    members[owner].append(Member(entry.path, digest, part))
    return tuple(Component(name, component_digest(found), tuple(sorted(found, key=lambda m: m.name)))
                 for name, found in members.items() if found)


def components_map(components: Iterable[Component]) -> dict[str, str]:
    """``{component: digest}``: what a signed statement, a release and an eval record name."""
    return {c.name: c.digest for c in components}


@dataclass(frozen=True)
class ComponentChange:
    """How one component differs between two units: members added, removed and changed (by name)."""

    name: str
    status: str  # "changed", "added" (only the new unit has it) or "removed"
    old_digest: str | None
    new_digest: str | None
    added: tuple[Member, ...] = ()
    removed: tuple[Member, ...] = ()
    changed: tuple[Member, ...] = ()
    """Members of the new unit (``added``, ``changed``) and of the old one (``removed``)."""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "old_digest": self.old_digest,
                "new_digest": self.new_digest, "members_added": [m.name for m in self.added],
                "members_removed": [m.name for m in self.removed],
                "members_changed": [m.name for m in self.changed]}


@dataclass(frozen=True)
class ComponentDiff:
    """Which components differ between a unit and the one it replaces."""

    changes: tuple[ComponentChange, ...]
    unchanged: tuple[str, ...]

    @property
    def changed(self) -> tuple[str, ...]:
        """The names of the components that differ in any way (changed, added or removed)."""
        return tuple(c.name for c in self.changes)

    def as_dict(self) -> dict[str, Any]:
        return {"changed": list(self.changed), "unchanged": list(self.unchanged),
                "components": [c.as_dict() for c in self.changes]}


def diff_components(old: Iterable[Component], new: Iterable[Component]) -> ComponentDiff:
    """The component diff from ``old`` (the unit replaced) to ``new``, in :data:`COMPONENTS` order."""
    before, after = {c.name: c for c in old}, {c.name: c for c in new}
    changes: list[ComponentChange] = []
    unchanged: list[str] = []
    for name in COMPONENTS:
        a, b = before.get(name), after.get(name)
        if a is None and b is None:
            continue
        if a is not None and b is not None and a.digest == b.digest:
            unchanged.append(name)
            continue
        was = {m.name: m for m in a.members} if a else {}
        now = {m.name: m for m in b.members} if b else {}
        changes.append(ComponentChange(
            name, "added" if a is None else "removed" if b is None else "changed",
            a.digest if a else None, b.digest if b else None,
            added=tuple(now[k] for k in sorted(now.keys() - was.keys())),
            removed=tuple(was[k] for k in sorted(was.keys() - now.keys())),
            changed=tuple(now[k] for k in sorted(now.keys() & was.keys()) if now[k].sha256 != was[k].sha256)))
    return ComponentDiff(tuple(changes), tuple(unchanged))


def template_review_files(diff: ComponentDiff) -> tuple[str, ...]:
    """The files whose template members a change added or altered: what a security approval must name."""
    files = {m.path for change in diff.changes if change.name in TEMPLATE_COMPONENTS
             for m in (*change.added, *change.changed)}
    return tuple(sorted(files))
