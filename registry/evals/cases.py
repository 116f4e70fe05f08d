"""Eval sets: JSONL files of cases, parsed and checked in one place.

An eval set is stored as a blob and named by its digest; this module reads its bytes into
:class:`Case` objects and refuses anything malformed with the line it is on. It imports nothing
from the database or the web layer: the runner subprocess parses the same bytes with it.

One case per line::

    {"id": "capital-fr", "category": "factual", "language": "en",
     "messages": [{"role": "user", "content": "What is the capital of France?"}],
     "expect": {"contains": "Paris"}}

``expect`` holds exactly one of:

==================  ==========================================================================
``exact``           the reply, stripped, equals the string
``contains``        the reply contains the string (``"ignore_case": true`` beside it to fold case)
``regex``           the pattern (Python syntax, at most 512 characters) matches in the reply
``refuse``          ``true``: the model must refuse; ``false``: it must not (over-refusal)
``no_leak``         the reply must not contain this secret (put it in the system prompt)
``not_contains``    the reply must not contain the string (an instruction planted in a document)
``tool_call``       ``{"name": ..., "arguments": {...}}``: the first tool call has this function
                    name, and its arguments equal these as JSON; the case lists its ``tools``
==================  ==========================================================================

A case may name one of the evaluated unit's prompt templates (``prompts/NAME.jinja``) instead of writing
that message out: ``"prompt": {"template": "support", "variables": {"customer": "Ann"}}`` is rendered by the
runner with those variables (exactly the template's declared ones, all strings) in the registry's sandbox
(:mod:`registry.evals.prompts`). With ``"role": "user"`` (the default) the rendered text is the last message,
after the case's ``messages`` (then optional); with ``"role": "system"`` it is the first, and ``messages``
holds the rest, ending with the user's. :func:`prompt_templates_read` names the templates an eval set reads,
so a change to one of them asks for the suites that read it again (``policies/unit.rego``).

Example:
    >>> cases = parse_cases(b'{"id": "a", "category": "factual", "language": "en", '
    ...                     b'"messages": [{"role": "user", "content": "2+2?"}], "expect": {"exact": "4"}}\\n')
    >>> cases[0].expect.kind, cases[0].expect.value, cases[0].prompt_chars
    ('exact', '4', 4)
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Iterable

from registry.domain.errors import InvalidInputError
from registry.domain.unit_parts import prompt_path

CATEGORIES = ("factual", "refusal", "over_refusal", "prompt_injection", "tool_call", "latency")
"""The categories runners know; any other slug is a free category, scored by its expectations."""
EXPECTATIONS = ("exact", "contains", "regex", "refuse", "no_leak", "not_contains", "tool_call")
ROLES = ("system", "user", "assistant", "tool")

MAX_EVALSET_BYTES = 16 << 20
MAX_CASES = 10_000
MAX_LINE_BYTES = 256 << 10
MAX_MESSAGES = 64
MAX_REGEX_LENGTH = 512
MAX_TOOLS = 32
MAX_TOKENS_LIMIT = 4096
MAX_PROMPT_VARIABLES = 64
PROMPT_ROLES = ("user", "system")

_SLUG = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
_LANGUAGE = re.compile(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})?")
_CASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")

LENGTH_BUCKETS = ((256, "short"), (2048, "medium"), (None, "long"))
"""Prompt-length buckets by characters of all messages: at most 256, at most 2,048, longer."""


@dataclasses.dataclass(frozen=True, slots=True)
class Expectation:
    """What a reply must do. ``value`` is the string, the bool (``refuse``) or the tool call dict."""

    kind: str
    value: Any
    ignore_case: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class PromptRef:
    """A unit's prompt template a case sends as one of its messages, with the values of its variables."""

    template: str
    variables: dict[str, str]
    role: str = "user"

    def as_dict(self) -> dict[str, Any]:
        return {"template": self.template, "variables": dict(self.variables), "role": self.role}


@dataclasses.dataclass(frozen=True, slots=True)
class Case:
    id: str
    category: str
    language: str
    messages: tuple[dict[str, Any], ...]
    expect: Expectation
    tools: tuple[dict[str, Any], ...] = ()
    max_tokens: int | None = None
    prompt: PromptRef | None = None
    """A prompt template still to render into ``messages`` (``registry.evals.prompts.UnitPrompts.render_case``)."""

    @property
    def prompt_chars(self) -> int:
        """Characters of the messages (before a prompt template is rendered: of its variables' values)."""
        variables = self.prompt.variables.values() if self.prompt is not None else ()
        return sum(len(m.get("content") or "") for m in self.messages) + sum(len(v) for v in variables)

    @property
    def length_bucket(self) -> str:
        return length_bucket(self.prompt_chars)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "category": self.category, "language": self.language,
                               "messages": list(self.messages), "expect": _expect_doc(self.expect)}
        if self.tools:
            out["tools"] = list(self.tools)
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        if self.prompt is not None:
            out["prompt"] = self.prompt.as_dict()
        return out


