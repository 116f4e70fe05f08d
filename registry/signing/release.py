"""Release manifests: what a serving node may download, signed by the registry, short-lived.

A release is a DSSE envelope (payload type ``application/vnd.modelreg.release+json``) over::

    {"_type": "https://modelreg.dev/release/v1",
     "model": "acme/tiny", "ref": "prod", "tenant": "acme", "version": 3,
     "source": {"kind": "hf", "repo": "org/tiny", "revision": "<40 hex>"},
     "files": [{"path": "config.json", "size": 812, "sha256": "<hex>"}, ...],
     "license": "apache-2.0", "facts": {...},
     "statement_digest": "<sha256 of the version's signed model-signing statement>",
     "approval_digest": "<sha256 of the canonical approval record>",
     "serial": 7, "issued_at": "...", "expires_at": "..."}

and, once the chunk digests of every file are recorded (docs/adr/0013-chunk-digests.md)::

     "chunks": {"model.safetensors": {"chunk_size": 8388608, "root": "<sha256 of the chunk list>"}, ...}

which a node streaming ranges checks each chunk list against (``registry/node/chunks.py``). Beside
``files``, not in it: a directory fetched before the lists were recorded still holds the same ``files``.

A version sealed as a release unit (its bundle ignores what a node writes beside the files, ADR 0016) adds::

     "components": {"weights": "<sha256>", "tokenizer": "<sha256>", "chat_templates": "<sha256>", ...},
     "parts": {"tokenizer_config.json": {"chat_template": "<sha256>", "without_chat_template": "<sha256>"}}

An adapter's release (a version bound to a base version, ADR 0017) names the base it is served with (ADR 0018)::

     "adapter_of": {"model": "acme/llm", "ref": "prod", "version": 3, "bound_version": 1,
                    "weights_digest": "<sha256>", "statement_digest": "<sha256>", "served_name": "acme/llm"}

``ref`` is the base's alias the adapter is served through (or the base version's number), ``version`` the base
version served and ``bound_version`` the one the adapter is bound to (the same weights); ``statement_digest`` is
the served base's ``statement_digest`` (its own release says it), ``weights_digest`` the bound weights, and
``served_name`` the name a serving engine serves the base under (what a node writes into the adapter's
``adapter_config.json``). A node that fetches the base checks its release against them
(:func:`check_base_release`). A release of anything else has no ``adapter_of``.

``components`` is each component's digest (``registry/domain/components.py``); ``parts`` the recorded parts
of its split files. :func:`verify_release` recomputes the components from the signed ``files`` and ``parts``
and refuses a release whose digests differ; the node then checks each ``tokenizer_config.json``'s parts
against its verified bytes (``registry/node/unit.py``). A release without them has neither key.

``tenant`` is the tenant the release was resolved for (a canary tenant gets the canary version). The
``serial`` only grows per model and ref; a node refuses a lower one than it accepted before (rollback), an
expired release (freeze), any path that is not clean and relative, and a file list with a path twice.
Transport URLs travel beside the envelope, unsigned: the bytes are checked against ``files`` instead.

Example:
    >>> import datetime as dt
    >>> from registry.signing.keys import SigningKey
    >>> from registry.signing.trust_root import parse_root, root_document, sign_root
    >>> key, now = SigningKey.generate(), dt.datetime(2026, 11, 30, tzinfo=dt.timezone.utc)
    >>> root = parse_root(sign_root(root_document(1, [key.public_key], 1, now + dt.timedelta(days=365)), [key]))
    >>> payload = release_payload(model="acme/tiny", ref="prod", tenant="acme", version=1,
    ...     source={"kind": "hf", "repo": "org/tiny", "revision": "a" * 40},
    ...     files=[{"path": "config.json", "size": 2, "sha256": "b" * 64}], license="mit", facts=None,
    ...     statement_digest="c" * 64, approval_digest="d" * 64, serial=1,
    ...     issued_at=now, expires_at=now + dt.timedelta(minutes=5))
    >>> release = verify_release(sign_release(payload, [key]), root, now=now, model="acme/tiny", ref="prod")
    >>> release.version, release.serial, release.files[0].path
    (1, 1, 'config.json')
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

from registry.domain.adapter_config import check_served_name
from registry.domain.chunks import check_chunk_size
from registry.domain.components import COMPONENTS, components_map, unit_components
from registry.domain.errors import (
    AdapterBaseMismatchError,
    IntegrityError,
    InvalidInputError,
    InvalidPathError,
    SignatureError,
)
from registry.domain.files import SHA256_RE, FileEntry, validate_path
from registry.domain.limits import MAX_RELEASE_BYTES
from registry.signing.canonical import canonical_json
from registry.signing.dsse import sign_envelope, verify_envelope
from registry.signing.keys import SigningKey
from registry.signing.trust_root import TrustRoot

RELEASE_PAYLOAD_TYPE = "application/vnd.modelreg.release+json"
RELEASE_TYPE = "https://modelreg.dev/release/v1"
MAX_FILES = 100_000
MAX_PARTS_PER_FILE = 128
"""Parts one split file may have in a release (the facts readers record at most 64 named templates and two more)."""
MAX_PART_NAME = 256
MAX_ADAPTER_REF = 256
"""Characters of ``adapter_of``'s model and ref."""
ADAPTER_CONFIG = "adapter_config.json"
"""An adapter release lists it: the node writes its base's served name into it."""
MAX_CLOCK_SKEW = dt.timedelta(hours=1)
"""How far a release's ``issued_at`` may be ahead of the node's clock. Further means the node's clock is
behind, and a clock behind would take a release that expired long ago for a fresh one: refused."""


