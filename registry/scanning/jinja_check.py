"""Static check of chat templates: Jinja that servers render must stay plain template use.

Chat templates (GGUF ``tokenizer.chat_template``, ``tokenizer_config.json``'s ``chat_template``,
``chat_template.jinja``) are rendered by inference servers, some of them outside a sandbox
(llama-cpp-python before 0.2.72, CVE-2024-34359). A template escapes to Python by walking attributes
from an object it can reach to ``__globals__``/``__builtins__``: ``cycler.__init__.__globals__``,
``self._TemplateReference__context``, ``lipsum|attr('__globals__')``, a key built as ``'__cla' ~ 'ss__'``.

The template is parsed with Jinja's own parser and the AST is walked; **nothing is rendered**. What a
chat template legitimately needs (loops, conditionals, ``message['content']``, ``.strip()``,
``|trim``, ``|tojson``, ``namespace(...)``, ``raise_exception(...)``) never names an attribute starting
with an underscore, never touches a global function object other than by calling it, and never
builds attribute names out of string pieces. Anything else is reported. When Jinja cannot parse the
template (servers such as llama.cpp use other Jinja implementations), a conservative regex decides.

Example:
    >>> [i.kind for i in check_template("{{ cycler.__init__.__globals__.os }}")][:1]
    ['gadget']
    >>> check_template("{% for m in messages %}{{ m['content'] | trim }}{% endfor %}")
    []
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator

from registry.scanning.model import Severity

MAX_TEMPLATE_CHARS = 1_000_000

# Global callables a chat-template context offers (Jinja defaults + what HF/llama.cpp add). Calling
# them is fine; touching the function object itself (``cycler.__init__``, ``lipsum|string``) is not.
FUNCTION_GLOBALS = frozenset(
    {
        "cycler",
        "joiner",
        "lipsum",
        "namespace",
        "range",
        "dict",
        "raise_exception",
        "strftime_now",
        "self",
        "loop",
        "caller",
        "varargs",
        "kwargs",
    }
)
# Names a chat template has no reason to use at all: Python modules and builtins, Flask gadgets.
FORBIDDEN_NAMES = frozenset(
    {
        "os",
        "sys",
        "subprocess",
        "popen",
        "builtins",
        "__builtins__",
        "__import__",
        "importlib",
        "eval",
        "exec",
        "compile",
        "getattr",
        "setattr",
        "globals",
        "locals",
        "vars",
        "open",
        "url_for",
        "get_flashed_messages",
    }
)
SUSPICIOUS_NAMES = frozenset({"config", "request", "session", "g"})
# Context variables whose strings come from the model files themselves (special tokens of the
# tokenizer config, the GGUF vocabulary): an attribute name read from one is chosen by the attacker.
FILE_STRING_NAMES = frozenset(
    {
        "bos_token",
        "eos_token",
        "unk_token",
        "pad_token",
        "sep_token",
        "cls_token",
        "mask_token",
        "additional_special_tokens",
    }
)
# Attributes of Python frames, functions and generators that lead to globals without underscores.
DANGEROUS_ATTRS = frozenset(
    {
        "mro",
        "func_globals",
        "func_code",
        "im_func",
        "gi_frame",
        "gi_code",
        "cr_frame",
        "ag_frame",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_back",
        "tb_frame",
        "tb_next",
        "co_code",
    }
)
# Filters whose first positional argument (or ``attribute=``) is an attribute path.
ATTRIBUTE_FILTERS = frozenset({"selectattr", "rejectattr", "sort", "groupby", "sum", "unique", "min", "max", "map"})
# Filters and operators that build strings: their constant inputs are folded and checked.
_STRING_BUILDERS = frozenset(
    {"format", "join", "replace", "reverse", "string", "lower", "upper", "list", "first", "last"})

_STRONG_TEXT_RE = re.compile(
    r"__(?:class|globals|builtins|import|subclasses|mro|init|base|bases|dict|code|getattribute|reduce|loader|spec)__"
    r"|_TemplateReference__context|\bos\.(?:system|popen)|\bsubprocess\b|\bpopen\b",
    re.IGNORECASE,
)
_FALLBACK_RE = re.compile(
    _STRONG_TEXT_RE.pattern
    + r"|__\w+__|\|\s*attr\b|\battr\s*\(|%c|\\x5f|\\u005f|\\137"
    + r"|\b(?:cycler|joiner|lipsum)\s*\.|\bself\s*\.\s*_|\brequest\.application\b",
    re.IGNORECASE,
)
_FORMAT_FIELD_ATTR_RE = re.compile(r"\{[^{}]*[.\[][^{}]*\}")


@dataclass(frozen=True, slots=True)
class TemplateIssue:
    """One problem found in a template.

    Attributes:
        kind: ``gadget`` (reaches Python internals: unsafe), ``dynamic-attribute``, ``template-load``,
            ``unparseable``, ``too-large``, ``suspicious-name`` or ``dunder-text``.
        severity: How bad it is.
        detail: What was seen, with the template line when known.
    """

    kind: str
    severity: Severity
    detail: str


def check_template(source: str) -> list[TemplateIssue]:
    """Check one chat template without rendering it.

    Args:
        source: The template text.

    Returns:
        Issues found; an empty list for plain template use.
    """
    if not isinstance(source, str):
        return [TemplateIssue("unparseable", Severity.UNSAFE, f"template is {type(source).__name__}, not a string")]
    if len(source) > MAX_TEMPLATE_CHARS:
        issues = [TemplateIssue("too-large", Severity.SUSPICIOUS, f"template has {len(source)} characters")]
        return issues + _regex_fallback(source[: 4 * MAX_TEMPLATE_CHARS])
    try:
        ast = _parse(source)
    except RecursionError:
        return [TemplateIssue("gadget", Severity.UNSAFE, "template nests so deep the parser gives up")]
    except Exception as exc:  # jinja2.TemplateSyntaxError and whatever a hostile template provokes
        issues = [TemplateIssue("unparseable", Severity.SUSPICIOUS, f"Jinja cannot parse it: {exc}"[:300])]
        return issues + _regex_fallback(source)
    walker = _Walker()
    try:
        walker.visit(ast, None)
    except RecursionError:
        walker.add("gadget", Severity.UNSAFE, None, "template nests so deep the checker gives up")
    issues = walker.issues
    if not any(i.severity is Severity.UNSAFE for i in issues):
        match = _STRONG_TEXT_RE.search(source)
        if match:
            # Parsed clean, yet Python internals are named somewhere (plain text, a comment): note it.
            issues.append(
                TemplateIssue("dunder-text", Severity.SUSPICIOUS, f"template text names {match.group(0)!r}")
            )
    return _dedupe(issues)


def _parse(source: str) -> Any:
    import jinja2
    from jinja2.ext import Extension

    class _GenerationTag(Extension):
        # transformers' ``{% generation %}`` marker (assistant masks); parsed as its body.
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    env = jinja2.Environment(extensions=["jinja2.ext.loopcontrols", "jinja2.ext.do", _GenerationTag])
    return env.parse(source)


def _regex_fallback(source: str) -> list[TemplateIssue]:
    match = _FALLBACK_RE.search(source)
    if match:
        return [TemplateIssue("gadget", Severity.UNSAFE, f"unparsed template contains {match.group(0)!r}")]
    return []


def _dedupe(issues: list[TemplateIssue]) -> list[TemplateIssue]:
    seen: set[tuple[str, str]] = set()
    out = []
    for issue in issues:
        if (issue.kind, issue.detail) not in seen:
            seen.add((issue.kind, issue.detail))
            out.append(issue)
    return out


def _bad_attr_name(name: str) -> bool:
    return name.startswith("_") or name in DANGEROUS_ATTRS


def _bad_attr_path(value: str) -> bool:
    # make_attrgetter splits ``a.b.c``: every segment is an attribute or item lookup.
    return any(_bad_attr_name(part) for part in value.split("."))


class _Walker:
    """Walks a Jinja AST once, tracking each node's parent to judge how names are used."""

    def __init__(self) -> None:
        self.issues: list[TemplateIssue] = []
        self.local_names: set[str] = set()
        self.env: _Env = {}

    def add(self, kind: str, severity: Severity, node: Any, detail: str) -> None:
        line = getattr(node, "lineno", None)
        where = f" (line {line})" if line else ""
        self.issues.append(TemplateIssue(kind, severity, detail + where))

    def visit(self, node: Any, parent: Any) -> None:
        from jinja2 import nodes as n

        # Locally bound names (loop targets, set, macro args) are data, not global function objects.
        if isinstance(node, n.Template):
            for name_node in node.find_all(n.Name):
                if name_node.ctx in ("store", "param"):
                    self.local_names.add(name_node.name)
            self.local_names.update(m.name for m in node.find_all(n.Macro))
            self.env = _bindings(node)
        self._check(node, parent)
        for child in node.iter_child_nodes():
            self.visit(child, node)

    def _check(self, node: Any, parent: Any) -> None:
        from jinja2 import nodes as n

        U, S = Severity.UNSAFE, Severity.SUSPICIOUS
        if isinstance(node, n.Getattr):
            if _bad_attr_name(node.attr):
                self.add("gadget", U, node, f"attribute walk to {node.attr!r}")
            elif node.attr in ("format", "format_map"):
                fmt = self._fold(node.node)
                if isinstance(fmt, str) and _FORMAT_FIELD_ATTR_RE.search(fmt):
                    self.add("gadget", U, node, f"str.format with attribute lookups in {fmt!r}")
                else:
                    self.add("dynamic-attribute", S, node, "str.format call (can look up attributes)")
        elif isinstance(node, n.NSRef):
            if _bad_attr_name(node.attr):
                self.add("gadget", U, node, f"namespace attribute {node.attr!r}")
        elif isinstance(node, n.Getitem):
            self._check_key(node, node.arg, "item lookup")
        elif isinstance(node, n.Name) and node.ctx == "load":
            self._check_name(node, parent)
        elif isinstance(node, n.Keyword):
            if node.key.startswith("_"):
                self.add("gadget", U, node, f"keyword argument {node.key!r}")
        elif isinstance(node, (n.Filter, n.Test)):
            self._check_filter(node)
        elif isinstance(node, n.Const) and isinstance(node.value, str):
            self._check_const(node)
        elif isinstance(node, (n.Concat, n.Add, n.Mul, n.Mod)):
            folded = self._fold(node)
            if isinstance(folded, str) and (re.search(r"__\w+__", folded) or _STRONG_TEXT_RE.search(folded)):
                self.add("gadget", U, node, f"string built from pieces spells {folded[:80]!r}")
            if isinstance(node, n.Mod) and isinstance(self._fold(node.left), str) and "%c" in self._fold(node.left):
                self.add("gadget", U, node, "%c formatting builds characters from numbers")
        elif isinstance(node, (n.Include, n.Import, n.FromImport, n.Extends)):
            self.add("template-load", S, node, f"{type(node).__name__.lower()} loads another template")

    def _fold(self, node: Any) -> Any:
        return _fold(node, 0, self.env)

    def _check_key(self, node: Any, key: Any, what: str) -> None:

        folded = self._fold(key)
        if isinstance(folded, str):
            if _bad_attr_name(folded):
                self.add("gadget", Severity.UNSAFE, node, f"{what} of {folded!r}")
            return
        if folded is not None:
            return  # an integer index
        if self._check_file_string(node, key, what):
            return
        # A key that is not a constant: fine when it is data (``message[key]``), an attack when it is
        # assembled at render time. Jinja's subscript falls back to getattr, so a key built from
        # pieces (``u ~ u ~ 'class' ~ u ~ u`` with ``{% set u = '_' %}``, a character cut out of a
        # string, ``'%c'|format(95)``) reaches any attribute. Local ``set``/``for``/macro bindings are
        # followed, so moving a piece into a variable does not hide it.
        self._check_built(node, key, what)

    def _check_file_string(self, node: Any, key: Any, what: str) -> bool:
        """Report a key or attribute name read from a string the model file sets; True when reported.

        Jinja's subscript falls back to ``getattr``, so ``()[eos_token]`` with ``eos_token`` set to
        ``__class__`` (or a loop over ``eos_token.split(',')``) walks to Python internals while the
        template itself names nothing: the attribute names travel in the tokenizer's own strings.
        """
        name = _file_string_source(key, self.env)
        if name is None:
            return False
        self.add("gadget", Severity.UNSAFE, node, f"{what} taken from {name!r}, a string the model file sets")
        return True

    def _check_built(self, node: Any, key: Any, what: str) -> bool:
        """Report a non-constant name/key assembled by the template; True when reported."""
        from jinja2 import nodes as n

        if isinstance(key, n.Const):
            self.add("gadget", Severity.UNSAFE, node, f"{what} with a key assembled from {[key.value]!r}")
            return True
        if not _is_built(key, self.env):
            return False
        ev = _Evidence()
        ev.collect(key, self.env)
        if ev.char_pieces or ev.char_ops:
            self.add(
                "gadget",
                Severity.UNSAFE,
                node,
                f"{what} assembled at render time from {sorted(ev.char_pieces)[:4]!r}"
                f"{' and ' + ', '.join(sorted(ev.char_ops)) if ev.char_ops else ''}",
            )
        else:
            self.add("dynamic-attribute", Severity.SUSPICIOUS, node,
                     f"{what} assembled at render time from {sorted(ev.consts)[:4]!r}")
        return True

    def _check_name(self, node: Any, parent: Any) -> None:
        from jinja2 import nodes as n

        name = node.name
        if name in FORBIDDEN_NAMES:
            self.add("gadget", Severity.UNSAFE, node, f"uses {name!r}")
            return
        if name in SUSPICIOUS_NAMES and name not in self.local_names:
            self.add("suspicious-name", Severity.SUSPICIOUS, node, f"uses {name!r}")
            return
        if name in FUNCTION_GLOBALS and name not in self.local_names:
            if name in ("loop", "caller", "varargs", "kwargs"):
                return  # bound by Jinja inside loops and macros
            called = isinstance(parent, n.Call) and parent.node is node
            if not called:
                self.add("gadget", Severity.UNSAFE, node, f"global function {name!r} used as an object, not called")

    def _check_filter(self, node: Any) -> None:
        from jinja2 import nodes as n

        U = Severity.UNSAFE
        name = node.name
        if name == "attr":
            if not node.args:
                self.add("dynamic-attribute", Severity.SUSPICIOUS, node, "|attr without argument")
            else:
                value = self._fold(node.args[0])
                if not isinstance(value, str):
                    self.add("gadget", U, node, "|attr with a computed attribute name")
                elif _bad_attr_name(value):
                    self.add("gadget", U, node, f"|attr({value!r})")
                else:
                    self.add("dynamic-attribute", Severity.SUSPICIOUS, node, f"|attr({value!r})")
        elif name in ATTRIBUTE_FILTERS:
            candidates = [kw.value for kw in node.kwargs if kw.key == "attribute"]
            if node.args and name != "map":
                candidates.append(node.args[0])
            if name == "map":
                candidates.extend(node.args[1:])
                if node.args and self._fold(node.args[0]) == "attr":
                    self.add("dynamic-attribute", Severity.SUSPICIOUS, node, "|map('attr', ...)")
            for arg in candidates:
                value = self._fold(arg)
                if isinstance(value, str) and _bad_attr_path(value):
                    self.add("gadget", U, node, f"|{name} on attribute {value!r}")
                elif value is None and self._check_file_string(node, arg, f"|{name} attribute"):
                    pass
                elif value is None and not isinstance(arg, n.Name):
                    self.add("gadget", U, node, f"|{name} with a computed attribute name")
                elif value is None:
                    self._check_built(node, arg, f"|{name} attribute")
        elif name == "format" and node.node is not None:
            fmt = self._fold(node.node)
            if isinstance(fmt, str) and "%c" in fmt:
                self.add("gadget", U, node, "|format with %c builds characters from numbers")
        if node.dyn_args is not None or node.dyn_kwargs is not None:
            self.add("dynamic-attribute", Severity.SUSPICIOUS, node, f"|{name} with *args/**kwargs")

    def _check_const(self, node: Any) -> None:
        value: str = node.value
        if "_TemplateReference__" in value or re.search(r"__\w+__", value):
            self.add("gadget", Severity.UNSAFE, node, f"string constant {value[:80]!r} names Python internals")
        elif re.match(r"__[A-Za-z]", value) or re.search(r"[A-Za-z]__$", value) or "%c" in value:
            self.add("gadget", Severity.UNSAFE, node, f"string constant {value[:80]!r} looks like a dunder fragment")


