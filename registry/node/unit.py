"""The release unit on a node: the signed parts checked against the verified bytes, and the files fetch writes.

A release that carries its unit (``components`` and ``parts``, checked against its files by
:func:`registry.signing.release.verify_release`) gets, once its files' bytes are verified:

- :func:`part_mismatches`: each ``tokenizer_config.json``'s parts, read again from its bytes
  (:func:`registry.domain.parts.tokenizer_config_parts`), must be the signed ones; a chat template part the
  registry signed for other text than the file holds is refused. A GGUF file's parts are not read again
  here: the only GGUF reader is the server's scanner, which a node does not import; the file's bytes are
  checked whole, and its parts only name digests inside them.
- :func:`unit_files`: what fetch writes beside the files (names in
  :data:`registry.domain.components.NODE_WRITTEN_FILES`): ``modelreg-unit.json`` (model, ref, version, the
  components' digests, the prompt templates' names, the serving profile's digest) and, with a
  ``serving-profile.json``, the engine's own config file (absolute paths inside DEST) and the chat template
  the profile names (:func:`serving_files`, which the ``openai`` eval runner calls too, so a suite serves the
  unit with the very files fetch writes). The same release, files and DEST always give the same bytes, so a
  DEST is checked by writing them again in memory and comparing.

Example (the template a profile names is found where transformers looks first):
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> _ = (root / "tokenizer_config.json").write_text('{"chat_template": [{"name": "tool_use", "template": "T"}]}')
    >>> named_chat_template(root, {"tokenizer_config.json"}, "tool_use")
    'T'
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from registry.client.errors import BadManifestError
from registry.domain.components import (
    PROMPT_SUFFIX,
    PROMPTS_DIR,
    SERVING_PROFILE,
    TOKENIZER_CONFIG,
    UNIT_CHAT_TEMPLATE_FILE,
    UNIT_FILE,
    classify,
)
from registry.domain.errors import InvalidServingProfileError, ManifestMismatchError
from registry.domain.parts import tokenizer_config_parts
from registry.domain.serving_profile import engine_config, parse_serving_profile
from registry.signing.release import Release

MAX_UNIT_FILE_BYTES = 32 << 20
"""The largest JSON document or template a node reads to check parts or write the unit's files."""
GENERATION_CONFIG = "generation_config.json"
CHAT_TEMPLATE_JINJA = "chat_template.jinja"
CHAT_TEMPLATE_JSON = "chat_template.json"
ADDITIONAL_TEMPLATES = "additional_chat_templates/"


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise _DuplicateKey("a key is repeated")
    return found


def _read(root: Path, path: str) -> bytes:
    with open(root / path, "rb") as f:
        data = f.read(MAX_UNIT_FILE_BYTES + 1)
    if len(data) > MAX_UNIT_FILE_BYTES:
        raise BadManifestError(f"{path} is over the {MAX_UNIT_FILE_BYTES >> 20} MiB a node reads of a unit's part",
                               path=path)
    return data