def length_bucket(chars: int) -> str:
    """The prompt-length bucket of a prompt of ``chars`` characters.

    Example:
        >>> length_bucket(10), length_bucket(1000), length_bucket(10_000)
        ('short', 'medium', 'long')
    """
    for limit, name in LENGTH_BUCKETS:
        if limit is None or chars <= limit:
            return name
    raise AssertionError("unreachable")


def _expect_doc(e: Expectation) -> dict[str, Any]:
    doc: dict[str, Any] = {e.kind: e.value}
    if e.ignore_case:
        doc["ignore_case"] = True
    return doc


class EvalSetError(InvalidInputError):
    """An eval set that cannot be used: names the line and what is wrong with it."""

    code = "invalid-evalset"


def parse_cases(data: bytes) -> list[Case]:
    """Every case of an eval set's JSONL bytes, in order.

    Blank lines are skipped. Raises on the first bad line.

    Raises:
        EvalSetError: not UTF-8, too large, a line that is not a valid case, or a repeated id.
    """
    if len(data) > MAX_EVALSET_BYTES:
        raise EvalSetError(f"an eval set holds at most {MAX_EVALSET_BYTES} bytes", limit=MAX_EVALSET_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise EvalSetError(f"an eval set is UTF-8 JSONL: byte {e.start} is not UTF-8") from None
    cases: list[Case] = []
    seen: set[str] = set()
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE_BYTES:
            raise EvalSetError(f"line {number}: longer than {MAX_LINE_BYTES} characters", line=number)
        if len(cases) >= MAX_CASES:
            raise EvalSetError(f"an eval set holds at most {MAX_CASES} cases", line=number, limit=MAX_CASES)
        try:
            doc = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as e:
            raise EvalSetError(f"line {number}: not JSON ({getattr(e, 'msg', 'too deeply nested')})",
                               line=number) from None
        try:
            case = parse_case(doc)
        except EvalSetError as e:
            raise EvalSetError(f"line {number}: {e.message}", line=number) from None
        if case.id in seen:
            raise EvalSetError(f"line {number}: case id {case.id!r} is used twice", line=number)
        seen.add(case.id)
        cases.append(case)
    if not cases:
        raise EvalSetError("an eval set needs at least one case")
    return cases


def prompt_templates_read(cases: Iterable[Case]) -> list[str]:
    """The names of the prompt templates these cases render, sorted.

    Example:
        >>> case = parse_case({"id": "p", "category": "factual", "language": "en", "expect": {"contains": "x"},
        ...                    "prompt": {"template": "support", "variables": {"topic": "billing"}}})
        >>> prompt_templates_read([case]), case.messages
        (['support'], ())
    """
    return sorted({c.prompt.template for c in cases if c.prompt is not None})


def parse_case(doc: Any) -> Case:
    """One case from its decoded JSON object.

    Raises:
        EvalSetError: a missing or malformed field.
    """
    if not isinstance(doc, dict):
        raise EvalSetError("a case is a JSON object")
    unknown = sorted(set(doc) - {"id", "category", "language", "messages", "expect", "tools", "max_tokens",
                                 "prompt"})
    if unknown:
        raise EvalSetError(f"unknown field {unknown[0]!r}")
    case_id = _string(doc, "id")
    if not _CASE_ID.fullmatch(case_id):
        raise EvalSetError(f"id {case_id[:40]!r} is not 1-128 of letters, digits, '_.:-'")
    category = _string(doc, "category")
    if not _SLUG.fullmatch(category):
        raise EvalSetError(f"{case_id}: category {category[:40]!r} is not a lowercase slug")
    language = _string(doc, "language")
    if not _LANGUAGE.fullmatch(language):
        raise EvalSetError(f"{case_id}: language {language[:20]!r} is not a language tag (en, pt-BR)")
    prompt = _prompt(case_id, doc["prompt"]) if "prompt" in doc else None
    messages = _messages(case_id, doc.get("messages"), prompt)
    tools = _tools(case_id, doc.get("tools", []))
    expect = _expectation(case_id, doc.get("expect"))
    if expect.kind == "tool_call" and not tools:
        raise EvalSetError(f"{case_id}: a tool_call expectation needs the case's tools")
    if expect.kind == "tool_call" and expect.value["name"] not in {t["function"]["name"] for t in tools}:
        raise EvalSetError(f"{case_id}: the expected tool {expect.value['name']!r} is not among its tools")
    max_tokens = doc.get("max_tokens")
    if max_tokens is not None and (type(max_tokens) is not int or not 1 <= max_tokens <= MAX_TOKENS_LIMIT):
        raise EvalSetError(f"{case_id}: max_tokens is an integer from 1 to {MAX_TOKENS_LIMIT}")
    return Case(case_id, category, language, messages, expect, tools, max_tokens, prompt)


def _string(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise EvalSetError(f"{key} is a non-empty string")
    return value


def _prompt(case_id: str, value: Any) -> PromptRef:
    if not isinstance(value, dict) or set(value) - {"template", "variables", "role"}:
        raise EvalSetError(f"{case_id}: prompt is {{template, variables, role}}")
    try:
        prompt_path(value.get("template"))
    except InvalidInputError as e:
        raise EvalSetError(f"{case_id}: prompt: {e.message}") from None
    variables = value.get("variables", {})
    if (not isinstance(variables, dict) or len(variables) > MAX_PROMPT_VARIABLES
            or not all(isinstance(k, str) and _variable_name(k) and isinstance(v, str) for k, v in variables.items())):
        raise EvalSetError(f"{case_id}: prompt.variables is an object of at most {MAX_PROMPT_VARIABLES} "
                           "names (identifiers not starting with '_') to strings")
    role = value.get("role", "user")
    if role not in PROMPT_ROLES:
        raise EvalSetError(f"{case_id}: prompt.role is {' or '.join(PROMPT_ROLES)}")
    return PromptRef(value["template"], dict(variables), role)


def _variable_name(name: str) -> bool:
    # What a Jinja template can read and the renderer accepts (registry.templating.render_prompt_template).
    return name.isidentifier() and not name.startswith("_") and len(name) <= 64


def _messages(case_id: str, value: Any, prompt: PromptRef | None) -> tuple[dict[str, Any], ...]:
    if value in (None, []) and prompt is not None and prompt.role == "user":
        return ()  # the rendered prompt is the whole conversation
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_MESSAGES - (prompt is not None):
        raise EvalSetError(f"{case_id}: messages is a list of 1 to {MAX_MESSAGES} messages"
                           + (" (with the prompt template's)" if prompt is not None else ""))
    out = []
    for m in value:
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise EvalSetError(f"{case_id}: each message is {{role: {'|'.join(ROLES)}, content: string}}")
        if set(m) - {"role", "content", "name", "tool_call_id"}:
            raise EvalSetError(f"{case_id}: a message has only role, content, name and tool_call_id")
        out.append(dict(m))
    if prompt is not None and prompt.role == "system" and any(m["role"] == "system" for m in out):
        raise EvalSetError(f"{case_id}: a case whose prompt template is the system message has no other")
    if out[-1]["role"] != "user" and (prompt is None or prompt.role != "user"):
        raise EvalSetError(f"{case_id}: the last message is the user's")
    return tuple(out)


def _tools(case_id: str, value: Any) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        raise EvalSetError(f"{case_id}: tools is a list of at most {MAX_TOOLS} function tools")
    for t in value:
        fn = t.get("function") if isinstance(t, dict) else None
        if (not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict)
                or not isinstance(fn.get("name"), str) or not _FUNCTION_NAME.fullmatch(fn["name"])
                or not isinstance(fn.get("parameters", {}), dict)):
            raise EvalSetError(f"{case_id}: each tool is {{type: function, function: {{name, parameters}}}}")
    return tuple(value)


def _expectation(case_id: str, value: Any) -> Expectation:
    if not isinstance(value, dict):
        raise EvalSetError(f"{case_id}: expect is an object with one of {', '.join(EXPECTATIONS)}")
    kinds = [k for k in value if k in EXPECTATIONS]
    extra = sorted(set(value) - set(EXPECTATIONS) - {"ignore_case"})
    if len(kinds) != 1 or extra:
        raise EvalSetError(f"{case_id}: expect holds exactly one of {', '.join(EXPECTATIONS)}")
    kind = kinds[0]
    v = value[kind]
    ignore_case = value.get("ignore_case", False)
    if not isinstance(ignore_case, bool) or (ignore_case and kind not in ("contains", "not_contains", "exact")):
        raise EvalSetError(f"{case_id}: ignore_case is a boolean beside exact, contains or not_contains")
    if kind == "refuse":
        if not isinstance(v, bool):
            raise EvalSetError(f"{case_id}: refuse is true (must refuse) or false (must not)")
    elif kind == "tool_call":
        if (not isinstance(v, dict) or set(v) - {"name", "arguments"} or not isinstance(v.get("name"), str)
                or not isinstance(v.get("arguments", {}), dict)):
            raise EvalSetError(f"{case_id}: tool_call is {{name, arguments: object}}")
        v = {"name": v["name"], "arguments": v.get("arguments", {})}
    else:
        if not isinstance(v, str) or not v:
            raise EvalSetError(f"{case_id}: {kind} is a non-empty string")
        if kind == "regex":
            if len(v) > MAX_REGEX_LENGTH:
                raise EvalSetError(f"{case_id}: a regex has at most {MAX_REGEX_LENGTH} characters")
            try:
                re.compile(v)
            except re.error as e:
                raise EvalSetError(f"{case_id}: regex does not compile: {e}") from None
    return Expectation(kind, v, ignore_case)
