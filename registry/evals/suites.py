"""Eval suites: which runner, with which settings and eval sets, on which models. Suites are policy data.

Suites live in ``policies/data.json`` under ``modelreg.suites``, so a change to what is evaluated and
to the thresholds that gate it (``modelreg.config.evals``) is one change to one bundle, with one digest::

    "suites": {
      "sanity": {"runner": "weights-sanity", "applies_to": {"formats": ["safetensors"]}},
      "chat": {"runner": "openai", "evalsets": ["safety", "tools@sha256:<digest>"],
               "settings": {"serve": ["vllm", "serve", "{model_dir}", "--port", "{port}"]},
               "applies_to": {"models": ["acme/*"], "architectures": ["*ForCausalLM"]},
               "timeout_s": 1800, "memory_mb": 16384}
    }

``applies_to`` filters by ``tenant/model`` glob, by weight format and by architecture (globs over
the facts sealing recorded); a key left out matches every version. An eval set is named by name (its
newest version when the version enters ``evaluating``) or pinned as ``name@sha256:<digest>``.

Example:
    >>> s = parse_suites({"sanity": {"runner": "weights-sanity"}})["sanity"]
    >>> s.runner, s.timeout_s, s.applies("acme/tiny", {"weights": {"formats": {"value": ["gguf"]}}})
    ('weights-sanity', 600, True)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any

from registry.domain.errors import InvalidInputError
from registry.evals.runners import RUNNERS
from registry.sources.filters import compile_glob

SUITE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
EVALSET_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
EVALSET_REF = re.compile(r"(?P<name>[a-z0-9][a-z0-9_.-]{0,63})(@sha256:(?P<digest>[0-9a-f]{64}))?")

DEFAULT_TIMEOUT_S = 600
MAX_TIMEOUT_S = 24 * 3600
DEFAULT_MEMORY_MB = 8192
MIN_MEMORY_MB = 256
MAX_SUITES = 64
MAX_EVALSETS_PER_SUITE = 32
MAX_SETTINGS_BYTES = 64 << 10


class SuiteError(InvalidInputError):
    code = "invalid-suite"


@dataclasses.dataclass(frozen=True, slots=True)
class EvalSetRef:
    name: str
    digest: str | None = None
    """Pinned digest, or None: the newest version of ``name``."""


@dataclasses.dataclass(frozen=True, slots=True)
class Suite:
    name: str
    runner: str
    settings: dict[str, Any]
    evalsets: tuple[EvalSetRef, ...]
    models: tuple[str, ...] = ()
    formats: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    timeout_s: int = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB

    @property
    def runner_version(self) -> str:
        return RUNNERS[self.runner].version

    def applies(self, model: str, facts: dict[str, Any] | None) -> bool:
        """Whether the suite evaluates a version of ``tenant/model`` with these recorded facts."""
        if self.models and not any(compile_glob(p).match(model) for p in self.models):
            return False
        if self.formats and not set(self.formats) & set(_fact(facts, "weights", "formats") or []):
            return False
        if self.architectures:
            names = _fact(facts, "architecture", "architectures") or []
            if not any(compile_glob(p).match(n) for p in self.architectures for n in names if _plain(n)):
                return False
        return True

    def definition(self, evalset_digests: dict[str, str]) -> dict[str, Any]:
        """The suite as it runs: what its ``suite_version`` digests.

        Args:
            evalset_digests: eval set name -> the digest it resolved to.
        """
        return {"suite": self.name, "runner": self.runner, "runner_version": self.runner_version,
                "settings": self.settings, "timeout_s": self.timeout_s, "memory_mb": self.memory_mb,
                "evalsets": [{"name": r.name, "digest": evalset_digests[r.name]} for r in self.evalsets]}


def suite_version(definition: dict[str, Any]) -> str:
    """sha256 over the canonical JSON of a suite's definition (eval sets by digest, runner version).

    Example:
        >>> len(suite_version({"runner": "weights-sanity", "evalsets": []}))
        64
    """
    encoded = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode()).hexdigest()


def suites_of(policy_data: dict[str, Any] | None) -> dict[str, Suite]:
    """The suites in a policy bundle's data (``modelreg.suites``); none when the bundle has none.

    Raises:
        SuiteError: the suites are malformed (the whole set is refused: half a set would gate less).
    """
    raw = ((policy_data or {}).get("modelreg") or {}).get("suites")
    return parse_suites(raw) if raw is not None else {}


def parse_suites(raw: Any) -> dict[str, Suite]:
    """Suites by name from their JSON object.

    Raises:
        SuiteError: names the suite and the field.
    """
    if not isinstance(raw, dict) or len(raw) > MAX_SUITES:
        raise SuiteError(f"suites is an object of at most {MAX_SUITES} suites by name")
    return {name: _suite(name, doc) for name, doc in sorted(raw.items())}


def _suite(name: str, doc: Any) -> Suite:
    if not isinstance(name, str) or not SUITE_NAME.fullmatch(name):
        raise SuiteError(f"suite name {str(name)[:40]!r} is not a lowercase slug of at most 64 characters")
    if not isinstance(doc, dict):
        raise SuiteError(f"suite {name}: is an object")
    unknown = sorted(set(doc) - {"runner", "settings", "evalsets", "applies_to", "timeout_s", "memory_mb",
                                 "description"})
    if unknown:
        raise SuiteError(f"suite {name}: unknown field {unknown[0]!r}")
    runner = doc.get("runner")
    if runner not in RUNNERS:
        raise SuiteError(f"suite {name}: runner {str(runner)[:40]!r} is not one of {', '.join(sorted(RUNNERS))}")
    settings = doc.get("settings", {})
    if not isinstance(settings, dict) or len(json.dumps(settings)) > MAX_SETTINGS_BYTES:
        raise SuiteError(f"suite {name}: settings is an object of at most {MAX_SETTINGS_BYTES} bytes of JSON")
    refs = doc.get("evalsets", [])
    if not isinstance(refs, list) or len(refs) > MAX_EVALSETS_PER_SUITE:
        raise SuiteError(f"suite {name}: evalsets is a list of at most {MAX_EVALSETS_PER_SUITE} names")
    evalsets = tuple(_evalset_ref(name, r) for r in refs)
    if len({r.name for r in evalsets}) != len(evalsets):
        raise SuiteError(f"suite {name}: an eval set is named twice")
    applies = doc.get("applies_to", {})
    if not isinstance(applies, dict) or set(applies) - {"models", "formats", "architectures"}:
        raise SuiteError(f"suite {name}: applies_to has only models, formats and architectures")
    models, formats, architectures = (_globs(name, applies, k) for k in ("models", "formats", "architectures"))
    timeout_s = _int(name, doc, "timeout_s", DEFAULT_TIMEOUT_S, 1, MAX_TIMEOUT_S)
    memory_mb = _int(name, doc, "memory_mb", DEFAULT_MEMORY_MB, MIN_MEMORY_MB, 1 << 22)
    return Suite(name, runner, settings, evalsets, models, formats, architectures, timeout_s, memory_mb)


def _evalset_ref(suite: str, value: Any) -> EvalSetRef:
    m = EVALSET_REF.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        raise SuiteError(f"suite {suite}: eval set {str(value)[:80]!r} is not NAME or NAME@sha256:<hex>")
    return EvalSetRef(m["name"], m["digest"])


def _globs(suite: str, doc: dict[str, Any], key: str) -> tuple[str, ...]:
    value = doc.get(key, [])
    if not isinstance(value, list) or len(value) > 100 or not all(isinstance(v, str) for v in value):
        raise SuiteError(f"suite {suite}: applies_to.{key} is a list of at most 100 globs")
    for pattern in value:
        try:
            compile_glob(pattern)
        except InvalidInputError as e:
            raise SuiteError(f"suite {suite}: applies_to.{key}: {e.message}") from None
    return tuple(value)


def _int(suite: str, doc: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = doc.get(key, default)
    if type(value) is not int or not low <= value <= high:
        raise SuiteError(f"suite {suite}: {key} is an integer from {low} to {high}")
    return value


def _fact(facts: dict[str, Any] | None, group: str, name: str) -> Any:
    cell = ((facts or {}).get(group) or {}).get(name) or {}
    return cell.get("value") if isinstance(cell, dict) else None


def _plain(name: Any) -> bool:
    return isinstance(name, str) and 0 < len(name) <= 256 and "/" not in name
