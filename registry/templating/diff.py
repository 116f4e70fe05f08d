"""The rendered diff of two chat templates, with what makes the new one suspicious.

:func:`chat_template_diff` renders the old and the new template on every standard conversation and
keeps, per conversation, both renderings (or why one failed) and a unified diff where they differ. Its
findings, about the new template, are the content branches (static), the text that appears only for
some inputs (rendered) and the static check's issues; ``suspicious`` is true when any finding says the
output depends on what a message says, or when the new template could not be analysed (fail closed).
``as_dict()`` is JSON-ready and bounded; the same inputs give the same bytes.

Example:
    >>> t = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\\n{% endfor %}"
    >>> d = chat_template_diff(t, t.replace(": ", "> "))
    >>> d.suspicious, d.changed[:1]
    (False, ['system-user'])
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from registry.scanning.jinja_check import check_template
from registry.templating.branches import content_branches, input_dependent_text
from registry.templating.conversations import STANDARD_CONVERSATIONS
from registry.templating.render import ChatTemplateRenderError, render_chat_template

MAX_SHOWN_CHARS = 16_000
MAX_DIFF_INPUT_CHARS = 256_000
# ``strftime_now`` reports this time in a diff, so two runs of the same diff give the same bytes.
DIFF_TIME = datetime(2026, 1, 1, 12, 0, 0)
# A template whose output depends on message content, or that could not be analysed (fail closed).
SUSPICIOUS_KINDS = frozenset({"content-branch", "input-dependent-text", "analysis-failed"})
_BOUND_REASONS = frozenset({"too-much-work", "output-too-large", "template-too-large"})


@dataclass(frozen=True)
class Rendering:
    """One template's rendering of one conversation: its text, or why it failed.

    Attributes:
        text: The rendered text, or None when the render failed or there is no template.
        error: ``{"reason": ..., "message": ...}`` when the render failed.
    """

    text: str | None
    error: dict[str, str] | None = None

    def shown(self) -> str:
        """What a reader compares: the text, or one line saying why there is none."""
        if self.error is not None:
            return f"[render failed ({self.error['reason']}): {self.error['message']}]\n"
        return self.text if self.text is not None else ""


@dataclass(frozen=True)
class ConversationDiff:
    """Both renderings of one standard conversation and their unified diff (empty when equal)."""

    name: str
    add_generation_prompt: bool
    old: Rendering | None
    new: Rendering | None
    diff: str


@dataclass(frozen=True)
class TemplateFinding:
    """Something about the new template an approver should read.

    Attributes:
        kind: ``content-branch``, ``input-dependent-text`` or ``static-check`` (an issue of
            ``jinja_check``; ``severity`` then says how bad), ``analysis-failed`` when the template
            could not be walked.
        detail: What was found.
        line: Template line, when known.
        conversation: The standard conversation it was seen on, for rendered findings.
        severity: ``suspicious`` or ``unsafe`` for static-check issues.
    """

    kind: str
    detail: str
    line: int | None = None
    conversation: str | None = None
    severity: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The finding's set fields."""
        fields = {"kind": self.kind, "detail": self.detail, "line": self.line, "conversation": self.conversation,
                  "severity": self.severity}
        return {k: v for k, v in fields.items() if v is not None}


