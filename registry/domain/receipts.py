"""Receipts: what a node program says it holds, parsed and checked once, for the API and the node alike.

A report names its program, the node it runs on, a scope (which instance of the program there: a cache root,
a bucket), whether it is a full snapshot, and up to :data:`MAX_PLACES` places, each a version (by number, or
by the digest a kubelet reports for an image volume) held or dropped at a folder, a bucket or a pod's volume.
A place is named by its key (:meth:`Place.key`), which is also what makes a repeated report change nothing.
Everything here is hostile input until :func:`parse_report` has checked it.

Example:
    >>> report = parse_report({"program": "fetch", "node": "gpu-1", "places": [
    ...     {"model": "acme/llm", "version": 7, "where": "path", "path": "/srv/llm", "held": True}]})
    >>> report.places[0].place.key()
    'path:gpu-1:/srv/llm'
    >>> report.places[0].place.as_dict()
    {'where': 'path', 'node': 'gpu-1', 'path': '/srv/llm'}
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from registry.domain.errors import InvalidInputError, LimitExceededError
from registry.domain.refs import NAME_RE

PROGRAMS = ("fetch", "cache-warm", "serve-s3", "cache-sweep", "cluster-watch")
"""The node programs that report through ``POST /v1/receipts``."""
ADMISSION = "admission"
"""The program the registry itself records an admission decision as (never reported by a node)."""
WHERES = ("path", "bucket", "pod")
MAX_PLACES = 500
"""The most places one report names."""
MAX_REPORT_BYTES = 256 * 1024
"""The largest report body read."""
MAX_PATH = 1024
MAX_SCOPE = 256
_NODE_RE = re.compile(r"\A[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?\Z")
"""A node's name as Kubernetes names nodes (DNS subdomain) or a host name, lower case."""
_K8S_NAME_RE = _NODE_RE
_LABEL_RE = re.compile(r"\A[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")
_UID_RE = re.compile(r"\A[A-Za-z0-9-]{1,64}\Z")
_BUCKET_RE = re.compile(r"\A[a-z0-9][a-z0-9._-]{0,62}\Z")
_DIGEST_RE = re.compile(r"\Asha256:[0-9a-f]{64}\Z")
_VOLUME_RE = re.compile(r"\A[A-Za-z0-9/._~-]{1,256}\Z")


@dataclass(frozen=True, slots=True)
class Place:
    """Where a release is held: a folder of a node (``path``), a bucket (and prefix) a node serves
    (``bucket``), or a pod's volume (``pod``; ``node`` is the pod's node, empty when not known)."""

    where: str
    node: str
    path: str | None = None
    bucket: str | None = None
    prefix: str | None = None
    namespace: str | None = None
    pod: str | None = None
    uid: str | None = None
    volume: str | None = None

    def key(self) -> str:
        """The place's name, the same whoever reports it and however often."""
        if self.where == "path":
            return f"path:{self.node}:{self.path}"
        if self.where == "bucket":
            return f"bucket:{self.node}:{self.bucket}/{self.prefix or ''}"
        return f"pod:{self.namespace}/{self.pod}/{self.uid}/{self.volume}"

    def digest(self) -> str:
        return hashlib.sha256(self.key().encode()).hexdigest()

    def as_dict(self) -> dict[str, Any]:
        fields = ("where", "node", "path", "bucket", "prefix", "namespace", "pod", "uid", "volume")
        return {f: getattr(self, f) for f in fields if getattr(self, f) is not None}


@dataclass(frozen=True, slots=True)
class PlaceReport:
    """One line of a report: ``tenant/name`` at ``version`` (or at the version ``image_digest`` is a shape of),
    held or dropped at ``place``."""

    tenant: str
    name: str
    version: int | None
    image_digest: str | None
    place: Place
    held: bool

    @property
    def model(self) -> str:
        return f"{self.tenant}/{self.name}"


