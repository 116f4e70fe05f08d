"""Render chat templates exactly as transformers does, and the registry's prompt templates, in Jinja's sandbox.

A chat template is rendered the way ``tokenizer.apply_chat_template(messages, tokenize=False)`` of
transformers 5 renders it: an immutable sandboxed environment with ``trim_blocks`` and
``lstrip_blocks``, the ``loopcontrols`` extension and ``{% generation %}`` blocks, a ``tojson`` that
does not escape HTML and keeps non-ASCII (``ensure_ascii=False``), ``raise_exception``,
``strftime_now``, a ``dict`` and a ``namespace`` that refuse underscore names; the messages are rebuilt
from plain JSON types first, keys whose value is ``None`` are dropped, and a message's reasoning is
offered under ``reasoning_content`` and ``thinking``. Special tokens (``bos_token``...) are passed as
variables, as the tokenizer passes its ``special_tokens_map``.

The work is bounded: the template's size, the output's size, the loop iterations and the strings a
template builds; a template that raises, loops or grows past a bound gives a
:class:`ChatTemplateRenderError` with a ``reason``.

Example:
    >>> render_chat_template("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}",
    ...                      [{"role": "user", "content": "hi"}], add_generation_prompt=True)
    '<|user|>hi'
    >>> render_prompt_template("Answer in {{ language }}.", {"language": "German"}, ["language"])
    'Answer in German.'
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import json
import re
import time
from datetime import datetime
from typing import Any, Iterable, Iterator, Mapping, Sequence

from registry.domain.errors import InvalidInputError
from registry.scanning.jinja_check import MAX_TEMPLATE_CHARS, check_template
from registry.scanning.model import Severity

MAX_OUTPUT_CHARS = 1 << 20
# Strings a template builds (``~``, ``*``, ``%``) and iterations of all its loops in one render.
MAX_BUILT_CHARS = 4 << 20
MAX_LOOP_STEPS = 2_000_000
MAX_RENDER_SECONDS = 5.0
# How deep and how large the messages, tools and variables handed to a template may be.
MAX_DATA_DEPTH = 32
MAX_DATA_ITEMS = 200_000
MAX_PROMPT_VARIABLES = 64
MAX_VARIABLE_CHARS = 256 * 1024
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_FORMAT_WIDTH_RE = re.compile(r"%[-+ #0]*(\d+)|\{[^{}]*:[^{}]*?(\d+)[^{}]*\}")


class ChatTemplateRenderError(InvalidInputError):
    """A chat template could not be rendered on the given input.

    Attributes:
        reason: ``template-too-large``, ``syntax``, ``raised`` (the template called ``raise_exception``),
            ``security`` (the sandbox refused an operation), ``output-too-large``, ``too-much-work``
            (loops, built strings or time past their bounds), ``bad-input`` or ``error``.
    """

    code = "chat-template-render"

    def __init__(self, message: str, *, reason: str, line: int | None = None) -> None:
        super().__init__(message[:1000], reason=reason, line=line)
        self.reason = reason
        self.line = line


class PromptTemplateError(InvalidInputError):
    """A prompt template is malformed, or its variables do not match what it declares."""

    code = "prompt-template"


class _Raised(Exception):
    """Marks what ``raise_exception`` throws (a Jinja ``TemplateError``, as in transformers) as the template's own."""


class _TooMuchWork(Exception):
    """A render went past a bound on loops, built values or time."""


@dataclasses.dataclass
class _Budget:
    deadline: float
    steps: int = 0


_budget: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("chat_template_budget", default=None)


def _spend(steps: int) -> None:
    budget = _budget.get()
    if budget is None:
        return
    budget.steps += steps
    if budget.steps > MAX_LOOP_STEPS:
        raise _TooMuchWork(f"the template loops more than {MAX_LOOP_STEPS} times")
    if budget.steps % 1024 < steps and time.monotonic() > budget.deadline:
        raise _TooMuchWork(f"the render takes longer than {MAX_RENDER_SECONDS:g} seconds")


def _check_built(value: Any) -> Any:
    if isinstance(value, (str, list, tuple)) and len(value) > MAX_BUILT_CHARS:
        raise _TooMuchWork(f"the template builds a value of more than {MAX_BUILT_CHARS} items")
    _spend(1)
    return value


def _bounded_iter(iterable: Any) -> Iterator[Any]:
    for item in iterable:
        _spend(1)
        yield item


@functools.cache
def _generation_block() -> type:
    import jinja2.ext

    class _GenerationBlock(jinja2.ext.Extension):
        # transformers' ``{% generation %}`` marks assistant text for token masks; its output is its body.
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    return _GenerationBlock