_Env = dict[str, list[Any]]
"""Local bindings: ``name`` or ``ns.attr`` -> the expressions (or ``("iter", expr)``) bound to it."""
_MAX_BINDINGS = 10_000


def _bindings(template: Any) -> _Env:
    """Collect what each local name can hold: ``set``, ``for`` targets, macro arguments, namespace/dict fields."""
    from jinja2 import nodes as n

    env: _Env = {}

    def bind(key: str, value: Any) -> None:
        if sum(len(v) for v in env.values()) < _MAX_BINDINGS:
            env.setdefault(key, []).append(value)

    def bind_target(target: Any, value: Any) -> None:
        if isinstance(target, n.Name):
            bind(target.name, value)
        elif isinstance(target, n.NSRef):
            bind(f"{target.name}.{target.attr}", value)
        elif isinstance(target, n.Tuple):
            same_shape = isinstance(value, (n.Tuple, n.List)) and len(value.items) == len(target.items)
            items = value.items if same_shape else None
            for i, item in enumerate(target.items):
                bind_target(item, items[i] if items is not None else ("opaque", value))

    macros: dict[str, Any] = {}
    for node in template.find_all((n.Assign, n.AssignBlock, n.For, n.Macro)):
        if isinstance(node, n.Assign):
            bind_target(node.target, node.node)
            value = node.node
            if isinstance(node.target, n.Name):
                # ``namespace(k=...)`` / ``dict(k=...)`` / ``{'k': ...}``: their fields are bindings too.
                if (isinstance(value, n.Call) and isinstance(value.node, n.Name)
                        and value.node.name in ("namespace", "dict")):
                    for kw in value.kwargs:
                        bind(f"{node.target.name}.{kw.key}", kw.value)
                elif isinstance(value, n.Dict):
                    for pair in value.items:
                        if isinstance(pair.key, n.Const) and isinstance(pair.key.value, str):
                            bind(f"{node.target.name}.{pair.key.value}", pair.value)
        elif isinstance(node, n.AssignBlock):
            bind_target(node.target, ("block", node))
        elif isinstance(node, n.For):
            bind_target(node.target, ("iter", node.iter))
        else:
            macros[node.name] = node
            offset = len(node.args) - len(node.defaults)
            for i, default in enumerate(node.defaults):
                bind(node.args[offset + i].name, default)
    for call in template.find_all(n.Call):
        macro = macros.get(call.node.name) if isinstance(call.node, n.Name) else None
        if macro is None:
            continue
        params = [a.name for a in macro.args]
        for i, arg in enumerate(call.args[: len(params)]):
            bind(params[i], arg)
        for kw in call.kwargs:
            if kw.key in params:
                bind(kw.key, kw.value)
    return env