@dataclass(frozen=True, slots=True)
class ReceiptReport:
    program: str
    node: str
    scope: str
    snapshot: bool
    places: tuple[PlaceReport, ...]


def _optional_text(description: str) -> dict[str, Any]:
    return {"type": ["string", "null"], "description": description}


PLACE_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["model", "where"],
    "description": "One place: a version (or the image digest a kubelet saw) held or dropped at a folder, bucket "
                   "or pod.",
    "properties": {
        "model": {"type": "string", "description": "tenant/name"},
        "version": {"type": ["integer", "null"], "minimum": 1, "description": "the version number (or give "
                    "image_digest)"},
        "image_digest": _optional_text("sha256:<hex>: an image volume's config or manifest digest"),
        "where": {"enum": list(WHERES), "description": "path, bucket or pod"},
        "path": _optional_text("where=path: the folder, an absolute path"),
        "bucket": _optional_text("where=bucket: the bucket served"),
        "prefix": _optional_text("where=bucket: the key prefix"),
        "namespace": _optional_text("where=pod: the pod's namespace"),
        "pod": _optional_text("where=pod: the pod's name"),
        "uid": _optional_text("where=pod: the pod's uid"),
        "volume": _optional_text("where=pod: the volume's name"),
        "pod_node": _optional_text("where=pod: the pod's node (default: the reporter's)"),
        "held": {"type": "boolean", "default": True, "description": "false: dropped"},
    },
}
"""The JSON Schema of one place of a report; :func:`parse_report` checks more (the formats)."""

REPORT_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["program", "node"],
    "description": "What a node program holds (a snapshot), or what changed.",
    "properties": {
        "program": {"enum": list(PROGRAMS)},
        "node": {"type": "string", "description": "the reporter's node name"},
        "scope": {"type": "string", "default": "", "maxLength": MAX_SCOPE,
                  "description": "which instance of the program on the node (a cache root, a bucket)"},
        "snapshot": {"type": "boolean", "default": False,
                     "description": "true: the reporter's held places not listed are dropped"},
        "places": {"type": "array", "maxItems": MAX_PLACES, "items": PLACE_SCHEMA},
    },
}
"""The JSON Schema of a report (the API's request body); the one list of a report's and a place's fields."""

_OPTIONAL_TEXT = tuple(k for k, v in PLACE_SCHEMA["properties"].items() if v.get("type") == ["string", "null"])


def _bad(field: str, message: str) -> InvalidInputError:
    return InvalidInputError(f"{field}: {message}", field=field)


def _text(doc: dict[str, Any], key: str, field: str, pattern: re.Pattern[str], rule: str, *,
          required: bool = True) -> str | None:
    value = doc.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not pattern.match(value):
        raise _bad(field, rule)
    return value


def check_node(node: Any, field: str = "node") -> str:
    if not isinstance(node, str) or not _NODE_RE.match(node):
        raise _bad(field, "a node name: 1-253 lower-case letters, digits, '.' or '-'")
    return node


def _place(doc: dict[str, Any], node: str, at: str) -> Place:
    where = doc.get("where")
    if where not in WHERES:
        raise _bad(f"{at}.where", f"one of {', '.join(WHERES)}")
    if where == "path":
        path = doc.get("path")
        if (not isinstance(path, str) or not path.startswith("/") or len(path) > MAX_PATH
                or any(c in path for c in "\0\n\r") or "/../" in f"{path}/"):
            raise _bad(f"{at}.path", f"an absolute path of at most {MAX_PATH} characters, without '..'")
        return Place("path", node, path=path)
    if where == "bucket":
        bucket = _text(doc, "bucket", f"{at}.bucket", _BUCKET_RE, "a bucket name (a tenant name)")
        prefix = doc.get("prefix")
        if prefix is not None and (not isinstance(prefix, str) or len(prefix) > MAX_PATH
                                   or any(c in prefix for c in "\0\n\r")):
            raise _bad(f"{at}.prefix", f"a key prefix of at most {MAX_PATH} characters")
        return Place("bucket", node, bucket=bucket, prefix=prefix or None)
    namespace = _text(doc, "namespace", f"{at}.namespace", _LABEL_RE, "a Kubernetes namespace name")
    pod = _text(doc, "pod", f"{at}.pod", _K8S_NAME_RE, "a Kubernetes pod name")
    uid = _text(doc, "uid", f"{at}.uid", _UID_RE, "the pod's uid")
    volume = _text(doc, "volume", f"{at}.volume", _VOLUME_RE, "a volume name (or JSON pointer)")
    pod_node = doc.get("pod_node")
    pod_node = node if pod_node is None else check_node(pod_node, f"{at}.pod_node")
    return Place("pod", pod_node, namespace=namespace, pod=pod, uid=uid, volume=volume)