@functools.cache
def _environment(strict: bool) -> Any:
    import jinja2
    import jinja2.ext
    from jinja2 import nodes
    from jinja2.compiler import CodeGenerator
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _BoundedCodeGenerator(CodeGenerator):
        # ``~`` compiles to a plain join, out of the sandbox's reach: check what it builds.
        def visit_Concat(self, node: Any, frame: Any) -> None:
            self.write("environment.check_built(")
            super().visit_Concat(node, frame)
            self.write(")")

    class _Namespace(jinja2.utils.Namespace):
        # Underscore names on a namespace lead to Python internals; transformers refuses them too.
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                _Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            _Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} starts with an underscore")

    class _Dict:
        # The ``dict`` global as a callable object with ``fromkeys``, never the type itself.
        def __call__(self, *args: Any, **kwargs: Any) -> dict:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
            return dict.fromkeys(*args, **kwargs)

    class _Environment(ImmutableSandboxedEnvironment):
        code_generator_class = _BoundedCodeGenerator
        intercepted_binops = frozenset({"*", "**", "%"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "**":
                if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
                    if right * abs(left).bit_length() > 64 * 1024:
                        raise _TooMuchWork("the template raises a number to a power too large to compute")
                return left**right
            if operator == "*":
                for seq, count in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
                        if len(seq) * count > MAX_BUILT_CHARS:
                            raise _TooMuchWork(f"the template builds a value of more than {MAX_BUILT_CHARS} items")
                return _check_built(left * right)
            if isinstance(left, str):
                _check_format_widths(left)
            return _check_built(left % right)

        def _parse(self, source: str, name: Any, filename: Any) -> Any:
            # Every ``for`` loop draws from one budget per render, so nested loops cannot run for ever.
            template = super()._parse(source, name, filename)
            for loop in template.find_all(nodes.For):
                loop.iter = nodes.Call(nodes.EnvironmentAttribute("bounded_iter"), [loop.iter], [], None, None,
                                       lineno=loop.lineno)
            return template

    def raise_exception(message: Any) -> None:
        raise _RaisedTemplateError(str(message))

    class _RaisedTemplateError(jinja2.exceptions.TemplateError, _Raised):
        pass

    def tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return _check_built(json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                                       sort_keys=sort_keys))

    def strftime_now(fmt: str) -> str:
        if not isinstance(fmt, str) or len(fmt) > 256:
            raise jinja2.exceptions.TemplateError("strftime_now takes a format string of at most 256 characters")
        now = _now.get()
        return (now if now is not None else datetime.now()).strftime(fmt)

    def bounded_format(value: Any, *args: Any, **kwargs: Any) -> str:
        if isinstance(value, str):
            _check_format_widths(value)
        return _check_built(format_filter(value, *args, **kwargs))

    def bounded_center(value: Any, width: int = 80) -> str:
        if isinstance(width, int) and width > MAX_BUILT_CHARS:
            raise _TooMuchWork(f"the template builds a value of more than {MAX_BUILT_CHARS} items")
        return center_filter(value, width)

    env = _Environment(trim_blocks=True, lstrip_blocks=True, extensions=[_generation_block(), jinja2.ext.loopcontrols],
                       undefined=jinja2.StrictUndefined if strict else jinja2.Undefined)
    format_filter, center_filter = env.filters["format"], env.filters["center"]
    env.filters.update(tojson=tojson, format=bounded_format, center=bounded_center)
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=_Dict(), namespace=_Namespace)
    env.bounded_iter = _bounded_iter
    env.check_built = _check_built
    return env


_now: contextvars.ContextVar[datetime | None] = contextvars.ContextVar("chat_template_now", default=None)


def parse_chat_template(template: str) -> Any:
    """The template's Jinja AST as transformers' environment parses it; nothing is rendered.

    Raises:
        ChatTemplateRenderError: The template is too large or does not parse.
    """
    import jinja2
    import jinja2.ext

    source = _checked_source(template)
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                             extensions=[_generation_block(), jinja2.ext.loopcontrols])
    try:
        return env.parse(source)
    except Exception as exc:  # TemplateSyntaxError, RecursionError on hostile nesting
        raise _translate(exc) from None


def _check_format_widths(fmt: str) -> None:
    for match in _FORMAT_WIDTH_RE.finditer(fmt[:100_000]):
        width = match.group(1) or match.group(2)
        if width and int(width[:12]) > MAX_BUILT_CHARS:
            raise _TooMuchWork(f"the template formats a field {width[:12]} characters wide")