def _lookup(node: Any, env: _Env) -> list[Any] | None:
    """The bindings an expression reads, when it reads a local name or namespace/dict field."""
    from jinja2 import nodes as n

    if isinstance(node, n.Name):
        return env.get(node.name)
    if isinstance(node, (n.Getattr, n.NSRef)):
        base = node.name if isinstance(node, n.NSRef) else (node.node.name if isinstance(node.node, n.Name) else None)
        return env.get(f"{base}.{node.attr}") if base else None
    if isinstance(node, n.Getitem) and isinstance(node.node, n.Name) and isinstance(node.arg, n.Const):
        return env.get(f"{node.node.name}.{node.arg.value}")
    return None


# Filters that yield numbers or booleans: an index computed with them is arithmetic, not a name.
_NUMERIC_FILTERS = frozenset({"int", "float", "length", "count", "abs", "round", "sum", "max", "min", "bool"})


def _is_built(node: Any, env: _Env, depth: int = 0, seen: set[int] | None = None) -> bool:
    """True when a value is assembled by the template (string operations, character cuts), not read from data."""
    from jinja2 import nodes as n

    seen = set() if seen is None else seen
    if depth > 30 or id(node) in seen:
        return False
    seen.add(id(node))

    def built(x: Any) -> bool:
        return _is_built(x, env, depth + 1, seen)

    if isinstance(node, tuple):
        kind, inner = node
        if kind == "block":
            return True
        if kind == "iter":
            # A loop over a literal list of strings picks template constants, e.g. ``for u in ['_']``.
            return isinstance(inner, (n.List, n.Tuple)) or built(inner)
        return built(inner)
    if isinstance(node, n.Const):
        return False
    if isinstance(node, n.Concat):
        return True
    if isinstance(node, (n.Add, n.Mul, n.Mod)):
        # ``ns.i + 1`` is an index; ``u + 'class'`` or ``'%c' % 95`` is a name being made.
        return any(isinstance(x, n.Const) and isinstance(x.value, str) or built(x) for x in (node.left, node.right))
    if isinstance(node, n.Filter):
        return node.name not in _NUMERIC_FILTERS
    if isinstance(node, n.CondExpr):
        return built(node.expr1) or (node.expr2 is not None and built(node.expr2))
    if isinstance(node, n.Getitem) and (isinstance(node.arg, n.Slice) or isinstance(node.node, n.Const)):
        return True  # a cut out of a string
    bound = _lookup(node, env)
    if bound:
        return any(built(b) for b in bound)
    return False


