"""The Hugging Face-compatible view of released versions: what ``/hf`` serves, decided here.

A repository is a model (``tenant/name``); a revision is an alias (``prod``), a version number (``3``) or
the commit of a version. Only approved, unrevoked versions are revisions: anything else, like an unknown
alias, is :class:`~registry.domain.errors.ReleaseNotFoundError` (the Hub's ``RevisionNotFound``). Readers
and serving nodes of the tenant (``read`` or ``fetch``) may look; the Hub token is a modelreg bearer token.

Decisions a reader might question (see also ``docs/hf-endpoint.md``):

- **The commit** of a version is the first 40 hex digits of its statement digest (``manifest_digest``:
  the sha256 of the signed in-toto statement's canonical JSON, which names model, version and every
  file's sha256). It is deterministic, differs between versions, and anyone holding the version's
  signature bundle can recompute it. ``X-Repo-Commit`` carries the same value.
- **``main``**, the Hub's default branch (what clients ask for when given no revision), is the ``prod``
  alias. An alias literally named ``main`` is not reachable here.
- **LFS or not**: a file is served as an LFS file (``lfs.oid`` = its sha256, ETag = sha256) when it is at
  least :data:`LFS_THRESHOLD` bytes or its name ends in one of :data:`LFS_SUFFIXES` (the Hub's default
  ``.gitattributes``); any other file is a plain git file whose ETag and ``oid`` are its git blob sha1,
  ``sha1("blob <len>\\0" + data)``, read once from the blob store (so only for files under 10 MiB) and
  kept per blob in a process-wide cache. An LFS file's ``oid`` is the git blob sha1 of its LFS pointer.
- **Canary**: an alias with a canary serves its canary version to a caller that holds a role in one of
  the canary tenants (besides read or fetch in the model's tenant); everyone else gets its main version.
- **Folders** have no git tree here; a folder's ``oid`` is a sha1 over the paths and sha256 digests of the
  files below it, so it changes exactly when they do.
- **Adapters** (a version bound to a base, ``registry/services/adapters.py``) are served only while their base
  is (``registry/services/adapter_bases.py``), and their ``adapter_config.json`` is served with
  ``base_model_name_or_path`` = the base's repository id and ``revision`` = the bound base version's commit
  (``registry/domain/adapter_config.py``), so PEFT loads exactly the bound weights through this endpoint. Every
  answer describes the served bytes (size, sha256, git blob id); the stored, signed bytes are unchanged.

Usage (a sketch, not run as a doctest)::

    release = resolve(session, principal, "acme", "llm", "prod", blob_store=store)
    page = tree_page(release, "", recursive=True, cursor=0, page_size=1000,
                     blob_store=store)
    [e.path for e in page.entries]
    # -> ['config.json', 'model.safetensors']
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.auth import AuthenticatedPrincipal
from registry.clock import Clock
from registry.db.models import Alias, Model, Version, VersionFile
from registry.domain import serving
from registry.domain.adapter_config import AdapterConfigUnservableError, with_base
from registry.domain.adapters import ADAPTER_CONFIG, MAX_CONFIG_BYTES
from registry.domain.errors import (
    AliasNotFoundError,
    InvalidInputError,
    ReleaseFileNotFoundError,
    ReleaseNotFoundError,
    RevokedError,
    SizeMismatchError,
    VersionNotFoundError,
)
from registry.domain.refs import ALIAS_RE
from registry.domain.serving import Channel
from registry.services import adapter_bases, aliases, downloads, loaders
from registry.storage.base import BlobStore

DEFAULT_BRANCH = "main"
DEFAULT_ALIAS = "prod"
"""The alias ``main`` (the Hub's default branch) stands for."""
LFS_THRESHOLD = 10 * 1024 * 1024
"""Files this large or larger are LFS files (the Hub's limit for plain git files)."""
LFS_SUFFIXES = (
    ".7z", ".arrow", ".bin", ".bz2", ".ckpt", ".ftz", ".gguf", ".gz", ".h5", ".joblib", ".mlmodel", ".model",
    ".msgpack", ".npy", ".npz", ".onnx", ".ot", ".parquet", ".pb", ".pickle", ".pkl", ".pt", ".pth", ".rar",
    ".safetensors", ".tar", ".tflite", ".tgz", ".wasm", ".xz", ".zip", ".zst",
)
"""Names the Hub's default ``.gitattributes`` stores in LFS (weights, archives, pickles)."""
MAX_PATHS = 1000
"""The most paths one paths-info request may ask about."""
COMMIT_RE = re.compile(r"\A[0-9a-f]{40}\Z")
NUMBER_RE = re.compile(r"\A[1-9][0-9]{0,9}\Z")
INT32_MAX = 2**31 - 1
SHA1_CACHE_SIZE = 100_000
SERVED_CONFIG_CACHE_SIZE = 4096
"""Adapters' served ``adapter_config.json`` kept per process (each at most ``MAX_CONFIG_BYTES``, most a few KB)."""


@dataclass(frozen=True, slots=True)
class RevisionFile:
    """A file of a released version as stored: path, size, sha256 and whether it is served as LFS."""

    path: str
    size: int
    sha256: str
    lfs: bool
    known_git_sha1: str | None = None
    """The git blob sha1 the mirror checked the bytes against, when the upstream published one."""
    content: bytes | None = None
    """The bytes served when the registry derives them from the stored ones (an adapter's ``adapter_config.json``
    naming its base); ``size``, ``sha256`` and ``known_git_sha1`` are then theirs. None: the stored blob's bytes."""


@dataclass(frozen=True, slots=True)
class ResolvedRevision:
    """A revision resolved to an approved, unrevoked version (authorization already checked)."""

    repo_id: str
    revision: str
    """What the caller asked for (``prod``, ``3``, a commit)."""
    commit: str
    version: int
    files: tuple[RevisionFile, ...]
    """Sorted by path."""
    sealed_at: datetime | None
    license: str | None
    version_id: int | None = None
    """The version's row (what downloads are recorded against)."""

    @property
    def pinned(self) -> bool:
        """Whether the revision was the commit itself, so its answers never change."""
        return self.revision == self.commit

    def file(self, path: str) -> RevisionFile:
        """The file at ``path``.

        Raises:
            ReleaseFileNotFoundError: no such file (a folder is not a file).
        """
        for f in self.files:
            if f.path == path:
                return f
        raise ReleaseFileNotFoundError(self.repo_id, self.revision, path, commit=self.commit)


@dataclass(frozen=True, slots=True)
class HfFile:
    """A file as the Hub describes it."""

    path: str
    size: int
    sha256: str
    lfs: bool
    blob_id: str
    """The git blob sha1 of the contents (plain file) or of the LFS pointer (LFS file)."""
    pointer_size: int
    """The LFS pointer's size; 0 for a plain file."""

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.blob_id


@dataclass(frozen=True, slots=True)
class TreeEntry:
    """One entry of a tree listing or paths-info answer: a file (with ``file``) or a folder."""

    type: Literal["file", "directory"]
    path: str
    oid: str
    size: int
    file: HfFile | None = None


@dataclass(frozen=True, slots=True)
class TreePage:
    entries: list[TreeEntry]
    next_cursor: int | None
    """Where the next page starts, or None after the last page."""


# --- resolving --------------------------------------------------------------------------------


def resolve(session: Session, principal: AuthenticatedPrincipal, tenant: str, name: str,
            revision: str, *, blob_store: BlobStore) -> ResolvedRevision:
    """The released version ``revision`` of ``tenant/name`` names, for ``principal``.

    Args:
        revision: An alias, ``main`` (the ``prod`` alias), a version number, or a version's commit.
        blob_store: Where an adapter's ``adapter_config.json`` is read, to be served naming its base.

    Raises:
        PermissionDeniedError: neither ``read`` nor ``fetch`` in ``tenant``.
        TenantNotFoundError, ModelNotFoundError: no such repository.
        ReleaseNotFoundError: the revision names no version, or one not approved, or a revoked or deleted one,
            or an adapter whose base is not served (``registry/services/adapter_bases.py``).
        BlobNotFoundError: the store lost an adapter's ``adapter_config.json``.
    """
    refusal = serving.caller_refusal(principal.name, principal.permissions(tenant), tenant)
    if refusal is not None:
        raise refusal
    model = loaders.load_model_unchecked(session, tenant, name)
    repo_id = f"{tenant}/{name}"
    version = version_named(session, principal, model, repo_id, revision)
    refusal = serving.release_refusal(loaders.release_facts(version), Channel.HF, revision)
    if refusal is not None:
        raise refusal
    files = tuple(_revision_file(f) for f in sorted(version.files, key=lambda f: f.path))
    if version.adapter_binding is not None:
        files = _adapter_files(session, principal, version, repo_id, revision, files, blob_store)
    return ResolvedRevision(
        repo_id=repo_id, revision=revision, commit=commit_of(version), version=version.number,
        files=files, sealed_at=version.sealed_at, license=version.license, version_id=version.id,
    )


def commit_of(version: Version) -> str:
    """The 40-hex commit a sealed version is served under: its statement digest's first 40 hex digits."""
    if version.manifest_digest is None:
        raise ValueError(f"version {version.number} is not sealed: it has no commit")
    return version.manifest_digest[:40]


def is_lfs(path: str, size: int) -> bool:
    """Whether a file is served as an LFS file (sha256 ETag) rather than a plain git file (sha1 ETag)."""
    return size >= LFS_THRESHOLD or path.lower().endswith(LFS_SUFFIXES)


def version_named(session: Session, principal: AuthenticatedPrincipal, model: Model, repo_id: str,
                  revision: str, *, hub_names: bool = True) -> Version:
    """The version ``revision`` names, whatever its state: a version number, or an alias as it resolves for
    ``principal`` (its canary where the principal holds a role in a canary tenant); with ``hub_names``, also a
    commit, and ``main`` for ``prod`` (the ``/v2`` endpoint has neither). The caller checked authorization.

    Raises:
        ReleaseNotFoundError: no such version or alias, or the alias's version (for this caller) is revoked.
    """
    if hub_names and COMMIT_RE.match(revision):
        # A version number has at most 10 digits, so a 40-hex revision is always a commit.
        version = session.scalar(select(Version).where(Version.model_id == model.id,
                                                       Version.manifest_digest.startswith(revision)))
        if version is None:
            raise ReleaseNotFoundError(repo_id, revision, "no version has this commit")
        return version
    if NUMBER_RE.match(revision) and int(revision) <= INT32_MAX:
        try:
            return loaders.load_version_unchecked(session, model, int(revision))
        except VersionNotFoundError:
            raise ReleaseNotFoundError(repo_id, revision, f"no version {revision}") from None
    alias = DEFAULT_ALIAS if hub_names and revision == DEFAULT_BRANCH else revision
    if not ALIAS_RE.match(alias):
        raise ReleaseNotFoundError(repo_id, revision, "not an alias, a version number or a commit")
    canary_tenants = session.scalar(select(Alias.canary_tenants).where(Alias.model_id == model.id,
                                                                        Alias.name == alias)) or []
    for_tenant = next((t for t in sorted(principal.roles) if t in canary_tenants), None)
    try:
        return aliases.resolve(session, principal, model.tenant.name, model.name, alias, for_tenant).version
    except AliasNotFoundError:
        raise ReleaseNotFoundError(repo_id, revision, f"no alias {alias!r}") from None
    except RevokedError as e:
        raise ReleaseNotFoundError(repo_id, revision, e.message) from None


def _revision_file(row: VersionFile) -> RevisionFile:
    assert row.sha256 is not None, "an approved version's files are all stored"
    lfs = is_lfs(row.path, row.size)
    return RevisionFile(row.path, row.size, row.sha256, lfs, None if lfs else row.upstream_git_sha1)


def alias_named(revision: str, *, hub_names: bool = True) -> str | None:
    """The alias ``revision`` names as :func:`version_named` reads it (``main`` is ``prod`` with ``hub_names``),
    or None for a version number (or, with ``hub_names``, a commit)."""
    if hub_names and COMMIT_RE.match(revision):
        return None
    if NUMBER_RE.match(revision) and int(revision) <= INT32_MAX:
        return None
    return DEFAULT_ALIAS if hub_names and revision == DEFAULT_BRANCH else revision


def _adapter_files(session: Session, principal: AuthenticatedPrincipal, version: Version, repo_id: str,
                   revision: str, files: tuple[RevisionFile, ...], blob_store: BlobStore) -> tuple[RevisionFile, ...]:
    """An adapter's files as served: refused while its base is not served (or, asked by alias, while the base's
    alias of that name gives other weights), its ``adapter_config.json`` naming the bound base by this endpoint's
    repository id and commit (a pure function of the signed statement)."""
    reason = adapter_bases.base_refusal(version)
    alias = alias_named(revision)
    if reason is None and alias is not None:
        reason = adapter_bases.alias_refusal(session, principal, version, alias)
    if reason is not None:
        raise ReleaseNotFoundError(repo_id, revision, reason)
    base = version.adapter_binding.base
    base_repo = f"{base.model.tenant.name}/{base.model.name}"
    # The base's commit is taken from the binding's signed base statement digest, as commit_of would from the base.
    base_commit = version.adapter_binding.base_manifest_digest[:40]
    served = []
    for f in files:
        if f.path == ADAPTER_CONFIG:
            try:
                content = _SERVED_CONFIGS.get(f, base_repo, base_commit, blob_store)
            except AdapterConfigUnservableError as exc:
                raise ReleaseNotFoundError(repo_id, revision, f"its {ADAPTER_CONFIG} cannot be served: {exc}") \
                    from None
            f = served_file(f.path, content)
        served.append(f)
    return tuple(served)


def served_file(path: str, content: bytes) -> RevisionFile:
    """A file whose served bytes are ``content`` (derived by the registry), described by them alone."""
    return RevisionFile(path, len(content), hashlib.sha256(content).hexdigest(), is_lfs(path, len(content)),
                        git_blob_sha1(content), content)


class _ServedConfigCache:
    """An adapter's served ``adapter_config.json`` per (stored sha256, base repository, base commit): a pure
    function of them, so computing it once per process is as good as every time."""

    def __init__(self, maxsize: int) -> None:
        self._maxsize = maxsize
        self._known: OrderedDict[tuple[str, str, str], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, stored: RevisionFile, base_repo: str, base_commit: str, blob_store: BlobStore) -> bytes:
        key = (stored.sha256, base_repo, base_commit)
        with self._lock:
            if key in self._known:
                self._known.move_to_end(key)
                return self._known[key]
        if stored.size > MAX_CONFIG_BYTES:
            raise AdapterConfigUnservableError(f"{ADAPTER_CONFIG} is {stored.size} bytes, over {MAX_CONFIG_BYTES}")
        original = b"".join(blob_store.open_range(stored.sha256, 0, stored.size))
        if hashlib.sha256(original).hexdigest() != stored.sha256:
            raise AdapterConfigUnservableError(f"the stored {ADAPTER_CONFIG} is not the signed one")
        served = with_base(original, base_name=base_repo, base_revision=base_commit)
        with self._lock:
            self._known[key] = served
            while len(self._known) > self._maxsize:
                self._known.popitem(last=False)
        return served


_SERVED_CONFIGS = _ServedConfigCache(SERVED_CONFIG_CACHE_SIZE)


def record_download(session: Session, principal: AuthenticatedPrincipal, release: ResolvedRevision, *,
                    clock: Clock) -> None:
    """Count one file download of ``release`` by ``principal`` (provenance question 8), and commit.

    One row per (version, principal, UTC day), upserted: a client's thousand range requests are one row.
    """
    assert release.version_id is not None
    downloads.count_download(session, principal, release.version_id, channel=Channel.HF, clock=clock)


# --- describing -------------------------------------------------------------------------------


def describe(release_file: RevisionFile, blob_store: BlobStore) -> HfFile:
    """The file as the Hub describes it: git blob id, and for an LFS file its pointer's size.

    Raises:
        BlobNotFoundError, SizeMismatchError: the store lost or changed a plain file's bytes.
    """
    f = release_file
    if f.lfs:
        pointer = lfs_pointer(f.sha256, f.size)
        return HfFile(f.path, f.size, f.sha256, True, git_blob_sha1(pointer), len(pointer))
    blob_id = f.known_git_sha1 or _GIT_SHA1.get(f.sha256, f.size, blob_store)
    return HfFile(f.path, f.size, f.sha256, False, blob_id, 0)


def describe_all(release: ResolvedRevision, blob_store: BlobStore) -> list[HfFile]:
    """Every file of the release, described (the siblings of the repository info)."""
    return [describe(f, blob_store) for f in release.files]


def read_range(release_file: RevisionFile, blob_store: BlobStore, start: int, end: int) -> Iterator[bytes]:
    """The served bytes ``[start, end)`` of a file: the derived ones where the registry derives them, else the
    store's."""
    if release_file.content is not None:
        return iter((release_file.content[start:end],))
    return blob_store.open_range(release_file.sha256, start, end)


def git_blob_sha1(data: bytes) -> str:
    """The git blob id of ``data``: ``sha1("blob <len>\\0" + data)``.

    >>> git_blob_sha1(b"")
    'e69de29bb2d1d6434b8b29ae775ad8c2e48c5391'
    """
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The git LFS pointer file that stands for a file in git."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


class _GitSha1Cache:
    """Git blob sha1 per stored blob (sha256), computed from the store once; a blob's bytes never change."""

    def __init__(self, maxsize: int) -> None:
        self._maxsize = maxsize
        self._known: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, sha256: str, size: int, blob_store: BlobStore) -> str:
        with self._lock:
            if sha256 in self._known:
                self._known.move_to_end(sha256)
                return self._known[sha256]
        digest = hashlib.sha1(b"blob %d\x00" % size)
        read = 0
        for chunk in blob_store.open_range(sha256):
            read += len(chunk)
            digest.update(chunk)
        if read != size:
            raise SizeMismatchError(sha256, expected=size, actual=read)
        with self._lock:
            self._known[sha256] = digest.hexdigest()
            while len(self._known) > self._maxsize:
                self._known.popitem(last=False)
        return digest.hexdigest()