@functools.lru_cache(maxsize=32)
def _compile(template: str, strict: bool = False) -> Any:
    return _environment(strict).from_string(template)


def _plain(value: Any, depth: int = 0, count: list[int] | None = None) -> Any:
    """``value`` rebuilt from plain JSON types, as transformers hands data to a template.

    Anything else becomes a placeholder naming its type (``<ndarray>``), so no object with methods
    the sandbox does not know reaches the template.
    """
    count = [0] if count is None else count
    count[0] += 1
    if depth > MAX_DATA_DEPTH or count[0] > MAX_DATA_ITEMS:
        raise ChatTemplateRenderError(
            f"the template input nests deeper than {MAX_DATA_DEPTH} or holds more than {MAX_DATA_ITEMS} items",
            reason="bad-input")
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k, depth + 1, count): _plain(v, depth + 1, count) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, depth + 1, count) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v, depth + 1, count) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name), depth + 1, count) for f in dataclasses.fields(value)}
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump(), depth + 1, count)
    return f"<{type(value).__name__}>"


def _chat(messages: Any) -> list[dict]:
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ChatTemplateRenderError("messages must be a non-empty list of message objects", reason="bad-input")
    chat = _plain([m.model_dump() if callable(getattr(m, "model_dump", None)) else m for m in messages])
    out = []
    for message in chat:
        if not isinstance(message, dict):
            raise ChatTemplateRenderError(f"a message is {type(message).__name__}, not an object", reason="bad-input")
        message = {k: v for k, v in message.items() if v is not None}
        reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def _render(compiled: Any, variables: dict[str, Any]) -> str:
    budget_token = _budget.set(_Budget(deadline=time.monotonic() + MAX_RENDER_SECONDS))
    try:
        parts: list[str] = []
        size = 0
        for chunk in compiled.generate(**variables):
            size += len(chunk)
            if size > MAX_OUTPUT_CHARS:
                raise ChatTemplateRenderError(f"the rendering is longer than {MAX_OUTPUT_CHARS} characters",
                                              reason="output-too-large")
            parts.append(chunk)
            _spend(1)
        return "".join(parts)
    finally:
        _budget.reset(budget_token)


def _translate(exc: BaseException) -> ChatTemplateRenderError:
    import jinja2

    line = getattr(exc, "lineno", None)
    if isinstance(exc, ChatTemplateRenderError):
        return exc
    if isinstance(exc, _Raised):
        return ChatTemplateRenderError(f"the template raised: {exc}", reason="raised")
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return ChatTemplateRenderError(f"the template does not parse: {exc.message} (line {line})",
                                       reason="syntax", line=line)
    if isinstance(exc, jinja2.exceptions.SecurityError):
        return ChatTemplateRenderError(f"the sandbox refused: {exc}", reason="security")
    if isinstance(exc, (_TooMuchWork, RecursionError, MemoryError, OverflowError)):
        return ChatTemplateRenderError(f"the template does too much work: {exc or type(exc).__name__}",
                                       reason="too-much-work")
    return ChatTemplateRenderError(f"the template failed: {type(exc).__name__}: {exc}", reason="error")


def _checked_source(template: Any) -> str:
    if not isinstance(template, str):
        raise ChatTemplateRenderError(f"the template is {type(template).__name__}, not text", reason="bad-input")
    if len(template) > MAX_TEMPLATE_CHARS:
        raise ChatTemplateRenderError(f"the template has {len(template)} characters; at most {MAX_TEMPLATE_CHARS}",
                                      reason="template-too-large")
    return template


