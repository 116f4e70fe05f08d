"""Remote code and chat templates in a model repository's configuration files.

``transformers`` runs Python from the repository when ``trust_remote_code=True``: the ``auto_map``
of ``config.json`` / ``tokenizer_config.json`` / processor configs names ``module.Class`` (or
``other/repo--module.Class``, code from *another* repository, not part of this version). Python
files are that code. None of this is a verdict of malice, so it is ``suspicious``: policy requires
a ``trust_remote_code`` review. Chat templates (``chat_template`` in ``tokenizer_config.json`` or
``chat_template.json``, ``*.jinja`` files) are rendered by servers: an SSTI gadget is ``unsafe``.

Also covered: ``custom_pipelines`` in ``config.json``, sentence-transformers ``modules.json``
(each module's ``type`` is imported by dotted path), and a ``config.json`` that is a Keras config.

Which files matter is decided by name here, because that is how ``transformers`` finds them; call
:func:`handles` to know whether a path is worth a scan.

Example:
    >>> import io, json
    >>> raw = json.dumps({"auto_map": {"AutoModel": "modeling_x.XModel"}}).encode()
    >>> [f.rule_id for f in scan(io.BytesIO(raw), len(raw), ScanContext("config.json"))]
    ['remote-code.auto-map']
"""

from __future__ import annotations

import posixpath
import re
import sys
from typing import Any, BinaryIO, Iterator

from registry.domain.errors import InvalidPathError
from registry.domain.files import validate_path
from registry.scanning import jinja_check, keras
from registry.scanning._formatio import FindingSink, json_path, read_limited, strict_json_loads
from registry.scanning.model import Finding, ScanContext, Severity

MAX_JSON_BYTES = 16 << 20
MAX_TEMPLATE_BYTES = 4 << 20
CONFIG_NAMES = frozenset(
    {
        "config.json",
        "tokenizer_config.json",
        "chat_template.json",
        "processor_config.json",
        "preprocessor_config.json",
        "feature_extractor_config.json",
        "image_processor_config.json",
        "video_preprocessor_config.json",
        "modules.json",
        "adapter_config.json",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
        "model_index.json",
    }
)
PYTHON_SUFFIXES = (".py",)
COMPILED_SUFFIXES = (".pyc", ".pyo", ".pyd", ".so", ".dll", ".dylib")
# ``module.Class`` or ``owner/repo--module.Class``: transformers splits the part after ``--`` on its
# single dot, so the module has none (``/`` for a subfolder is allowed, then path-checked).
_REFERENCE_RE = re.compile(r"^(?:(?P<repo>[\w.-]+(?:/[\w.-]+)?)--)?(?P<module>[\w/-]+)\.(?P<cls>\w+)$")


YAML_SUFFIXES = (".yaml", ".yml")
# PyYAML's unsafe and (before 5.4) full loaders build Python objects from these tags:
# ``!!python/object/apply:os.system [...]`` calls a function while the file is read.
_YAML_PYTHON_TAG_RE = re.compile(rb"!!python/|tag:yaml\.org,2002:python/|!<tag:yaml\.org,2002:python")


def handles(path: str) -> bool:
    """True when ``path`` (a version file path) is one this module has something to say about."""
    name = posixpath.basename(path.rsplit("!", 1)[-1])
    return name.endswith(PYTHON_SUFFIXES + COMPILED_SUFFIXES + YAML_SUFFIXES + (".jinja",)) or name in CONFIG_NAMES


def scan(reader: BinaryIO, size: int, ctx: ScanContext) -> list[Finding]:
    """Report remote code and check chat templates for one file.

    Args:
        reader: Seekable stream over the file.
        size: Its byte size.
        ctx: ``ctx.path`` decides what the file is to ``transformers``; ``ctx.siblings`` lets an
            ``auto_map`` be checked against the files present.

    Returns:
        Findings: ``remote-code.python-file``, ``remote-code.compiled-code``, ``remote-code.auto-map``,
        ``remote-code.auto-map.external-repo``, ``remote-code.auto-map.invalid-reference``,
        ``remote-code.custom-pipeline``, ``remote-code.custom-module``,
        ``remote-code.chat-template.<kind>``, ``remote-code.config-unparseable``, ``remote-code.yaml.python-tag``,
        ``remote-code.config-too-large``, plus ``keras.*`` for a Keras config.
    """
    sink = FindingSink()
    inner = ctx.path.rsplit("!", 1)[-1]
    name = posixpath.basename(inner)
    if name.endswith(PYTHON_SUFFIXES):
        sink.add(
            "remote-code.python-file",
            Severity.SUSPICIOUS,
            ctx.path,
            "Python source in the repository: loading with trust_remote_code would run it",
        )
    elif name.endswith(COMPILED_SUFFIXES):
        sink.add("remote-code.compiled-code", Severity.SUSPICIOUS, ctx.path,
                 "compiled code or native library in the repository")
    elif name.endswith(".jinja"):
        raw = read_limited(reader, size, MAX_TEMPLATE_BYTES)
        if raw is None:
            sink.add("remote-code.chat-template.too-large", Severity.SUSPICIOUS, ctx.path, f"{size} bytes")
        else:
            _check_template(raw.decode("utf-8", "replace"), ctx.path, sink, strict=_is_utf8(raw))
    elif name.endswith(YAML_SUFFIXES):
        _scan_yaml(reader, size, ctx, sink)
    elif name in CONFIG_NAMES:
        _scan_json(reader, size, ctx, name, inner, sink)
    return sink.findings