_GIT_SHA1 = _GitSha1Cache(SHA1_CACHE_SIZE)


# --- listing ----------------------------------------------------------------------------------


def tree_page(release: ResolvedRevision, path: str, *, recursive: bool, cursor: int, page_size: int,
              blob_store: BlobStore) -> TreePage:
    """One page of the listing of folder ``path`` ("" for the root), folders included, sorted by path.

    Without ``recursive``, only the folder's direct children; with it, everything below.

    Raises:
        ReleaseFileNotFoundError: ``path`` is not a folder of the release (a file is not one either).
    """
    folder = path.strip("/")
    prefix = f"{folder}/" if folder else ""
    below = [f for f in release.files if f.path.startswith(prefix)]
    if folder and not below:
        raise ReleaseFileNotFoundError(release.repo_id, release.revision, folder, commit=release.commit)
    listed: dict[str, RevisionFile | None] = {}
    for f in below:
        parts = f.path[len(prefix):].split("/")
        depth = len(parts) if recursive else 1
        for n in range(1, min(depth, len(parts) - 1) + 1):
            listed.setdefault(prefix + "/".join(parts[:n]), None)
        if recursive or len(parts) == 1:
            listed[f.path] = f
    paths = sorted(listed)
    page = paths[cursor:cursor + page_size]
    entries = [_entry(release, p, listed[p], blob_store) for p in page]
    more = cursor + page_size < len(paths)
    return TreePage(entries, cursor + page_size if more else None)