def render_chat_template(template: str, messages: list[dict], *, tools: list[dict] | None = None,
                         documents: list[dict] | None = None, add_generation_prompt: bool = False,
                         strftime_at: datetime | None = None, **extra: Any) -> str:
    """Render a chat template as ``apply_chat_template(messages, tokenize=False, ...)`` renders it.

    Args:
        template: The Jinja text of the chat template.
        messages: The conversation: objects with ``role`` and ``content`` (and ``tool_calls``...).
        tools: JSON schemas of the tools offered, or None.
        documents: Documents for retrieval templates (objects with ``title`` and ``text``), or None.
        add_generation_prompt: Whether to end with the header that starts an assistant turn.
        strftime_at: The time ``strftime_now`` reports (the current time when None), so a diff is repeatable.
        **extra: Further template variables: the tokenizer's special tokens (``bos_token``, ``eos_token``...)
            and whatever the template reads (``enable_thinking``...).

    Returns:
        The rendered text.

    Raises:
        ChatTemplateRenderError: The template is too large or does not parse, the input is malformed, or
            the render raised, was refused by the sandbox or went past a bound.
    """
    source = _checked_source(template)
    if tools is not None and not all(isinstance(t, Mapping) for t in tools):
        raise ChatTemplateRenderError("tools must be a list of JSON schema objects", reason="bad-input")
    if documents is not None and not all(isinstance(d, Mapping) for d in documents):
        raise ChatTemplateRenderError("documents must be a list of objects with 'title' and 'text'",
                                      reason="bad-input")
    variables = {"messages": _chat(messages), "tools": _plain(tools), "documents": _plain(documents),
                 "add_generation_prompt": add_generation_prompt, **_plain(extra)}
    now_token = _now.set(strftime_at)
    try:
        return _render(_compile(source), variables)
    except Exception as exc:  # whatever a template provokes: Jinja errors, TypeError, our bounds
        raise _translate(exc) from None
    finally:
        _now.reset(now_token)


def declared_variables(text: str) -> list[str]:
    """The variables a prompt template reads from its caller, sorted (the sandbox's globals left out).

    Args:
        text: The Jinja text of the prompt template.

    Raises:
        PromptTemplateError: The template is too large, does not parse or reaches for Python internals.
    """
    import jinja2
    from jinja2 import meta

    if not isinstance(text, str) or len(text) > MAX_TEMPLATE_CHARS:
        raise PromptTemplateError(f"a prompt template is text of at most {MAX_TEMPLATE_CHARS} characters")
    env = _environment(True)
    try:
        ast = env.parse(text)
    except jinja2.TemplateSyntaxError as exc:
        raise PromptTemplateError(f"the prompt template does not parse: {exc.message} (line {exc.lineno})",
                                  line=exc.lineno) from None
    except RecursionError:
        raise PromptTemplateError("the prompt template nests too deep") from None
    unsafe = [i.detail for i in check_template(text) if i.severity is Severity.UNSAFE]
    if unsafe:
        raise PromptTemplateError(f"the prompt template reaches for Python internals: {unsafe[0]}", issues=unsafe[:8])
    return sorted(set(meta.find_undeclared_variables(ast)) - set(env.globals))


def render_prompt_template(text: str, variables: Mapping[str, str], declared: Sequence[str]) -> str:
    """Render a registry-held prompt template with exactly its declared variables.

    Args:
        text: The Jinja text of the prompt template.
        variables: Name -> value (a string) for this render.
        declared: The variable names the template was registered with.

    Returns:
        The rendered text.

    Raises:
        PromptTemplateError: The template uses a variable it does not declare, a declared variable is
            missing or an undeclared one given, a value is not a string, or the render fails.
    """
    declared_set = _names(declared, "declared")
    given = _names(list(variables), "given")
    used = set(declared_variables(text))
    if used - declared_set:
        raise PromptTemplateError(f"the prompt template uses undeclared variables {sorted(used - declared_set)}",
                                  undeclared=sorted(used - declared_set))
    if declared_set - given:
        raise PromptTemplateError(f"missing values for {sorted(declared_set - given)}",
                                  missing=sorted(declared_set - given))
    if given - declared_set:
        raise PromptTemplateError(f"values given for undeclared variables {sorted(given - declared_set)}",
                                  extra=sorted(given - declared_set))
    for name, value in variables.items():
        if not isinstance(value, str) or len(value) > MAX_VARIABLE_CHARS:
            raise PromptTemplateError(f"variable {name!r} must be a string of at most {MAX_VARIABLE_CHARS} characters",
                                      variable=name)
    try:
        return _render(_compile(text, True), dict(variables))
    except Exception as exc:  # Jinja errors, StrictUndefined, the sandbox's refusals, our bounds
        cause = _translate(exc)
        raise PromptTemplateError(f"the prompt template failed to render: {cause.message}",
                                  reason=cause.reason) from None


def _names(names: Iterable[Any], what: str) -> set[str]:
    names = list(names)
    if len(names) > MAX_PROMPT_VARIABLES:
        raise PromptTemplateError(f"at most {MAX_PROMPT_VARIABLES} variables may be {what}")
    bad = [n for n in names if not (isinstance(n, str) and n.isidentifier() and not n.startswith("_"))]
    if bad:
        raise PromptTemplateError(f"{what} variable names must be identifiers not starting with '_': {bad[:4]!r}")
    if len(set(names)) != len(names):
        raise PromptTemplateError(f"a variable is {what} twice")
    return set(names)
