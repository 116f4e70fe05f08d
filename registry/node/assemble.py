"""Putting a verified release into DEST, atomically, and checking a fetched directory later.

DEST holds the release's files, ``model.sig`` (the version's OpenSSF model-signing bundle, so
``model_signing verify key DEST --signature DEST/model.sig`` works) and the release envelope as
:data:`RELEASE_FILE`. That name is under ``.git/``, which the bundle's ``ignore_paths`` (and
model_signing's defaults) leave out, so the model-signing check sees exactly the signed files; a
release may therefore not list ``model.sig`` or anything under ``.git/`` itself.

A release that carries its unit (``components``) also gets the files :mod:`registry.node.unit` writes beside
its own, once their bytes and parts are verified: ``modelreg-unit.json`` and, with a serving profile, the
engine's config (and the chat template it names). Its bundle's ``ignore_paths`` name them (set at seal), so
``model_signing verify`` still sees exactly the signed files; the release may list none of them itself.
DEST counts them as its own, and a no-op or ``modelreg verify`` writes them again in memory and compares.

An adapter's release (``adapter_of``) gets its ``adapter_config.json`` rewritten with its base's served name,
the signed original kept under ``.git/`` (:mod:`registry.node.adapters`): a no-op or ``modelreg verify``
hashes the original against the release and compares the config with the rewrite of it.

Atomicity. The fetch writes every file (a copy, never a link to the cache: see
:mod:`registry.node.cache`) into a staging directory beside DEST, on DEST's filesystem, then:

- DEST absent: the staging directory is renamed to DEST (one atomic step);
- DEST an empty directory (KServe's emptyDir at ``/mnt/models`` is a mount point, which cannot be
  renamed over): staging lives inside DEST, and its entries are renamed into DEST with the release
  file last; on a failure the entries moved are removed again, so DEST is empty as before;
- DEST holding exactly this release (same version and files, sizes as listed, nothing extra): no-op,
  once :func:`verify_destination` has re-hashed it (a no-op never vouches for bytes it did not read);
- anything else: refused, DEST untouched.

Example:
    >>> expected_paths([ReleaseFile("config.json", 2, "0" * 64)])
    ['.git/modelreg-release.json', 'config.json', 'model.sig']
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from registry.client.errors import BadManifestError, DestinationError
from registry.domain.components import NODE_WRITTEN_FILES, UNIT_FILE
from registry.domain.errors import InvalidPathError, ManifestMismatchError, RegistryError
from registry.node import adapters
from registry.node.cache import sha256_file
from registry.node.unit import check_parts, part_mismatches, unit_files
from registry.signing.bundle import SIGNATURE_FILE_NAME, bundle_ignore_paths, is_ignored
from registry.signing.release import Release, ReleaseFile
from registry.statefile import fsync_dir

RELEASE_FILE = ".git/modelreg-release.json"
STAGING_PREFIX = ".modelreg-staging-"


def expected_paths(files: Sequence[ReleaseFile], written: Iterable[str] = ()) -> list[str]:
    """Every path DEST holds: the release's files, its signature, its release file and the unit files written."""
    return sorted([f.path for f in files] + [SIGNATURE_FILE_NAME, RELEASE_FILE, *written])


def check_reserved(files: Sequence[ReleaseFile], *, unit: bool = False) -> None:
    """Refuse a release that lists a file where DEST keeps its signature or its release (or, for a release
    that carries its unit, where fetch writes the unit's files).

    Raises:
        InvalidPathError: ``model.sig``, or a path under ``.git/``, in the file list (or a name of
            :data:`registry.domain.components.NODE_WRITTEN_FILES` when ``unit``).
    """
    for f in files:
        if f.path == SIGNATURE_FILE_NAME or f.path == ".git" or f.path.startswith(".git/"):
            raise InvalidPathError(f.path, "reserved for the fetched directory's signature and release")
        if unit and f.path in NODE_WRITTEN_FILES:
            raise InvalidPathError(f.path, "reserved for the unit files fetch writes beside the release's")