class ReleaseExpiredError(IntegrityError):
    code = "release-expired"


class ReleaseNotYetValidError(ReleaseExpiredError):
    """The release was issued more than :data:`MAX_CLOCK_SKEW` after the node's clock: the clock is wrong."""

    code = "release-not-yet-valid"


class ReleaseRollbackError(IntegrityError):
    code = "release-rollback"


class ReleaseMismatchError(IntegrityError):
    """The release is for another model or ref than the one asked for (a mix-and-match)."""

    code = "release-mismatch"


@dataclasses.dataclass(frozen=True, slots=True)
class ReleaseFile:
    path: str
    size: int
    sha256: str
    chunk_size: int | None = None
    """The size of the file's aligned chunks, when the release signs their digests (else None)."""
    chunk_root: str | None = None
    """The sha256 of the file's chunk list (its chunks' 32-byte digests, concatenated), or None."""


@dataclasses.dataclass(frozen=True, slots=True)
class AdapterOf:
    """What an adapter's release says of the base it is served with (module docstring)."""

    model: str
    ref: str
    version: int
    bound_version: int
    weights_digest: str
    statement_digest: str
    served_name: str

    @property
    def tenant(self) -> str:
        return self.model.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.model.split("/", 1)[1]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Release:
    model: str
    ref: str
    tenant: str
    version: int
    serial: int
    issued_at: dt.datetime
    expires_at: dt.datetime
    files: tuple[ReleaseFile, ...]
    payload: dict[str, Any]
    components: Mapping[str, str] | None = None
    """``{component: digest}``, checked against ``files`` and ``parts``; None when the release carries no unit."""
    parts: Mapping[str, Mapping[str, str]] | None = None
    """``{path: {part: sha256}}`` of the split files (None exactly when ``components`` is)."""
    adapter_of: AdapterOf | None = None
    """The base an adapter's release is served with; None for a release of anything but an adapter."""

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)