def _file_string_source(node: Any, env: _Env, depth: int = 0, seen: set[int] | None = None) -> str | None:
    """The special-token variable whose *string* an expression's value carries, if any.

    Followed through local bindings, string methods and filters, cuts, concatenation and loops;
    numbers and booleans made from a token (``eos_token|length``, a slice bound, a test) carry no
    attribute name and are not followed.
    """
    from jinja2 import nodes as n

    seen = set() if seen is None else seen
    if depth > 30 or id(node) in seen or len(seen) > 5000:
        return None
    seen.add(id(node))

    def follow(x: Any) -> str | None:
        return _file_string_source(x, env, depth + 1, seen)

    def first(items: Any) -> str | None:
        for item in items:
            found = follow(item)
            if found is not None:
                return found
        return None

    if isinstance(node, tuple):
        kind, inner = node
        if kind == "block":
            return first(inner.find_all(n.Name)) if isinstance(inner, n.Node) else None
        return follow(inner) if isinstance(inner, n.Node) else None
    if isinstance(node, n.Name):
        if node.name in env:
            return first(env[node.name])
        return node.name if node.name in FILE_STRING_NAMES else None
    if isinstance(node, (n.Getattr, n.NSRef)):
        bound = _lookup(node, env)
        if bound:
            return first(bound)
        return follow(node.node) if isinstance(node, n.Getattr) else None
    if isinstance(node, n.Getitem):
        bound = _lookup(node, env)
        if bound:
            return first(bound)
        return follow(node.node)
    if isinstance(node, n.Call):
        # A method of a token string (``eos_token.split(',')``) returns pieces of it.
        return follow(node.node) if isinstance(node.node, n.Getattr) else None
    if isinstance(node, n.Filter):
        if node.name in _NUMERIC_FILTERS:
            return None
        return first([node.node, *node.args] if node.node is not None else node.args)
    if isinstance(node, (n.Concat,)):
        return first(node.nodes)
    if isinstance(node, (n.Add, n.Mul, n.Mod)):
        return first((node.left, node.right))
    if isinstance(node, n.CondExpr):
        return first([node.expr1] + ([node.expr2] if node.expr2 is not None else []))
    if isinstance(node, (n.List, n.Tuple)):
        return first(node.items)
    return None