def _json(root: Path, path: str) -> Any:
    """A JSON document of the unit, parsed as the facts readers do (a repeated key is refused, not resolved)."""
    try:
        return json.loads(_read(root, path).decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadManifestError(f"{path} is not UTF-8 JSON: {str(exc)[:200]}", path=path) from None


def part_mismatches(release: Release, root: Path) -> list[dict[str, str]]:
    """Each signed part of a ``tokenizer_config.json`` under ``root`` that its bytes do not give.

    Returns:
        ``{"path": "PATH#PART", "expected", "actual"}`` per part that differs, is missing or is extra
        (``actual`` or ``expected`` ``absent``); empty when the release carries no unit.

    Raises:
        BadManifestError: the file is too large, or not JSON (the registry recorded parts of it).
    """
    out: list[dict[str, str]] = []
    for path, signed in sorted((release.parts or {}).items()):
        if path.rsplit("/", 1)[-1] != TOKENIZER_CONFIG:
            continue
        found = tokenizer_config_parts(_json(root, path)) or {}
        for part in sorted(set(signed) | set(found)):
            if signed.get(part) != found.get(part):
                out.append({"path": f"{path}#{part}", "expected": signed.get(part, "absent"),
                            "actual": found.get(part, "absent")})
    return out


def check_parts(release: Release, root: Path) -> None:
    """Refuse a release whose signed ``tokenizer_config.json`` parts are not those of its verified bytes.

    Raises:
        ManifestMismatchError: a part differs (``mismatched`` names ``PATH#PART``).
        BadManifestError: a file with signed parts is too large or not JSON.
    """
    mismatched = part_mismatches(release, root)
    if mismatched:
        raise ManifestMismatchError(missing=[], extra=[], mismatched=mismatched)


def _template_value(value: Any, name: str) -> str | None:
    """A ``chat_template`` value's template called ``name``: a string is ``default``; a list names its own."""
    if isinstance(value, str):
        return value if name == "default" else None
    if isinstance(value, list):
        for item in value:
            if isinstance(item, Mapping) and item.get("name") == name and isinstance(item.get("template"), str):
                return item["template"]
    return None


def named_chat_template(root: Path, listed: set[str], name: str) -> str:
    """The unit's chat template called ``name``, where transformers finds it first: ``chat_template.jinja``
    (``default``) or ``additional_chat_templates/NAME.jinja``, then ``chat_template.json``, then
    ``tokenizer_config.json``.

    Raises:
        BadManifestError: the unit holds no template by that name, or it is not UTF-8.
    """
    file = CHAT_TEMPLATE_JINJA if name == "default" else f"{ADDITIONAL_TEMPLATES}{name}.jinja"
    try:
        if file in listed:
            return _read(root, file).decode("utf-8")
    except UnicodeDecodeError:
        raise BadManifestError(f"{file} is not UTF-8", path=file) from None
    for doc_path in (CHAT_TEMPLATE_JSON, TOKENIZER_CONFIG):
        if doc_path in listed:
            doc = _json(root, doc_path)
            value = doc.get("chat_template") if isinstance(doc, Mapping) else None
            if value is not None:
                found = _template_value(value, name)
                if found is not None:
                    return found
                break
    raise BadManifestError(f"the serving profile names chat template {name!r}, which the unit does not hold",
                           template=name)


def serving_files(root: Path, listed: set[str], *, model_dir: Path, written_to: Path) -> tuple[str, dict[str, bytes]]:
    """The engine's own config file, and the chat template the serving profile names, from the unit under ``root``.

    The one place a unit's serving files are written from its ``serving-profile.json``: ``modelreg fetch``
    writes them beside the files (:func:`unit_files`), and the ``openai`` eval runner hands them to its serve
    command (``{serving_config}``, ``{chat_template}``).

    Args:
        root: Where the unit's files are now.
        listed: The unit's file paths (the profile is ``listed``; the templates are looked up in it).
        model_dir: The folder the engine will read the unit's files from (its ``generation_config.json``).
        written_to: The folder the returned files will be written to (the engine config names the template there).

    Returns:
        The engine config's file name, and name -> bytes: the engine config, and ``modelreg-chat-template.jinja``
        when the profile names a chat template.

    Raises:
        BadManifestError: ``serving-profile.json`` is not a valid serving profile, or names a chat template the
            unit does not hold.
    """
    out: dict[str, bytes] = {}
    try:
        profile = parse_serving_profile(_json(root, SERVING_PROFILE))
        template = profile.settings.get("chat_template")
        template_file = None
        if template is not None:
            out[UNIT_CHAT_TEMPLATE_FILE] = named_chat_template(root, listed, template).encode("utf-8")
            template_file = str(written_to / UNIT_CHAT_TEMPLATE_FILE)
        engine_file, body = engine_config(
            profile, chat_template_file=template_file,
            generation_config_dir=str(model_dir) if GENERATION_CONFIG in listed else None)
    except InvalidServingProfileError as exc:
        raise BadManifestError(f"the unit's {SERVING_PROFILE}: {exc}", path=SERVING_PROFILE) from None
    out[engine_file] = body
    return engine_file, out


def unit_files(release: Release, root: Path, dest: Path, *, ref: str | None = None) -> dict[str, bytes]:
    """The files fetch writes beside ``release``'s files, read from the verified files under ``root``.

    Args:
        root: Where the release's files are now (the staging directory, or DEST itself).
        dest: DEST's absolute path, as the engine config names it.
        ref: The ref ``modelreg-unit.json`` names (default the release's: a no-op fetch through another ref
            keeps the ref DEST was fetched by).

    Returns:
        Name -> bytes; empty when the release carries no unit.

    Raises:
        BadManifestError: ``serving-profile.json`` is not a valid serving profile, or names a chat template the
            unit does not hold.
    """
    if release.components is None:
        return {}
    listed = {f.path: f for f in release.files}
    out: dict[str, bytes] = {}
    profile_digest = engine_file = None
    if SERVING_PROFILE in listed:
        engine_file, written = serving_files(root, set(listed), model_dir=dest, written_to=dest)
        out.update(written)
        profile_digest = listed[SERVING_PROFILE].sha256
    prompts = sorted(path[len(PROMPTS_DIR):-len(PROMPT_SUFFIX)] for path in listed
                     if classify(path) == "prompt_templates")
    document = {"model": release.model, "ref": ref if ref is not None else release.ref, "version": release.version,
                "components": dict(sorted(release.components.items())), "prompt_templates": prompts,
                "serving_profile": profile_digest, "engine_config": engine_file}
    out[UNIT_FILE] = (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()
    return out