def paths_info(release: ResolvedRevision, paths: Iterable[str], blob_store: BlobStore) -> list[TreeEntry]:
    """The entries of the files and folders among ``paths``; paths that are neither are left out, as the Hub does.

    Raises:
        InvalidInputError: more than :data:`MAX_PATHS` paths.
    """
    asked = list(dict.fromkeys(p.strip("/") for p in paths))
    if len(asked) > MAX_PATHS:
        raise InvalidInputError(f"at most {MAX_PATHS} paths per request, not {len(asked)}", field="paths")
    by_path = {f.path: f for f in release.files}
    entries = []
    for path in asked:
        if path in by_path:
            entries.append(_entry(release, path, by_path[path], blob_store))
        elif path and any(p.startswith(path + "/") for p in by_path):
            entries.append(_entry(release, path, None, blob_store))
    return entries


def _entry(release: ResolvedRevision, path: str, f: RevisionFile | None, blob_store: BlobStore) -> TreeEntry:
    if f is None:
        return TreeEntry("directory", path, _folder_oid(release, path), 0)
    described = describe(f, blob_store)
    return TreeEntry("file", path, described.blob_id, f.size, described)


def _folder_oid(release: ResolvedRevision, folder: str) -> str:
    digest = hashlib.sha1(b"tree\x00")
    for f in release.files:
        if f.path.startswith(folder + "/"):
            digest.update(f"{f.path}\x00{f.sha256}\n".encode())
    return digest.hexdigest()