class _Evidence:
    """What a built value is made of: string pieces and the operations that make characters."""

    def __init__(self) -> None:
        self.consts: set[str] = set()
        self.char_pieces: set[str] = set()
        self.char_ops: set[str] = set()
        self._seen: set[int] = set()

    def collect(self, node: Any, env: _Env, depth: int = 0) -> None:
        from jinja2 import nodes as n

        if depth > 30 or id(node) in self._seen or len(self._seen) > 5000:
            return
        self._seen.add(id(node))
        if isinstance(node, tuple):
            self.collect(node[1], env, depth + 1)
            return
        for sub in [node, *node.find_all(n.Node)]:
            if isinstance(sub, n.Const) and isinstance(sub.value, str):
                self.consts.add(sub.value)
                if "_" in sub.value or "%c" in sub.value or "{:c}" in sub.value:
                    self.char_pieces.add(sub.value)
            elif isinstance(sub, n.TemplateData) and "_" in sub.data:
                self.char_pieces.add(sub.data[:40])
            elif isinstance(sub, n.Getitem) and (
                isinstance(sub.arg, n.Slice) or (isinstance(sub.arg, n.Const) and isinstance(sub.arg.value, int))
            ):
                self.char_ops.add("a character cut from a string")
            elif isinstance(sub, (n.Mod, n.Filter)) and (
                isinstance(sub, n.Mod)
                or sub.name in ("format", "first", "last", "list", "string", "join", "replace", "reverse", "batch",
                                "slice")
            ):
                self.char_ops.add(f"{'%' if isinstance(sub, n.Mod) else '|' + sub.name}")
            elif isinstance(sub, n.Getattr) and sub.attr in ("format", "format_map", "join", "replace"):
                self.char_ops.add(f".{sub.attr}()")
            bound = _lookup(sub, env) if isinstance(sub, (n.Name, n.Getattr, n.NSRef, n.Getitem)) else None
            for b in bound or []:
                self.collect(b, env, depth + 1)


