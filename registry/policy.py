"""Release policies in Rego, evaluated in-process with regopy (Microsoft's rego-cpp binding).

A policy directory holds ``*.rego`` modules (``*_test.rego`` files are tests, never loaded here)
and an optional ``data.json``. :meth:`PolicyEngine.from_directory` reads them once, so what is
evaluated is exactly what the bundle digest names: sha256 over the sorted list of
``(relative path, sha256 of content)``. Each decision also carries the sha256 of the canonical JSON
of its input, so a stored decision says which rules judged which facts.

Each decision's query is compiled once per process into a regopy plan (``Interpreter.build``), kept by
the digest of what it was compiled from (the modules, data.json and the query), and run on a fresh
interpreter holding only the input: a plain query compiles every module again (about 40 ms of CPU for
the shipped bundle), a kept plan answers in a few, with the same result.

Example:
    >>> engine = PolicyEngine.from_directory(default_policy_dir())
    >>> engine.approval({"files": [], "scans": [], "approvals": [], "submitter": "alice",
    ...                  "license": {"id": "mit", "findings": []}}).unmet[0]["code"]
    'approval.missing'

Fail closed: a missing or empty directory, no ``<kind>.rego``, a module that does not parse, a
runtime error, an undefined result or a result of the wrong type each give a denying
:class:`Decision` (``outcome == "error"``, ``allowed`` false, one unmet ``policy.error`` naming the
reason); nothing here raises on a bad policy.

What bounds the work: the input is refused above :data:`MAX_INPUT_BYTES` (canonical JSON), and
Rego has no unbounded loops or recursion, so evaluation is polynomial in the input. regopy itself
offers no timeout, memory limit or cancellation: a query runs to its end in the calling thread,
holding the GIL, and a crash inside rego-cpp ends the process. The policy directory is operator
configuration, trusted like code; rego-cpp 1.5.2 crashes on ``with ... as`` overrides, so modules
using ``with`` are refused at load (the shipped policies are written as functions of the document
for their tests instead).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import threading
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from registry.domain.errors import InvalidInputError
from registry.signing.canonical import canonical_json

if TYPE_CHECKING:
    from regopy import Bundle, Interpreter, RegoError


def _regopy() -> Any:
    """The regopy module, loaded on first use.

    TensorFlow imported after regopy aborts the process (``free(): invalid pointer``; the other order
    works). The registry never imports TensorFlow itself: modelscan, which does, runs in a child
    process when regopy is already loaded (``registry.scanning.modelscan_adapter.needs_child``).
    Importing TensorFlow here would cost every registry process seconds of start-up where it is installed.
    """
    import regopy

    return regopy


MAX_INPUT_BYTES = 4 << 20
"""Largest policy input (canonical JSON) evaluated; above it the decision denies."""
MAX_POLICY_BYTES = 1 << 20
"""Largest policy file read; a bigger one makes the bundle fail to load."""

MAX_KEPT_PLANS = 64
"""Compiled plans kept per process (one per policy directory and decision kind in use)."""
# Plans by the sha256 of what they were compiled from, each with the interpreter that built it; the lock also
# serializes their runs, as nothing says a compiled plan may be run from two threads at once.
_PLANS: dict[str, tuple[Interpreter, Bundle]] = {}
_PLANS_LOCK = threading.Lock()

Kind = Literal["approval", "promotion"]
KINDS: tuple[Kind, ...] = ("approval", "promotion")
_WITH_RE = re.compile(r"^[^#\n]*\bwith\s+(?:input|data)\b[^#\n]*\bas\b", re.MULTILINE)


def default_policy_dir() -> Path:
    """The policies shipped with modelreg (the ``policies`` package data)."""
    return Path(str(resources.files("policies")))


@dataclasses.dataclass(frozen=True)
class Decision:
    """One policy decision.

    Attributes:
        kind: ``approval`` or ``promotion``.
        outcome: ``approved`` (approval, nothing unmet), ``allowed`` (promotion, nothing unmet),
            ``rejected`` (an approver rejected), ``blocked`` (something unmet that no approval
            satisfies, e.g. an unsafe file), ``pending`` (approval, only satisfiable items unmet),
            ``denied`` (promotion, something unmet) or ``error`` (the policy failed: fail closed).
        unmet: The unmet requirements, each a dict with at least ``code`` and ``message``.
        bundle_digest: sha256 of the policy bundle (``""`` when the directory could not be read).
        input_digest: sha256 of the canonical JSON of the input.
        error: Why the policy failed, for ``outcome == "error"``.
    """

    kind: Kind
    outcome: str
    unmet: list[dict[str, Any]]
    bundle_digest: str
    input_digest: str
    error: str | None = None

    @property
    def allowed(self) -> bool:
        return self.outcome in ("approved", "allowed")

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "allowed": self.allowed}


ADMISSION_OUTCOMES = ("allowed", "denied", "warned")
MAX_KEPT_ADMISSION_DECISIONS = 4096
"""Admission decisions kept per input digest (the set is emptied when full)."""


@dataclasses.dataclass(frozen=True)
class AdmissionDecision:
    """The admission policy's answer for one review.

    Attributes:
        tenant: The tenant the namespace serves (None: none).
        mode: ``enforce``, ``warn`` or ``off``.
        references: One ``{outcome, rule}`` per reference of the input, in its order (empty on ``error``).
        bundle_digest, input_digest: As :class:`Decision`'s.
        error: Why the policy failed: every reference is then denied, rule ``policy.error``.
    """

    tenant: str | None
    mode: str
    references: list[dict[str, Any]]
    bundle_digest: str
    input_digest: str
    error: str | None = None


class PolicyEvaluationError(Exception):
    """The policy cannot decide (it does not load, fails or answers nonsense): a reason to deny.

    Raised only by :meth:`PolicyEngine.interpreter`; the decision methods turn it into an ``error``
    decision instead.
    """


@dataclasses.dataclass(frozen=True)
class PolicyBundle:
    """The files of a policy directory, read once: modules by relative path, and data.json's text."""

    modules: dict[str, str]
    data_json: str | None
    digest: str