@dataclass(frozen=True)
class ChatTemplateDiff:
    """The rendered comparison of two chat templates."""

    conversations: tuple[ConversationDiff, ...]
    findings: tuple[TemplateFinding, ...]

    @property
    def suspicious(self) -> bool:
        """Whether the new template's output depends on the content of messages, or could not be analysed."""
        return any(f.kind in SUSPICIOUS_KINDS for f in self.findings)

    @property
    def changed(self) -> list[str]:
        """Names of the conversations whose renderings differ."""
        return [c.name for c in self.conversations if c.diff]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready and bounded: each rendering and diff at most 16,000 characters, with ``*_truncated``."""
        return {
            "suspicious": self.suspicious,
            "changed": self.changed,
            "findings": [f.as_dict() for f in self.findings],
            "conversations": [_conversation_dict(c) for c in self.conversations],
        }


def _cut(text: str | None) -> tuple[str | None, bool]:
    if text is None or len(text) <= MAX_SHOWN_CHARS:
        return text, False
    return text[:MAX_SHOWN_CHARS], True


def _rendering_dict(r: Rendering | None) -> dict[str, Any] | None:
    if r is None:
        return None
    text, cut = _cut(r.text)
    out: dict[str, Any] = {"text": text, "text_truncated": cut} if r.error is None else {"error": r.error}
    return out


def _conversation_dict(c: ConversationDiff) -> dict[str, Any]:
    diff, cut = _cut(c.diff)
    return {"name": c.name, "add_generation_prompt": c.add_generation_prompt, "old": _rendering_dict(c.old),
            "new": _rendering_dict(c.new), "diff": diff, "diff_truncated": cut}


def _render(template: str | None, conversation: Any, variables: Mapping[str, Any]) -> Rendering | None:
    if template is None:
        return None
    try:
        return Rendering(render_chat_template(template, conversation.message_list(), tools=conversation.tools,
                                              add_generation_prompt=conversation.add_generation_prompt,
                                              strftime_at=DIFF_TIME, **dict(variables)))
    except ChatTemplateRenderError as exc:
        return Rendering(None, {"reason": exc.reason, "message": exc.message[:500]})


def _unified(name: str, old: Rendering | None, new: Rendering | None) -> str:
    a = old.shown() if old is not None else ""
    b = new.shown() if new is not None else ""
    if a == b:
        return ""
    # Line matching is quadratic at worst; a rendering may be up to 1 MiB.
    cut = len(a) > MAX_DIFF_INPUT_CHARS or len(b) > MAX_DIFF_INPUT_CHARS
    lines = difflib.unified_diff(a[:MAX_DIFF_INPUT_CHARS].splitlines(keepends=True),
                                 b[:MAX_DIFF_INPUT_CHARS].splitlines(keepends=True),
                                 fromfile=f"old/{name}", tofile=f"new/{name}")
    # Like git, say so when a side does not end with a newline rather than gluing two lines together.
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return text + (f"[renderings compared up to {MAX_DIFF_INPUT_CHARS} characters]\n" if cut else "")


def _findings(new: str, variables: Mapping[str, Any]) -> list[TemplateFinding]:
    found: list[TemplateFinding] = []
    try:
        found += [TemplateFinding("content-branch", f"{b.why}: {b.condition}", line=b.line)
                  for b in content_branches(new)]
    except ChatTemplateRenderError as exc:
        found.append(TemplateFinding("analysis-failed", f"the template could not be walked: {exc.message[:300]}"))
    found += [TemplateFinding("input-dependent-text", f"{t.why}: {t.text}", conversation=t.conversation)
              for t in input_dependent_text(new, variables=variables)]
    found += [TemplateFinding("static-check", f"{i.kind}: {i.detail}", severity=i.severity.value)
              for i in check_template(new)]
    return found


def chat_template_diff(old: str | None, new: str | None, *,
                       variables: Mapping[str, Any] | None = None) -> ChatTemplateDiff:
    """Render ``old`` and ``new`` on every standard conversation and compare.

    Args:
        old: The template being replaced, or None when there was none.
        new: The replacing template, or None when it is removed.
        variables: Template variables for both (the tokenizer's special tokens: ``bos_token``...).

    Returns:
        Per conversation both renderings and their diff; findings about ``new``.
    """
    variables = dict(variables or {})
    # A template past a render bound (loops, output size) is not rendered again: one costly failure is enough.
    exhausted: dict[str, Rendering] = {}

    def render(side: str, template: str | None, conversation: Any) -> Rendering | None:
        if side in exhausted:
            return exhausted[side]
        rendering = _render(template, conversation, variables)
        if rendering is not None and rendering.error is not None and rendering.error["reason"] in _BOUND_REASONS:
            exhausted[side] = Rendering(None, {"reason": rendering.error["reason"],
                                               "message": f"not rendered after {conversation.name}: "
                                                          f"{rendering.error['message']}"[:500]})
        return rendering

    conversations = []
    for conversation in STANDARD_CONVERSATIONS:
        a, b = render("old", old, conversation), render("new", new, conversation)
        conversations.append(ConversationDiff(conversation.name, conversation.add_generation_prompt, a, b,
                                              _unified(conversation.name, a, b)))
    findings = _findings(new, variables) if new is not None else []
    return ChatTemplateDiff(tuple(conversations), tuple(findings))