def _fold(node: Any, depth: int = 0, env: _Env | None = None) -> Any:
    """Evaluate a constant string/number expression without rendering; ``None`` if not constant.

    With ``env``, a local name bound exactly once (``{% set u = '_' %}``, a loop over a one-item
    literal list) folds to its value.
    """
    from jinja2 import nodes as n

    if depth > 50:
        return None
    if isinstance(node, n.Const):
        return node.value
    if env is not None:
        bound = _lookup(node, env)
        if bound is not None:
            if len(bound) != 1:
                return None
            value = bound[0]
            if isinstance(value, tuple):
                if value[0] != "iter":
                    return None
                items = _fold(value[1], depth + 1, env)
                return items[0] if isinstance(items, list) and len(items) == 1 else None
            return _fold(value, depth + 1, env)
    if isinstance(node, n.Getitem) and isinstance(node.arg, n.Const) and isinstance(node.arg.value, int):
        base = _fold(node.node, depth + 1, env)
        if isinstance(base, (str, list)) and -len(base) <= node.arg.value < len(base):
            return base[node.arg.value]
        return None
    if isinstance(node, n.Concat):
        parts = [_fold(x, depth + 1, env) for x in node.nodes]
        if all(p is not None for p in parts):
            return "".join(str(p) for p in parts)[:10_000]
        return None
    if isinstance(node, (n.Add, n.Mul, n.Mod)):
        left, right = _fold(node.left, depth + 1, env), _fold(node.right, depth + 1, env)
        if left is None or right is None:
            return None
        try:
            if isinstance(node, n.Add) and isinstance(left, str) and isinstance(right, str):
                return (left + right)[:10_000]
            if isinstance(node, n.Mul) and isinstance(left, str) and isinstance(right, int) and right < 1000:
                return left * right
            if isinstance(node, n.Mod) and isinstance(left, str):
                return (left % right)[:10_000]
        except (TypeError, ValueError, OverflowError):
            return None
        return None
    if isinstance(node, n.Filter) and node.name in _STRING_BUILDERS and node.node is not None:
        base = _fold(node.node, depth + 1, env)
        args = [_fold(a, depth + 1, env) for a in node.args]
        if base is None or any(a is None for a in args):
            return None
        try:
            if node.name == "format" and isinstance(base, str):
                return (base % tuple(args))[:10_000]
            if node.name == "join" and isinstance(base, (list, tuple)):
                return (args[0] if args else "").join(str(x) for x in base)[:10_000]
            if node.name == "replace" and isinstance(base, str) and len(args) >= 2:
                return base.replace(str(args[0]), str(args[1]))[:10_000]
            if node.name == "reverse" and isinstance(base, str):
                return base[::-1]
            if node.name in ("lower", "upper", "string") and isinstance(base, str):
                return getattr(base, node.name)() if node.name != "string" else base
        except (TypeError, ValueError, OverflowError):
            return None
        return None
    if isinstance(node, (n.List, n.Tuple)):
        items = [_fold(x, depth + 1, env) for x in node.items]
        return items if all(i is not None for i in items) else None
    return None


def iter_chat_templates(value: Any) -> Iterator[tuple[str, Any]]:
    """Yield ``(label, template)`` from a ``chat_template`` value: a string or ``[{name, template}]``."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, dict):
                yield f"[{i}]{'(' + str(item.get('name')) + ')' if item.get('name') else ''}", item.get("template")
            else:
                yield f"[{i}]", item
    else:
        yield "", value