def _line(doc: Any, node: str, index: int) -> PlaceReport:
    at = f"places.{index}"
    if not isinstance(doc, dict):
        raise _bad(at, "an object")
    model = doc.get("model")
    tenant, sep, name = model.partition("/") if isinstance(model, str) else ("", "", "")
    if not sep or not NAME_RE.match(tenant) or not NAME_RE.match(name):
        raise _bad(f"{at}.model", "tenant/name")
    version, image_digest = doc.get("version"), doc.get("image_digest")
    if (version is None) == (image_digest is None):
        raise _bad(at, "give either version or image_digest")
    if version is not None and (type(version) is not int or not 1 <= version < 10**10):
        raise _bad(f"{at}.version", "a version number")
    if image_digest is not None and (not isinstance(image_digest, str) or not _DIGEST_RE.match(image_digest)):
        raise _bad(f"{at}.image_digest", "sha256:<64 lower-case hex digits>")
    held = doc.get("held", True)
    if not isinstance(held, bool):
        raise _bad(f"{at}.held", "true or false")
    unknown = set(doc) - PLACE_SCHEMA["properties"].keys()
    if unknown:
        raise _bad(f"{at}.{sorted(unknown)[0][:40]}", "not a field of a place")
    for key in _OPTIONAL_TEXT:  # a field the place's kind does not read is still of its type
        if not isinstance(doc.get(key, ""), str | None):
            raise _bad(f"{at}.{key}", "a string")
    return PlaceReport(tenant, name, version, image_digest, _place(doc, node, at), held)


def parse_report(doc: Any) -> ReceiptReport:
    """Check a report (the JSON body of ``POST /v1/receipts``) and return it.

    Raises:
        InvalidInputError: naming the first bad field.
        LimitExceededError: more than :data:`MAX_PLACES` places.
    """
    if not isinstance(doc, dict):
        raise _bad("body", "a JSON object")
    unknown = set(doc) - REPORT_SCHEMA["properties"].keys()
    if unknown:
        raise _bad(sorted(unknown)[0][:40], "not a field of a report")
    program = doc.get("program")
    if program not in PROGRAMS:
        raise _bad("program", f"one of {', '.join(PROGRAMS)}")
    node = check_node(doc.get("node"))
    scope = doc.get("scope", "")
    if not isinstance(scope, str) or len(scope) > MAX_SCOPE or any(c in scope for c in "\0\n\r"):
        raise _bad("scope", f"at most {MAX_SCOPE} characters on one line")
    snapshot = doc.get("snapshot", False)
    if not isinstance(snapshot, bool):
        raise _bad("snapshot", "true or false")
    places = doc.get("places", [])
    if not isinstance(places, list):
        raise _bad("places", "a list")
    if len(places) > MAX_PLACES:
        raise LimitExceededError(f"places: {len(places)} places; at most {MAX_PLACES} in one report",
                                 field="places", limit=MAX_PLACES)
    return ReceiptReport(program, node, scope, snapshot, tuple(_line(p, node, i) for i, p in enumerate(places)))
