"""The evaluated unit's prompt templates, rendered into the eval cases that name them.

A case may name one of the unit's registry-held prompt templates (``prompts/NAME.jinja``,
:mod:`registry.domain.unit_parts`) with the values of its variables (:class:`registry.evals.cases.PromptRef`).
:class:`UnitPrompts` reads each template once from the verified model directory, bounded, and
:meth:`UnitPrompts.render_case` renders it in the registry's sandbox
(:func:`registry.templating.render_prompt_template`) with exactly the variables the template reads: the case
comes back with its whole conversation. A case that names a template the unit lacks, or gives other variables
than the template reads, gets :class:`PromptCaseError` with the reason; the runner fails that case with it.

Example:
    >>> import tempfile
    >>> unit = Path(tempfile.mkdtemp())
    >>> (unit / "prompts").mkdir()
    >>> _ = (unit / "prompts" / "hi.jinja").write_text("Say hello to {{ name }}.")
    >>> from registry.evals.cases import parse_case
    >>> case = parse_case({"id": "c", "category": "greeting", "language": "en", "expect": {"contains": "x"},
    ...                    "prompt": {"template": "hi", "variables": {"name": "Ann"}}})
    >>> UnitPrompts(unit).render_case(case).messages
    ({'role': 'user', 'content': 'Say hello to Ann.'},)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from registry.domain.unit_parts import MAX_PART_BYTES, prompt_path
from registry.evals.cases import Case
from registry.templating import PromptTemplateError, declared_variables, render_prompt_template


class PromptCaseError(Exception):
    """A case's prompt template cannot be rendered: the message says why."""


class UnitPrompts:
    """The prompt templates of the unit under ``model_dir``, each read (and its variables found) once."""

    def __init__(self, model_dir: Path) -> None:
        self._root = model_dir
        self._templates: dict[str, tuple[str, list[str]] | PromptCaseError] = {}

    def template(self, name: str) -> tuple[str, list[str]]:
        """The template's text and the variables it reads.

        Raises:
            PromptCaseError: the unit holds no such template, or it is too large, not UTF-8 or not a template.
        """
        if name not in self._templates:
            try:
                self._templates[name] = self._read(name)
            except PromptCaseError as e:
                self._templates[name] = e
        found = self._templates[name]
        if isinstance(found, PromptCaseError):
            raise found
        return found

    def _read(self, name: str) -> tuple[str, list[str]]:
        path = prompt_path(name)
        file = self._root / path
        if not file.is_file() or file.is_symlink():
            raise PromptCaseError(f"the unit has no prompt template {name!r} ({path})")
        with open(file, "rb") as f:
            data = f.read(MAX_PART_BYTES + 1)
        if len(data) > MAX_PART_BYTES:
            raise PromptCaseError(f"prompt template {name!r} is over {MAX_PART_BYTES} bytes")
        try:
            text = data.decode("utf-8")
            return text, declared_variables(text)
        except UnicodeDecodeError:
            raise PromptCaseError(f"prompt template {name!r} is not UTF-8") from None
        except PromptTemplateError as e:
            raise PromptCaseError(f"prompt template {name!r}: {e.message}") from None

    def render_case(self, case: Case) -> Case:
        """``case`` with its prompt template rendered into its messages (a case without one as it is).

        Raises:
            PromptCaseError: the template is missing or unreadable, the case's variables are not exactly the
                ones it reads, or the render fails (a bound, the sandbox).
        """
        if case.prompt is None:
            return case
        name = case.prompt.template
        text, declared = self.template(name)
        try:
            rendered = render_prompt_template(text, case.prompt.variables, declared)
        except PromptTemplateError as e:
            raise PromptCaseError(f"prompt template {name!r}: {e.message}") from None
        message = {"role": case.prompt.role, "content": rendered}
        messages = (message, *case.messages) if case.prompt.role == "system" else (*case.messages, message)
        return dataclasses.replace(case, messages=messages, prompt=None)