def release_payload(*, model: str, ref: str, tenant: str, version: int, source: Mapping[str, Any],
                    files: Sequence[Mapping[str, Any]], license: str | None, facts: Mapping[str, Any] | None,
                    statement_digest: str, approval_digest: str, serial: int, issued_at: dt.datetime,
                    expires_at: dt.datetime, chunks: Mapping[str, Mapping[str, Any]] | None = None,
                    components: Mapping[str, str] | None = None,
                    parts: Mapping[str, Mapping[str, str]] | None = None,
                    adapter_of: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The payload of a release (files sorted by path); ``chunks`` (per path: chunk size and root) only
    when given, ``components`` with ``parts`` (the release unit) only when given, and ``adapter_of`` (an
    adapter's base) only when given."""
    payload = {"_type": RELEASE_TYPE, "model": model, "ref": ref, "tenant": tenant, "version": version,
            "source": dict(source),
            "files": [{"path": f["path"], "size": f["size"], "sha256": f["sha256"]}
                      for f in sorted(files, key=lambda f: f["path"])],
            "license": license, "facts": dict(facts) if facts is not None else None,
            "statement_digest": statement_digest, "approval_digest": approval_digest, "serial": serial,
            "issued_at": issued_at.astimezone(dt.timezone.utc).isoformat(),
            "expires_at": expires_at.astimezone(dt.timezone.utc).isoformat()}
    if chunks is not None:
        payload["chunks"] = {path: {"chunk_size": c["chunk_size"], "root": c["root"]}
                             for path, c in sorted(chunks.items())}
    if components is not None:
        payload["components"] = dict(components)
        payload["parts"] = {path: dict(sorted(named.items())) for path, named in sorted((parts or {}).items())}
    if adapter_of is not None:
        payload["adapter_of"] = dict(adapter_of)
    return payload


def sign_release(payload: Mapping[str, Any], keys: Sequence[SigningKey]) -> dict[str, Any]:
    return sign_envelope(canonical_json(dict(payload)), RELEASE_PAYLOAD_TYPE, list(keys))


def _time(doc: Mapping[str, Any], key: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(doc[key])
    except (KeyError, TypeError, ValueError):
        raise SignatureError(f"the release's {key} is not an ISO 8601 time", reason="malformed") from None
    if value.tzinfo is None:
        raise SignatureError(f"the release's {key} has no time zone", reason="malformed")
    return value


def _files(doc: Mapping[str, Any]) -> tuple[ReleaseFile, ...]:
    entries = doc.get("files")
    if not isinstance(entries, list) or len(entries) > MAX_FILES:
        raise SignatureError(f"the release's files are a list of at most {MAX_FILES}", reason="malformed")
    out, seen = [], set()
    for entry in entries:
        if not isinstance(entry, dict):
            raise SignatureError("a release file is an object", reason="malformed")
        path, size, digest = entry.get("path"), entry.get("size"), entry.get("sha256")
        if not isinstance(path, str):
            raise SignatureError("a release file has no path", reason="malformed")
        validate_path(path)  # InvalidPathError: traversal, absolute, backslash, control characters...
        if path in seen:
            raise InvalidPathError(path, "listed twice in the release")
        seen.add(path)
        if type(size) is not int or size < 0 or not isinstance(digest, str) or not SHA256_RE.match(digest):
            raise SignatureError(f"release file {path!r} has no valid size and sha256", reason="malformed")
        out.append(ReleaseFile(path, size, digest))
    return _with_chunks(doc, out)


def _with_chunks(doc: Mapping[str, Any], files: list[ReleaseFile]) -> tuple[ReleaseFile, ...]:
    """The files with the chunk size and root ``chunks`` signs for each (a release without it: as they are)."""
    chunks = doc.get("chunks")
    if chunks is None:
        return tuple(files)
    listed = {f.path for f in files}
    if not isinstance(chunks, dict) or not set(chunks) <= listed:
        raise SignatureError("the release's chunks map listed paths to chunk sizes and roots", reason="malformed")
    out = []
    for f in files:
        entry = chunks.get(f.path)
        if entry is None:
            out.append(f)
            continue
        size, root = (entry.get("chunk_size"), entry.get("root")) if isinstance(entry, dict) else (None, None)
        try:
            check_chunk_size(size)
        except InvalidInputError:
            raise SignatureError(f"release file {f.path!r} has no valid chunk size", reason="malformed") from None
        if not isinstance(root, str) or not SHA256_RE.match(root):
            raise SignatureError(f"release file {f.path!r} has no valid chunk root", reason="malformed")
        out.append(dataclasses.replace(f, chunk_size=size, chunk_root=root))
    return tuple(out)


def _unit(doc: Mapping[str, Any], files: Sequence[ReleaseFile]
          ) -> tuple[dict[str, str] | None, dict[str, dict[str, str]] | None]:
    """The release unit's ``components`` and ``parts``, shape-checked and recomputed from the signed files.

    Raises:
        SignatureError: one without the other, a malformed value (``reason`` ``malformed``), or component
            digests that the signed files and parts do not give (``reason`` ``components``).
    """
    components, parts = doc.get("components"), doc.get("parts")
    if components is None and parts is None:
        return None, None
    if not isinstance(components, dict) or not isinstance(parts, dict):
        raise SignatureError("the release's components and parts are objects, both or neither", reason="malformed")
    if len(components) > len(COMPONENTS) or not all(
            name in COMPONENTS and isinstance(digest, str) and SHA256_RE.match(digest)
            for name, digest in components.items()):
        raise SignatureError(f"the release's components map the names {', '.join(COMPONENTS)} to sha256 digests",
                             reason="malformed")
    listed = {f.path for f in files}
    if not set(parts) <= listed:
        raise SignatureError("the release's parts name a file it does not list", reason="malformed")
    for path, named in parts.items():
        if not isinstance(named, dict) or not 0 < len(named) <= MAX_PARTS_PER_FILE or not all(
                isinstance(part, str) and 0 < len(part) <= MAX_PART_NAME and isinstance(digest, str)
                and SHA256_RE.match(digest) for part, digest in named.items()):
            raise SignatureError(f"the release's parts of {path!r} are not at most {MAX_PARTS_PER_FILE} part names "
                                 "with sha256 digests", reason="malformed", path=path)
    computed = components_map(unit_components([FileEntry(f.path, f.size, f.sha256) for f in files], parts))
    if computed != components:
        differ = sorted(name for name in set(computed) | set(components) if computed.get(name) != components.get(name))
        raise SignatureError(f"the release's component digests are not those of its files and parts: "
                             f"{', '.join(differ)} differ", reason="components", components=differ)
    return dict(components), {path: dict(named) for path, named in parts.items()}


def _adapter_of(doc: Mapping[str, Any], files: Sequence[ReleaseFile]) -> AdapterOf | None:
    """An adapter release's ``adapter_of``, shape-checked (None when the release has none).

    Raises:
        SignatureError: (``reason`` ``malformed``) a value of the wrong shape, or an adapter release that lists
            no ``adapter_config.json``.
    """
    found = doc.get("adapter_of")
    if found is None:
        return None
    if not isinstance(found, dict) or set(found) != {f.name for f in dataclasses.fields(AdapterOf)}:
        raise SignatureError("the release's adapter_of is not an object of "
                             f"{', '.join(f.name for f in dataclasses.fields(AdapterOf))}", reason="malformed")
    model, ref = found["model"], found["ref"]
    digests = (found["weights_digest"], found["statement_digest"])
    numbers = (found["version"], found["bound_version"])
    try:
        check_served_name(found["served_name"])
    except InvalidInputError:
        raise SignatureError("the release's adapter_of.served_name is no served name", reason="malformed") from None
    if not (isinstance(model, str) and 0 < len(model) <= MAX_ADAPTER_REF and model.count("/") == 1
            and "@" not in model and all(model.split("/")) and isinstance(ref, str)
            and 0 < len(ref) <= MAX_ADAPTER_REF and "/" not in ref and "@" not in ref
            and all(type(n) is int and n >= 1 for n in numbers)
            and all(isinstance(d, str) and SHA256_RE.match(d) for d in digests)):
        raise SignatureError("the release's adapter_of names no base version and digests", reason="malformed")
    if ADAPTER_CONFIG not in {f.path for f in files}:
        raise SignatureError(f"an adapter's release lists no {ADAPTER_CONFIG}", reason="malformed")
    return AdapterOf(**found)


def base_weights_digest(release: Release) -> str | None:
    """The digest of a release's ``weights`` component: signed in ``components``, else computed from its files."""
    if release.components is not None:
        return release.components.get("weights")
    computed = components_map(unit_components([FileEntry(f.path, f.size, f.sha256) for f in release.files], {}))
    return computed.get("weights")


def check_base_release(adapter: Release, base: Release) -> None:
    """An adapter's release against the base release a node fetched with it: the same model and version, the
    statement its ``adapter_of`` names, and the bound weights. Return nothing when they agree.

    Raises:
        ValueError: ``adapter`` is no adapter's release.
        AdapterBaseMismatchError: naming every field that differs.
    """
    bound = adapter.adapter_of
    if bound is None:
        raise ValueError(f"{adapter.model}@{adapter.ref} is no adapter's release")
    differ = [name for name, ok in (
        ("model", base.model == bound.model), ("version", base.version == bound.version),
        ("statement_digest", base.payload.get("statement_digest") == bound.statement_digest),
        ("weights_digest", base_weights_digest(base) == bound.weights_digest)) if not ok]
    if differ:
        raise AdapterBaseMismatchError(f"{adapter.model}@{adapter.ref}", f"{base.model}@{base.ref}", differ)


def verify_release(envelope: Mapping[str, Any], root: TrustRoot, *, now: dt.datetime, model: str, ref: str,
                   min_serial: int | None = None) -> Release:
    """Check a release envelope as a node must before downloading a byte.

    Args:
        root: the node's trust root, already walked forward (:func:`registry.signing.trust_root.walk`).
        model, ref: what the node asked for; a release of anything else is refused.
        min_serial: the highest serial the node accepted before for this model and ref (None: none yet).

    Raises:
        SignatureError: not signed by a threshold of the root's keys, or malformed (``reason`` says).
        ReleaseExpiredError: ``expires_at`` has passed (``ReleaseNotYetValidError``: ``issued_at`` is more
            than :data:`MAX_CLOCK_SKEW` ahead of ``now``).
        ReleaseRollbackError: ``serial`` is lower than ``min_serial``.
        ReleaseMismatchError: another model or ref.
        InvalidPathError: a file path that is not clean and relative, or one listed twice.
        SignatureError: (``reason`` ``components``) component digests its files and parts do not give; (``reason``
            ``malformed``) an ``adapter_of`` of the wrong shape.
    """
    payload = verify_envelope(envelope, root.keys, RELEASE_PAYLOAD_TYPE, threshold=root.threshold)
    if len(payload) > MAX_RELEASE_BYTES:
        raise SignatureError("the release is larger than a node reads", reason="malformed")
    try:
        doc = json.loads(payload)
    except ValueError:
        raise SignatureError("the release's payload is not JSON", reason="malformed") from None
    if not isinstance(doc, dict) or doc.get("_type") != RELEASE_TYPE:
        raise SignatureError(f"the payload is not a {RELEASE_TYPE} document", reason="malformed")
    if doc.get("model") != model or doc.get("ref") != ref:
        raise ReleaseMismatchError(f"the release is for {doc.get('model')}@{doc.get('ref')}, not {model}@{ref}",
                                   model=doc.get("model"), ref=doc.get("ref"))
    version, serial = doc.get("version"), doc.get("serial")
    if type(version) is not int or version < 1 or type(serial) is not int or serial < 0:
        raise SignatureError("the release's version or serial is not an integer", reason="malformed")
    issued_at, expires_at = _time(doc, "issued_at"), _time(doc, "expires_at")
    if now >= expires_at:
        raise ReleaseExpiredError(f"the release of {model}@{ref} expired at {expires_at.isoformat()}",
                                  expires_at=expires_at.isoformat())
    if issued_at > now + MAX_CLOCK_SKEW:
        raise ReleaseNotYetValidError(f"the release of {model}@{ref} was issued at {issued_at.isoformat()}, "
                                      f"after this node's clock ({now.isoformat()}): is the clock behind?",
                                      issued_at=issued_at.isoformat())
    if min_serial is not None and serial < min_serial:
        raise ReleaseRollbackError(f"the release of {model}@{ref} has serial {serial}, lower than {min_serial} "
                                   f"accepted before", serial=serial, accepted=min_serial)
    tenant = doc.get("tenant")
    if not isinstance(tenant, str):
        raise SignatureError("the release names no tenant", reason="malformed")
    files = _files(doc)
    components, parts = _unit(doc, files)
    adapter_of = _adapter_of(doc, files)
    return Release(model, ref, tenant, version, serial, issued_at, expires_at, files, doc, components, parts,
                   adapter_of)