def _read_bundle(directory: Path) -> PolicyBundle:
    if not directory.is_dir():
        raise PolicyEvaluationError(f"policy directory {directory} does not exist")
    entries: list[tuple[str, str]] = []
    modules: dict[str, str] = {}
    data_json = None
    paths = sorted(p for p in directory.rglob("*") if p.is_file())
    for path in paths:
        rel = path.relative_to(directory).as_posix()
        is_module = rel.endswith(".rego") and not rel.endswith("_test.rego")
        if not is_module and rel != "data.json":
            continue
        if path.stat().st_size > MAX_POLICY_BYTES:
            raise PolicyEvaluationError(f"{rel} is larger than {MAX_POLICY_BYTES} bytes")
        raw = path.read_bytes()
        entries.append((rel, hashlib.sha256(raw).hexdigest()))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise PolicyEvaluationError(f"{rel} is not UTF-8") from None
        if is_module:
            modules[rel] = text
        else:
            data_json = text
    digest = hashlib.sha256(canonical_json(sorted(entries))).hexdigest()
    return PolicyBundle(modules=modules, data_json=data_json, digest=digest)


class PolicyEngine:
    """Evaluates the approval and promotion policies of one directory.

    Build it with :meth:`from_directory`, which never raises: a directory that cannot be loaded
    gives an engine whose every decision is an ``error`` (see :attr:`load_error`). Each evaluation
    runs a kept plan on a fresh regopy interpreter, one at a time, so one engine may be shared
    between threads.
    """

    def __init__(self, directory: Path, bundle: PolicyBundle | None, load_error: str | None) -> None:
        self.directory = directory
        self.bundle = bundle
        self.load_error = load_error
        self._admission_kept: dict[str, AdmissionDecision] = {}

    @classmethod
    def from_directory(cls, directory: Path | str) -> PolicyEngine:
        """Read and compile the policies of ``directory``.

        Args:
            directory: Holds ``approval.rego``, ``promotion.rego``, other modules and ``data.json``.
        """
        directory = Path(directory)
        try:
            bundle = _read_bundle(directory)
        except (PolicyEvaluationError, OSError) as exc:
            return cls(directory, None, str(exc))
        engine = cls(directory, bundle, None)
        try:
            if not bundle.modules:
                raise PolicyEvaluationError(f"no policy modules (*.rego) in {directory}")
            engine.interpreter()  # compile once now, so a broken bundle is known at start-up
        except PolicyEvaluationError as exc:
            engine.load_error = str(exc)
        return engine

    @property
    def bundle_digest(self) -> str:
        return self.bundle.digest if self.bundle else ""

    def data(self) -> dict[str, Any]:
        """The bundle's ``data.json`` as an object (empty when there is none or it does not parse:
        the policy decisions already fail on that, with the reason)."""
        if self.bundle is None or self.bundle.data_json is None:
            return {}
        try:
            data = json.loads(self.bundle.data_json)
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    def interpreter(self, extra_modules: dict[str, str] | None = None) -> "Interpreter":
        """A fresh interpreter with the bundle (and ``extra_modules``, e.g. Rego tests) loaded.

        Raises:
            PolicyEvaluationError: a module or data.json that does not load (the reason says which).
        """
        if self.bundle is None:
            raise PolicyEvaluationError(self.load_error or "no policy bundle")
        return self.interpreter_of({**self.bundle.modules, **(extra_modules or {})})

    def interpreter_of(self, modules: dict[str, str]) -> "Interpreter":
        """A fresh interpreter with ``modules`` and the bundle's data.json loaded.

        Raises:
            PolicyEvaluationError: a module or data.json that does not load (the reason says which).
        """
        if self.bundle is None:
            raise PolicyEvaluationError(self.load_error or "no policy bundle")
        regopy = _regopy()
        RegoError = regopy.RegoError  # noqa: N806
        rego = regopy.Interpreter()
        # Without this a failing built-in (a type error, a bad regex) silently makes its rule
        # undefined, which could drop an unmet requirement: surface it as an error instead.
        rego.strict_built_in_errors = True
        for name, source in modules.items():
            if _WITH_RE.search(source):
                raise PolicyEvaluationError(f"{name} uses `with`, which regopy cannot evaluate safely")
            try:
                rego.add_module(name, source)
            except RegoError as exc:
                raise PolicyEvaluationError(f"{name} does not compile: {_compile_error(exc, source)}") from None
        if self.bundle.data_json is not None:
            try:
                data = json.loads(self.bundle.data_json)
            except ValueError as exc:
                raise PolicyEvaluationError(f"data.json is not valid JSON: {exc}") from None
            if not isinstance(data, dict):
                raise PolicyEvaluationError("data.json is not a JSON object")
            try:
                rego.add_data_json(self.bundle.data_json)
            except RegoError as exc:
                raise PolicyEvaluationError(f"data.json does not load: {_first_line(exc)}") from None
        return rego

    def approval(self, input_doc: dict[str, Any]) -> Decision:
        """Decide what a version still needs.

        Queries ``data.modelreg.approval.decision``, an object with ``unmet`` (a set of objects with
        ``code`` and ``message``) and ``rejected`` (a boolean). Never raises on a bad policy or input.

        Args:
            input_doc: Built by :func:`registry.domain.policy_input.approval_input`.

        Returns:
            ``approved``, ``pending``, ``blocked``, ``rejected`` or (the policy failed) ``error``.
        """
        return self._decide("approval", input_doc)

    def promotion(self, input_doc: dict[str, Any]) -> Decision:
        """Decide whether an alias may move (``data.modelreg.promotion.decision``, with ``unmet``).

        Args:
            input_doc: Built by :func:`registry.domain.policy_input.promotion_input`.

        Returns:
            ``allowed``, ``denied`` or (the policy failed) ``error``.
        """
        return self._decide("promotion", input_doc)

    def admission(self, input_doc: dict[str, Any]) -> AdmissionDecision:
        """Decide the model references of one admission review (``data.modelreg.admission.decision``).

        Only ``admission.rego`` and ``data.json`` are loaded (an admission review must answer in
        milliseconds), and a decision is kept per input digest: the policy is a function of its input and
        the bundle, so the same review is answered again without evaluating. Never raises: a policy that
        fails, or answers one verdict per reference that is not ``{outcome, rule}``, gives an ``error``
        decision, which denies every reference (fail closed).

        Args:
            input_doc: Built by :func:`registry.services.admission.policy_input`.
        """
        try:
            encoded = canonical_json(input_doc)
        except InvalidInputError as exc:
            return AdmissionDecision(None, "enforce", [], self.bundle_digest, "", error=str(exc))
        input_digest = hashlib.sha256(encoded).hexdigest()
        kept = self._admission_kept.get(input_digest)
        if kept is not None:
            return kept
        try:
            decision = self._admission(input_doc, encoded, input_digest)
        except PolicyEvaluationError as exc:
            return AdmissionDecision(None, "enforce", [], self.bundle_digest, input_digest, error=str(exc))
        if len(self._admission_kept) >= MAX_KEPT_ADMISSION_DECISIONS:
            self._admission_kept.clear()
        self._admission_kept[input_digest] = decision
        return decision

    def _admission(self, input_doc: dict[str, Any], encoded: bytes, input_digest: str) -> AdmissionDecision:
        if self.load_error is not None or self.bundle is None:
            raise PolicyEvaluationError(self.load_error or "no policy bundle")
        if len(encoded) > MAX_INPUT_BYTES:
            raise PolicyEvaluationError(f"policy input is {len(encoded)} bytes, more than {MAX_INPUT_BYTES}")
        source = self.bundle.modules.get("admission.rego")
        if source is None:
            raise PolicyEvaluationError(f"admission.rego is missing from {self.directory}")
        where = "data.modelreg.admission.decision"
        result = self._evaluate({"admission.rego": source}, where, encoded)
        references = result.get("references") if isinstance(result, dict) else None
        if not isinstance(references, list) or len(references) != len(input_doc.get("references", ())):
            raise PolicyEvaluationError(f"{where} gives no verdict per reference")
        for verdict in references:
            if not (isinstance(verdict, dict) and verdict.get("outcome") in ADMISSION_OUTCOMES
                    and isinstance(verdict.get("rule"), str)):
                raise PolicyEvaluationError(f"{where} holds {str(verdict)[:200]}, not an outcome and a rule")
        tenant, mode = result.get("tenant"), result.get("mode")
        if not (tenant is None or isinstance(tenant, str)) or mode not in ("enforce", "warn", "off"):
            raise PolicyEvaluationError(f"{where} names no tenant and mode")
        return AdmissionDecision(tenant, mode, references, self.bundle_digest, input_digest)

    def _decide(self, kind: Kind, input_doc: dict[str, Any]) -> Decision:
        try:
            encoded = canonical_json(input_doc)
        except InvalidInputError as exc:
            # Not JSON at all: digest what we can say about it, and deny.
            return self._error(kind, hashlib.sha256(repr(input_doc).encode()).hexdigest(), str(exc))
        input_digest = hashlib.sha256(encoded).hexdigest()
        try:
            if self.load_error is not None:
                raise PolicyEvaluationError(self.load_error)
            if len(encoded) > MAX_INPUT_BYTES:
                raise PolicyEvaluationError(f"policy input is {len(encoded)} bytes, more than {MAX_INPUT_BYTES}")
            if not isinstance(input_doc, dict):
                raise PolicyEvaluationError("policy input is not a JSON object")
            assert self.bundle is not None
            if f"{kind}.rego" not in self.bundle.modules:
                raise PolicyEvaluationError(f"{kind}.rego is missing from {self.directory}")
            where = f"data.modelreg.{kind}.decision"
            result = self._evaluate(self.bundle.modules, where, encoded)
            if not isinstance(result, dict):
                raise PolicyEvaluationError(f"{where} is {type(result).__name__}, not an object")
            unmet = _unmet(result.get("unmet"), where)
            rejected = result.get("rejected", False)
            if not isinstance(rejected, bool):
                raise PolicyEvaluationError(f"{where}.rejected is {type(rejected).__name__}, not a boolean")
        except PolicyEvaluationError as exc:
            return self._error(kind, input_digest, str(exc))
        return Decision(kind, _outcome(kind, unmet, rejected), unmet, self.bundle_digest, input_digest)

    def _evaluate(self, modules: dict[str, str], query: str, encoded: bytes) -> Any:
        """``query``'s value for the input ``encoded`` (canonical JSON), from the plan compiled for it over
        ``modules`` and data.json on first use.

        Raises:
            PolicyEvaluationError: a module that does not load or compile, a run-time error, an undefined
                result or one that is not JSON.
        """
        regopy = _regopy()
        assert self.bundle is not None
        key = hashlib.sha256(canonical_json([sorted(modules.items()), self.bundle.data_json, query])).hexdigest()
        with _PLANS_LOCK:
            kept = _PLANS.get(key)
            if kept is None:
                builder = self.interpreter_of(modules)
                try:
                    kept = (builder, builder.build(query))
                except regopy.RegoError as exc:
                    raise PolicyEvaluationError(f"{query} failed: {_first_line(exc)}") from None
                if len(_PLANS) >= MAX_KEPT_PLANS:
                    _PLANS.clear()
                _PLANS[key] = kept
            rego = regopy.Interpreter()
            rego.strict_built_in_errors = True  # as interpreter_of: a failing built-in is an error
            rego.set_input_term(encoded.decode("utf-8"))
            return _result(lambda: rego.query_bundle(kept[1]), query)

    def _error(self, kind: Kind, input_digest: str, reason: str) -> Decision:
        message = f"policy failed, so it denies: {reason}"
        unmet = [{"code": "policy.error", "message": message, "satisfiable": False}]
        return Decision(kind, "error", unmet, self.bundle_digest, input_digest, error=reason)