def scan_directory(root: Path) -> tuple[dict[str, os.stat_result], list[str]]:
    """Every regular file under ``root`` (relative POSIX path -> stat), and links or special files found."""
    files: dict[str, os.stat_result] = {}
    odd: list[str] = []
    pending = [(root, "")]
    while pending:
        folder, prefix = pending.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                rel = prefix + entry.name
                if entry.is_symlink():
                    odd.append(rel)
                elif entry.is_dir(follow_symlinks=False):
                    pending.append((Path(entry.path), rel + "/"))
                elif entry.is_file(follow_symlinks=False):
                    files[rel] = entry.stat(follow_symlinks=False)
                else:
                    odd.append(rel)
    return files, odd


def read_release_file(dest: Path) -> dict[str, Any] | None:
    path = dest / RELEASE_FILE
    try:
        with open(path, "rb") as f:
            data = f.read(32 << 20)
        value = json.loads(data)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def holds_release(dest: Path, release: Release) -> bool:
    """Whether DEST already holds exactly ``release``'s files (by version, file list and sizes; no re-hash)."""
    stored = read_release_file(dest)
    if stored is None or not isinstance(stored.get("envelope"), dict):
        return False
    try:
        payload = json.loads(base64.b64decode(stored["envelope"]["payload"]))
    except (KeyError, TypeError, ValueError):
        return False
    if payload.get("model") != release.model or payload.get("version") != release.version \
            or payload.get("files") != release.payload.get("files") \
            or payload.get("components") != release.payload.get("components"):
        return False
    present, odd = scan_directory(dest)
    # The unit files are compared by their bytes when DEST is re-hashed (verify_destination); here by name.
    written = [p for p in present if p in NODE_WRITTEN_FILES] if release.components is not None else []
    if odd or sorted(present) != expected_paths(release.files, [*written, *adapters.written_paths(release)]) \
            or (written and UNIT_FILE not in written):
        return False
    return all(present[adapters.listed_path(release, f.path)].st_size == f.size for f in release.files)


def stored_ref(dest: Path) -> str | None:
    """The ref DEST's release file names (what DEST was fetched by), or None."""
    stored = read_release_file(dest)
    try:
        ref = json.loads(base64.b64decode(stored["envelope"]["payload"]))["ref"]  # type: ignore[index]
    except (KeyError, TypeError, ValueError):
        return None
    return ref if isinstance(ref, str) else None


def destination_is_release(dest: Path, release: Release) -> bool:
    """True when DEST already holds ``release`` (a no-op); False when DEST is absent or empty.

    Raises:
        DestinationError: DEST is not a directory, or holds anything else.
    """
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise DestinationError(f"{dest} exists and is not a directory", dest=str(dest))
    if not dest.is_dir() or not [e for e in os.listdir(dest) if not e.startswith(STAGING_PREFIX)]:
        return False
    if holds_release(dest, release):
        return True
    raise DestinationError(f"{dest} is not empty and does not hold {release.model}@{release.version}: "
                           "refusing to change it", dest=str(dest))


def _stage(staging: Path, dest: Path, release: Release, place: Callable[[Path], None], bundle: Mapping[str, Any],
           envelope: Mapping[str, Any]) -> None:
    place(staging)
    # After every byte is verified: the signed parts against those bytes, then the unit's files from them.
    check_parts(release, staging)
    written = unit_files(release, staging, dest)
    for name, data in written.items():
        (staging / name).write_bytes(data)
        (staging / name).chmod(0o444)
    # An adapter: its config given its base's served name, the signed one kept aside.
    adapters.rewrite(release, staging)
    (staging / SIGNATURE_FILE_NAME).write_text(json.dumps(bundle, indent=2))
    (staging / RELEASE_FILE).parent.mkdir(parents=True, exist_ok=True)
    (staging / RELEASE_FILE).write_text(json.dumps({"envelope": dict(envelope)}, indent=2))
    present, odd = scan_directory(staging)
    wanted = expected_paths(release.files, [*written, *adapters.written_paths(release)])
    if odd or sorted(present) != wanted:
        raise ManifestMismatchError(missing=sorted(set(wanted) - set(present)),
                                    extra=sorted(set(present) - set(wanted)), mismatched=[], not_regular=odd)