def _scan_yaml(reader: BinaryIO, size: int, ctx: ScanContext, sink: FindingSink) -> None:
    """YAML configs (Lightning ``hparams.yaml``, MLflow, OmegaConf): Python tags build objects on load."""
    raw = read_limited(reader, size, MAX_JSON_BYTES)
    if raw is None:
        sink.add("remote-code.config-too-large", Severity.SUSPICIOUS, ctx.path, f"{size} bytes: not checked")
        return
    match = _YAML_PYTHON_TAG_RE.search(raw)
    if match is not None:
        line = raw.count(b"\n", 0, match.start()) + 1
        sink.add(
            "remote-code.yaml.python-tag", Severity.UNSAFE, f"{ctx.path}: line {line}",
            "YAML Python tag: an unsafe YAML loader constructs or calls Python objects from it",
        )


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _scan_json(reader: BinaryIO, size: int, ctx: ScanContext, name: str, inner: str, sink: FindingSink) -> None:
    raw = read_limited(reader, size, MAX_JSON_BYTES)
    if raw is None:
        sink.add("remote-code.config-too-large", Severity.SUSPICIOUS, ctx.path, f"{size} bytes: not checked")
        return
    duplicates: list[str] = []
    try:
        doc = strict_json_loads(raw.decode("utf-8-sig"), duplicates)
    except (ValueError, RecursionError) as exc:
        sink.add("remote-code.config-unparseable", Severity.ERROR, ctx.path, f"{name} is not valid JSON: {exc}"[:300])
        return
    for key in sorted(set(duplicates))[:10]:
        # json.loads keeps the last value, other parsers the first: what we check may not be what runs.
        severity = Severity.UNSAFE if key in ("auto_map", "chat_template", "custom_pipelines") else Severity.SUSPICIOUS
        sink.add("remote-code.json.duplicate-key", severity, ctx.path, f"key {key!r} repeated")
    if name == "modules.json":
        _check_modules_json(doc, ctx.path, sink)
        return
    if name == "model_index.json" and isinstance(doc, dict):
        _check_model_index(doc, ctx.path, sink)
    if not isinstance(doc, dict):
        return
    if name == "config.json" and "class_name" in doc and "config" in doc:
        # A Keras model saved as a directory: its config.json is what keras.saving builds.
        sink.extend(keras.check_config(doc, ctx.path))
    for path, value in _find_key(doc, "auto_map", "$"):
        _check_auto_map(value, f"{ctx.path}{path}", inner, ctx, sink)
    for path, value in _find_key(doc, "auto_mapping", "$"):
        if value:
            # PEFT imports ``parent_library`` and builds ``base_model_class`` from it.
            sink.add("remote-code.peft-auto-mapping", Severity.SUSPICIOUS, f"{ctx.path}{path}",
                     f"auto_mapping {value!r:.200} makes PEFT import a library named by the file")
    for path, value in _find_key(doc, "trust_remote_code", "$"):
        if value is True:
            sink.add("remote-code.trust-remote-code", Severity.SUSPICIOUS, f"{ctx.path}{path}",
                     "the file asks its loader to trust remote code")
    if "custom_pipelines" in doc and doc["custom_pipelines"]:
        sink.add(
            "remote-code.custom-pipeline",
            Severity.SUSPICIOUS,
            f"{ctx.path}$.custom_pipelines",
            "custom pipelines "
            f"{sorted(doc['custom_pipelines']) if isinstance(doc['custom_pipelines'], dict) else '?'} "
            "load repository code",
        )
    if "chat_template" in doc:
        for label, template in jinja_check.iter_chat_templates(doc["chat_template"]):
            _check_template(template, f"{ctx.path}$.chat_template{label}", sink, strict=True)