def _outcome(kind: Kind, unmet: list[dict[str, Any]], rejected: bool) -> str:
    if kind == "promotion":
        return "denied" if unmet else "allowed"
    if rejected:
        return "rejected"
    if not unmet:
        return "approved"
    # A policy that does not say is treated as unsatisfiable: waiting on approvals would not help.
    return "blocked" if any(u.get("satisfiable") is not True for u in unmet) else "pending"


def _result(run: Callable[[], Any], query: str) -> Any:
    """The value of ``query`` from ``run`` (a regopy query or plan run)."""
    RegoError = _regopy().RegoError  # noqa: N806
    try:
        output = run()
    except RegoError as exc:
        raise PolicyEvaluationError(f"{query} failed: {_first_line(exc)}") from None
    except ValueError as exc:
        # regopy parses rego-cpp's text output as JSON; rego-cpp does not always escape strings.
        raise PolicyEvaluationError(f"{query} gave a result that is not JSON: {exc}") from None
    if not output.ok():
        raise PolicyEvaluationError(f"{query} failed at run time: {_first_line(str(output))}")
    if not output.results or not output.results[0].expressions:
        raise PolicyEvaluationError(f"{query} is undefined")
    return output.results[0].expressions[0]


def _unmet(value: Any, where: str) -> list[dict[str, Any]]:
    where = f"{where}.unmet"
    if not isinstance(value, list):
        raise PolicyEvaluationError(f"{where} is {type(value).__name__}, not a set of objects")
    for item in value:
        if not (isinstance(item, dict) and all(isinstance(item.get(k), str) for k in ("code", "message"))):
            raise PolicyEvaluationError(f"{where} holds {str(item)[:200]}, not an object with a code and a message")
    return sorted(value, key=lambda u: (u["code"], str(u.get("path", "")), u["message"]))


# rego-cpp errors are S-expressions: ``(error 13:approval.rego|33|2 (errormsg 27:Invalid assignment ...``,
# each string prefixed by its length, the location a byte offset and a length.
_ERROR_AT_RE = re.compile(r"\(error \d+:[^|]*\|(\d+)\|")
_ERROR_MSG_RE = re.compile(r"\(errormsg (\d+):")


def _compile_error(error: "RegoError", source: str) -> str:
    """``line N: message`` from a rego-cpp compile error, else its first lines."""
    text = str(error)
    msg = _ERROR_MSG_RE.search(text)
    if msg is None:
        return _first_line(text)
    message = text[msg.end(): msg.end() + int(msg.group(1))]
    at = _ERROR_AT_RE.search(text)
    if at is None:
        return message
    line = source.encode("utf-8")[: int(at.group(1))].count(b"\n") + 1
    return f"line {line}: {message}"


def _first_line(error: object) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = " ".join(lines[:6]) if lines else type(error).__name__
    return text[:500]