def assemble(dest: Path, release: Release, place: Callable[[Path], None], bundle: Mapping[str, Any],
             envelope: Mapping[str, Any]) -> None:
    """Make DEST hold ``release``; DEST is unchanged on failure.

    Args:
        dest: Absent, or an empty directory (call :func:`destination_is_release` first).
        place: Writes each of the release's files, verified, under the staging directory it is given.

    Raises:
        DestinationError: DEST is not absent or empty, or appeared meanwhile.
        Anything ``place`` raises.
    """
    check_reserved(release.files, unit=release.components is not None)
    dest = Path(dest)
    if destination_is_release(dest, release):
        raise DestinationError(f"{dest} already holds the release: nothing to assemble", dest=str(dest))
    if dest.is_dir():
        return _fill_empty(dest, release, place, bundle, envelope)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=dest.parent))
    try:
        _stage(staging, dest.resolve(), release, place, bundle, envelope)
        os.chmod(staging, 0o755)
        os.rename(staging, dest)  # atomic; fails if another process made DEST meanwhile
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise DestinationError(f"{dest} appeared while the release was staged", dest=str(dest)) from None
        raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(dest.parent)


def _fill_empty(dest: Path, release: Release, place: Callable[[Path], None], bundle: Mapping[str, Any],
                envelope: Mapping[str, Any]) -> None:
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=dest))
    moved: list[Path] = []
    try:
        _stage(staging, dest.resolve(), release, place, bundle, envelope)
        # The release file last: a reader that finds it finds every file.
        names = sorted(os.listdir(staging), key=lambda n: n == ".git")
        for name in names:
            os.rename(staging / name, dest / name)
            moved.append(dest / name)
        staging.rmdir()
    except BaseException:
        for path in reversed(moved):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink(missing_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(dest)


def verify_directory(directory: Path, release: Release, *, parallel: int = 4, ref: str | None = None) -> None:
    """Re-hash a fetched directory against its release, in parallel; every difference is reported. A release
    that carries its unit: its signed parts are read again from the bytes, and the unit's files are written
    again in memory (:func:`registry.node.unit.unit_files`, ``ref`` as DEST was fetched by) and compared.

    Raises:
        ManifestMismatchError: missing, extra or changed files (unit files and parts included), links or
            special files.
    """
    present, odd = scan_directory(directory)
    listed = {f.path: f for f in release.files}
    kept = {path: adapters.listed_path(release, path) for path in listed}

    def check(f: ReleaseFile) -> dict[str, str] | None:
        where = kept[f.path]
        if present[where].st_size != f.size:
            return {"path": where, "expected": f.sha256, "actual": f"size {present[where].st_size}"}
        actual = sha256_file(directory / where)
        return None if actual == f.sha256 else {"path": where, "expected": f.sha256, "actual": actual}

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        # The largest first, so the pool is not left waiting on one big file at the end.
        todo = sorted((listed[p] for p in listed if kept[p] in present), key=lambda f: -f.size)
        mismatched = [m for m in pool.map(check, todo) if m is not None]
    signed = adapters.SIGNED_ADAPTER_CONFIG
    if adapters.is_adapter(release) and signed in present and not any(m["path"] == signed for m in mismatched):
        # The signed config verified: the one served must be exactly its rewrite, nothing else.
        mismatched += adapters.rewrite_mismatches(release, directory)
    written: list[str] = [*adapters.written_paths(release)]
    if release.components is not None:
        if mismatched or any(kept[p] not in present for p in listed):
            # The unit's files follow from bytes already found wrong: counted by name, not compared.
            written += [p for p in present if p in NODE_WRITTEN_FILES]
        else:
            unit_written, mismatched = _unit_differences(directory, release, present, ref)
            written += unit_written
    wanted = set(expected_paths(release.files, written))
    missing = sorted(wanted - set(present))
    extra = sorted(set(present) - wanted)
    if missing or extra or odd or mismatched:
        raise ManifestMismatchError(missing=missing, extra=extra,
                                    mismatched=sorted(mismatched, key=lambda m: m["path"]), not_regular=odd)


def _unit_differences(directory: Path, release: Release, present: Mapping[str, os.stat_result], ref: str | None
                      ) -> tuple[list[str], list[dict[str, str]]]:
    """The unit files ``directory`` should hold, and its parts and unit files that differ from what its
    verified bytes give."""
    try:
        mismatched = part_mismatches(release, directory)
        expected = unit_files(release, directory, Path(directory).resolve(), ref=ref)
    except (RegistryError, OSError) as exc:
        return [p for p in present if p in NODE_WRITTEN_FILES], [
            {"path": UNIT_FILE, "expected": "the unit's files written from the release", "actual": str(exc)[:300]}]
    for name, data in sorted(expected.items()):
        if name in present:
            actual = sha256_file(Path(directory) / name)
            if actual != hashlib.sha256(data).hexdigest():
                mismatched.append({"path": name, "expected": hashlib.sha256(data).hexdigest(), "actual": actual})
    return sorted(expected), mismatched


def verify_destination(dest: Path, release: Release, bundle: Mapping[str, Any], *, parallel: int = 4) -> None:
    """Re-hash a DEST that holds ``release`` by its file list (:func:`holds_release`), and its ``model.sig``.

    Raises:
        ManifestMismatchError: a file changed (or ``model.sig`` is not the version's bundle).
    """
    try:
        sig = json.loads((dest / SIGNATURE_FILE_NAME).read_bytes())
    except (OSError, ValueError):
        sig = None
    changed = [] if sig == bundle else [{"path": SIGNATURE_FILE_NAME, "expected": "the version's bundle",
                                         "actual": "another file"}]
    try:
        verify_directory(dest, release, parallel=parallel, ref=stored_ref(dest))
    except ManifestMismatchError as exc:
        raise ManifestMismatchError(missing=exc.details["missing"], extra=exc.details["extra"],
                                    mismatched=changed + exc.details["mismatched"],
                                    not_regular=exc.details["not_regular"]) from None
    if changed:
        raise ManifestMismatchError(missing=[], extra=[], mismatched=changed, not_regular=[])


def check_bundle_matches(bundle: Mapping[str, Any], release: Release) -> None:
    """The bundle is the one the release names (``statement_digest``) and lists the release's files.

    Raises:
        BadManifestError: another statement, or other files, or a release carrying its unit whose bundle does not
            ignore the unit files (``model_signing verify`` would fail on DEST).
    """
    try:
        payload = base64.b64decode(bundle["dsseEnvelope"]["payload"], validate=True)
        statement = json.loads(payload)
        resources = {r["name"]: r["digest"] for r in statement["predicate"]["resources"]}
    except (KeyError, TypeError, ValueError):
        raise BadManifestError("the signature bundle is not a model-signing bundle") from None
    digest = hashlib.sha256(payload).hexdigest()
    if digest != release.payload.get("statement_digest"):
        raise BadManifestError(f"the signature bundle's statement ({digest[:16]}...) is not the one the release "
                               "names", expected=release.payload.get("statement_digest"), actual=digest)
    signed = {f.path: f.sha256 for f in release.files if not is_ignored(f.path)}
    if release.components is not None and not set(NODE_WRITTEN_FILES) <= set(bundle_ignore_paths(bundle)):
        # The unit files written beside the release would be extra files to model_signing verify.
        raise BadManifestError("the release carries its unit, but its signature bundle does not ignore the files "
                               "fetch writes for it", written=list(NODE_WRITTEN_FILES))
    if resources != signed:
        raise BadManifestError("the signature bundle lists other files than the release",
                               only_bundle=sorted(set(resources) - set(signed)),
                               only_release=sorted(set(signed) - set(resources)))