def _find_key(node: Any, key: str, path: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Yield every ``key`` in nested dicts (``auto_map`` also appears in sub-configs)."""
    if depth > 32:
        return
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                yield json_path(path, k), v
            elif isinstance(v, (dict, list)):
                yield from _find_key(v, key, json_path(path, k), depth + 1)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            if isinstance(v, (dict, list)):
                yield from _find_key(v, key, json_path(path, i), depth + 1)


def _references(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for auto_class, refs in value.items():
            for ref in refs if isinstance(refs, (list, tuple)) else [refs]:
                yield str(auto_class), ref
    else:
        yield "?", value


def _check_auto_map(value: Any, loc: str, inner: str, ctx: ScanContext, sink: FindingSink) -> None:
    modules: list[str] = []
    base = posixpath.dirname(inner)
    for auto_class, ref in _references(value):
        if ref is None:
            continue  # tokenizer auto_map pairs: [slow, null]
        match = _REFERENCE_RE.match(ref) if isinstance(ref, str) else None
        if match is None:
            sink.add(
                "remote-code.auto-map.invalid-reference",
                Severity.UNSAFE,
                f"{loc}.{auto_class}",
                f"auto_map reference {ref!r} is not module.Class",
            )
            continue
        module_file = match["module"] + ".py"
        try:
            validate_path(module_file)
        except InvalidPathError as exc:
            sink.add(
                "remote-code.auto-map.invalid-reference",
                Severity.UNSAFE,
                f"{loc}.{auto_class}",
                f"auto_map module {module_file!r} is not a clean relative path: {exc.details['reason']}",
            )
            continue
        if match["repo"]:
            sink.add(
                "remote-code.auto-map.external-repo",
                Severity.SUSPICIOUS,
                f"{loc}.{auto_class}",
                f"{auto_class} loads {module_file} from another repository {match['repo']!r}, outside this version",
            )
            continue
        modules.append(module_file)
        if ctx.siblings and "!" not in ctx.path and posixpath.join(base, module_file) not in ctx.siblings:
            sink.add(
                "remote-code.auto-map.missing-module",
                Severity.SUSPICIOUS,
                f"{loc}.{auto_class}",
                f"{module_file} is referenced but not part of the version",
            )
    if modules:
        sink.add(
            "remote-code.auto-map",
            Severity.SUSPICIOUS,
            loc,
            f"trust_remote_code would import {', '.join(sorted(set(modules)))}",
        )


def _check_model_index(doc: dict[str, Any], loc: str, sink: FindingSink) -> None:
    """diffusers imports each component's ``[library, class]`` by name (``importlib.import_module``)."""
    for key, value in doc.items():
        if key.startswith("_") or not isinstance(value, list) or len(value) != 2 or not isinstance(value[0], str):
            continue
        top = value[0].split(".", 1)[0]
        if top in sys.stdlib_module_names:
            sink.add(
                "remote-code.diffusers-library", Severity.UNSAFE, f"{loc}$.{key}",
                f"diffusers imports {value[0]!r} and looks up {value[1]!r} to build component {key!r}",
            )
    if isinstance(doc.get("_class_name"), list):
        sink.add("remote-code.custom-pipeline", Severity.SUSPICIOUS, f"{loc}$._class_name",
                 f"pipeline class {doc['_class_name']!r} is loaded from repository code")


def _check_modules_json(doc: Any, loc: str, sink: FindingSink) -> None:
    if not isinstance(doc, list):
        return
    for i, module in enumerate(doc):
        kind = module.get("type") if isinstance(module, dict) else None
        if not isinstance(kind, str) or kind.startswith("sentence_transformers."):
            continue
        top = kind.split(".", 1)[0]
        severity = Severity.UNSAFE if top in sys.stdlib_module_names else Severity.SUSPICIOUS
        sink.add("remote-code.custom-module", severity, f"{loc}$[{i}].type", f"sentence-transformers imports {kind!r}")


def _check_template(template: Any, loc: str, sink: FindingSink, *, strict: bool) -> None:
    if template is None:
        return
    if not strict:
        sink.add("remote-code.chat-template.encoding", Severity.UNSAFE, loc, "chat template is not valid UTF-8")
    for issue in jinja_check.check_template(template):
        sink.add(f"remote-code.chat-template.{issue.kind}", issue.severity, loc, issue.detail)
