"""Chat templates and prompt templates: render them as the serving stack does, and show what a change does.

- :func:`render_chat_template` renders byte-identically to transformers' ``apply_chat_template(...,
  tokenize=False)``; :func:`render_prompt_template` renders a registry-held prompt template with exactly
  its declared variables (:func:`declared_variables`).
- :data:`STANDARD_CONVERSATIONS` are the fixed conversations a diff renders.
- :func:`content_branches` and :func:`input_dependent_text` name what depends on the content of messages.
- :func:`chat_template_diff` renders an old and a new template and compares them for an approver.

Pure logic over template text: no database, files or network. Imports jinja2, ``registry.domain`` and
``registry.scanning.jinja_check`` only.

Example:
    >>> chat_template_diff(None, "{% for m in messages %}{{ m.content }}{% endfor %}").suspicious
    False
"""

from registry.templating.branches import ContentBranch, InputDependentText, content_branches, input_dependent_text
from registry.templating.conversations import STANDARD_CONVERSATIONS, Conversation
from registry.templating.diff import ChatTemplateDiff, ConversationDiff, Rendering, TemplateFinding, chat_template_diff
from registry.templating.render import (
    MAX_OUTPUT_CHARS,
    ChatTemplateRenderError,
    PromptTemplateError,
    declared_variables,
    render_chat_template,
    render_prompt_template,
)

__all__ = [
    "MAX_OUTPUT_CHARS",
    "STANDARD_CONVERSATIONS",
    "ChatTemplateDiff",
    "ChatTemplateRenderError",
    "ContentBranch",
    "Conversation",
    "ConversationDiff",
    "InputDependentText",
    "PromptTemplateError",
    "Rendering",
    "TemplateFinding",
    "chat_template_diff",
    "content_branches",
    "declared_variables",
    "input_dependent_text",
    "render_chat_template",
    "render_prompt_template",
]
