"""``modelreg cache sweep``: KServe LocalModelCache folders on a node, checked again after they were fetched.

KServe's LocalModelCache downloads a URI once per node: its node agent runs a Job (our
ClusterStorageContainer: ``modelreg fetch URI /mnt/models``) with the node group's volume mounted from
``models/<key>`` (``key``: the first 16 hex digits of the URI's sha256), then mounts that folder into
serving Pods with no init container: nothing checks it again. The sweeper runs on each node with the
node group's volume (ROOT) and, for every folder ``ROOT/models/<key>``:

- reads the release the fetch recorded there (:data:`registry.node.assemble.RELEASE_FILE`, the signed
  envelope as received); a folder without one is reported ``unattributed`` and left alone (another
  storage container's cache, or a download in progress), unless asked to remove it;
- removes it as ``revoked`` when the registry revoked that version: the ``version.revoked`` events, read
  by :class:`~registry.node.revocations.RevocationFollower` into the sweeper's own state directory (a
  :class:`NodeCache` that holds no blobs, only the cursor, the revoked versions and the trust roots walked);
  and, in a full sweep, the registry's own answer: the release of that version is asked for again
  (``ask_release``, with the ETag of the last answer, so an unchanged one costs a 304 and no signature).
  A sweeper whose event stream is refused or down still removes revoked folders at its next full sweep;
  one that cannot ask either reports the folder ``unverified``, never ``ok``;
- verifies the release's signature against the trust root (the pinned file walked through the registry's
  rotations; not its expiry: it was current when fetched), the bundle in model.sig, and re-hashes every
  file: any difference removes it as ``altered``. When the walk against the registry failed, a signature
  that does not verify may be a rotation not yet seen: the folder is reported ``unverified`` and kept.

A folder is removed by renaming it aside (``.modelreg-removing-...`` beside it), then deleting that: a Pod
that starts sees the whole folder or none. KServe's node agent then finds the folder missing and runs its
download Job again: an altered folder comes back from the registry; a revoked version's Job fails.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import os
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from registry.client.errors import NetworkError, classify
from registry.domain.errors import IntegrityError, RegistryError, RevokedError, SignatureError
from registry.domain.refs import NAME_RE
from registry.node.assemble import RELEASE_FILE, STAGING_PREFIX, read_release_file, verify_directory
from registry.node.cache import NodeCache
from registry.node.opener import verify_recorded
from registry.node.revocations import RevocationFollower
from registry.node.trust import NodeTrust
from registry.signing.bundle import SIGNATURE_FILE_NAME
from registry.signing.trust_root import TrustRoot

MODELS = "models"
"""KServe's folder of cached models under the node group's volume (``modelsRootFolder``)."""
REMOVING_PREFIX = ".modelreg-removing-"
NO_RECORD = "no release record"
"""An unattributed folder's reason; with more after it (a download in progress, empty) it is never removed."""


@dataclasses.dataclass
class SweepFinding:
    """What the sweep found in one folder: ``ok``, ``revoked``, ``altered``, ``unattributed`` or ``unverified``."""

    event: str
    folder: str
    model: str | None = None
    version: int | None = None
    reason: str = ""
    removed: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Claim:
    """What a folder's release record says it holds (before its signature is checked)."""

    envelope: dict[str, Any]
    model: str
    ref: str
    version: int
    issued: dt.datetime

    @property
    def owner_and_name(self) -> tuple[str, str]:
        owner, name = self.model.split("/", 1)
        return owner, name


def read_claim(folder: Path) -> Claim | None | str:
    """The folder's release record: a :class:`Claim`, None when there is none, or why it is not a release."""
    stored = read_release_file(folder)
    if stored is None:
        return None if not (folder / RELEASE_FILE).exists() else "the release record is not JSON"
    envelope = stored.get("envelope")
    try:
        payload = json.loads(base64.b64decode(envelope["payload"]))  # type: ignore[index]
        model, ref, version = payload["model"], payload["ref"], payload["version"]
        issued = dt.datetime.fromisoformat(payload["issued_at"])
    except (KeyError, TypeError, ValueError):
        return "the release record is not a release envelope"
    parts = model.split("/") if isinstance(model, str) else []
    if (issued.tzinfo is None or len(parts) != 2 or not all(NAME_RE.match(p) for p in parts)
            or not isinstance(ref, str) or type(version) is not int or version < 1):
        return "the release record names no model version"
    return Claim(dict(envelope), model, ref, version, issued)


def _force_rmtree(path: Path) -> None:
    """Delete a tree whose folders may be read-only (a tamperer may leave anything); links are not followed."""
    def writable(target: str) -> None:
        try:
            os.chmod(target, os.lstat(target).st_mode & 0o7777 | stat.S_IRWXU)
        except OSError:
            pass

    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
        return
    writable(str(path))
    for top, dirs, _ in os.walk(path):
        for name in dirs:
            if not os.path.islink(os.path.join(top, name)):
                writable(os.path.join(top, name))
    shutil.rmtree(path)


def remove_folder(folder: Path) -> None:
    """Rename ``folder`` aside (one atomic step: a Pod starting sees all of it or nothing), then delete it."""
    aside = folder.parent / f"{REMOVING_PREFIX}{folder.name}-{secrets.token_hex(4)}"
    os.rename(folder, aside)
    _force_rmtree(aside)


class Sweeper:
    """One node group volume's LocalModelCache folders, checked against the registry (module docstring).

    Args:
        root: The node group's volume; the folders are ``root/models/<key>``.
        state: The sweeper's state directory (its revoked versions, applied by a RevocationFollower).
        trust_root_file: The node's pinned trust root.
        fetch_root: ``fetch_root(n)``: the registry's root n, or None (the rotations to walk).
        ask_release: ``ask_release(tenant, model, version, etag)``: asks the registry for that version's
            release (If-None-Match ``etag``) and returns the ETag of its answer; raises RevokedError when
            the registry revoked it (another RegistryError or OSError: it could not be asked). None: the
            full sweep relies on the event stream alone.
        remove_unattributed: Also remove folders with no release record (never one being downloaded).
    """

    def __init__(self, root: Path, *, state: NodeCache, trust_root_file: Path,
                 fetch_root: Callable[[int], Mapping[str, Any] | None],
                 ask_release: Callable[[str, str, int, str | None], str | None] | None = None, parallel: int = 4,
                 remove_unattributed: bool = False, on_problem: Callable[[str], None] = lambda line: None,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)) -> None:
        self.root, self.state, self.trust_root_file = Path(root), state, Path(trust_root_file)
        self.fetch_root, self.ask_release, self.parallel = fetch_root, ask_release, parallel
        self.remove_unattributed, self.on_problem, self.clock = remove_unattributed, on_problem, clock

    @property
    def models(self) -> Path:
        return self.root / MODELS

    def folders(self) -> list[Path]:
        """Each cache folder under ``root/models`` (what an earlier removal left aside is deleted first)."""
        found = []
        if not self.models.is_dir():
            return found
        for entry in sorted(os.scandir(self.models), key=lambda e: e.name):
            if entry.name.startswith(REMOVING_PREFIX):
                try:
                    _force_rmtree(Path(entry.path))
                except OSError as exc:
                    self.on_problem(f"cannot delete {entry.path}, left by an earlier removal: {exc}")
            elif entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
                found.append(Path(entry.path))
        return found

    def trust(self) -> tuple[TrustRoot, bool]:
        """The newest root, and whether the walk against the registry succeeded (signatures can be judged)."""
        trust = NodeTrust.load(self.trust_root_file, self.state.root)
        try:
            trust.refresh(self.fetch_root, now=self.clock())
        except (RegistryError, OSError) as exc:
            self.on_problem(f"the trust root walk failed; a signature that does not verify is not acted on: "
                            f"{' '.join(str(exc).split())}")
            return trust.root, False
        trust.commit()
        return trust.root, True

    def sweep(self, *, full: bool = True) -> list[SweepFinding]:
        """Check every folder (``full``) or only whether its version was revoked; remove what fails."""
        root, current = self.trust() if full else (None, False)
        findings = []
        for folder in self.folders():
            try:
                finding = self.check(folder, root, current) if root is not None else self.check_revoked(folder)
                if finding is None:
                    continue
                if finding.event in ("revoked", "altered") or (finding.event == "unattributed"
                                                              and self.remove_unattributed
                                                              and finding.reason == NO_RECORD):
                    remove_folder(folder)
                    finding.removed = True
            except OSError as exc:
                self.on_problem(f"cannot check or remove {folder}: {exc}")
                continue
            findings.append(finding)
        return findings

    def check_revoked(self, folder: Path) -> SweepFinding | None:
        """``revoked`` when the version the folder's record names was revoked; None otherwise (no hashing)."""
        claim = read_claim(folder)
        if isinstance(claim, Claim) and self.state.is_revoked(*claim.owner_and_name, claim.version):
            return SweepFinding("revoked", str(folder), claim.model, claim.version, "the registry revoked this version")
        return None

    def check(self, folder: Path, root: TrustRoot, trust_current: bool) -> SweepFinding:
        """Everything about one folder: its record, revocation, signature, model.sig and every file's hash."""
        claim = read_claim(folder)
        if claim is None:
            names = os.listdir(folder)
            busy = any(name.startswith(STAGING_PREFIX) for name in names)
            reason = NO_RECORD + (": a download in progress" if busy else "" if names else ": empty")
            return SweepFinding("unattributed", str(folder), reason=reason)
        if isinstance(claim, str):
            return SweepFinding("altered", str(folder), reason=claim)
        revoked = self.check_revoked(folder)
        if revoked is not None:
            return revoked
        unasked = self.check_servable(folder, claim)
        if isinstance(unasked, SweepFinding):
            return unasked
        try:
            try:
                bundle = json.loads((folder / SIGNATURE_FILE_NAME).read_text())
            except (OSError, ValueError):
                bundle = {}
            # Its signature at the release's own issue time (not its expiry), its paths and bundle, then its files.
            release = verify_recorded(claim.envelope, bundle, root, model=claim.model, ref=claim.ref,
                                      issued=claim.issued)
            verify_directory(folder, release, parallel=self.parallel)
        except SignatureError as exc:
            if not trust_current:
                return SweepFinding("unverified", str(folder), claim.model, claim.version, _reason(exc))
            return SweepFinding("altered", str(folder), claim.model, claim.version, _reason(exc))
        except RegistryError as exc:
            return SweepFinding("altered", str(folder), claim.model, claim.version, _reason(exc))
        if unasked is not None:
            return SweepFinding("unverified", str(folder), claim.model, claim.version,
                                f"its files verify, but whether it was revoked is unknown: {unasked}")
        return SweepFinding("ok", str(folder), claim.model, claim.version)

    def check_servable(self, folder: Path, claim: Claim) -> SweepFinding | str | None:
        """Whether the registry still releases the folder's version.

        Returns:
            A ``revoked`` finding when the registry refuses the release as revoked (recorded in the state,
            as its event would be); why, when the registry could not be asked (also told); None when it
            releases it, or no ``ask_release`` was given.
        """
        if self.ask_release is None:
            return None
        owner, name = claim.owner_and_name
        key = f"release.etag {claim.model}@{claim.version}"
        try:
            etag = self.ask_release(owner, name, claim.version, self.state.state(key))
        except RevokedError:
            self.state.remove_revoked(owner, name, claim.version)
            return SweepFinding("revoked", str(folder), claim.model, claim.version, "the registry revoked this version")
        except (RegistryError, OSError) as exc:
            why = f"cannot ask the registry whether {claim.model}@{claim.version} is still released: " \
                  f"{' '.join(str(exc).split())}"
            self.on_problem(why)
            return why
        if etag:
            self.state.set_state(key, etag)
        return None


def _reason(exc: RegistryError) -> str:
    """``<kind>: <what>`` (the kind as in exit codes: signature, digest, manifest), with the files it names."""
    text = f"{classify(exc)}: {' '.join(str(exc).split())}"
    details = getattr(exc, "details", {}) or {}
    changed = [m["path"] for m in details.get("mismatched", []) if isinstance(m, dict)]
    for key, label in (("missing", "missing"), ("extra", "extra"), ("not_regular", "not regular")):
        if details.get(key):
            text += f"; {label}: {', '.join(details[key][:5])}"
    if changed:
        text += f"; changed: {', '.join(changed[:5])}"
    return text


def sweep_once(sweep: Callable[[bool], list[SweepFinding]], follower: RevocationFollower,
               problems: Sequence[str]) -> None:
    """``cache sweep --once``: the revocations not yet applied, one full sweep, and its outcome as an error.

    Raises:
        IntegrityError: a folder was altered (removed); else RevokedError: one was revoked (removed); else
        NetworkError: the event stream, a release's question or the trust root walk failed (``problems``).
    """
    try:
        follower.catch_up()
    except (RegistryError, OSError) as exc:
        follower.on_problem(f"the event stream failed, none applied: {' '.join(str(exc).split())}")
    findings = sweep(True)
    kinds = {f.event for f in findings}
    if "altered" in kinds:
        raise IntegrityError(f"{sum(f.event == 'altered' for f in findings)} altered folder(s) removed")
    if "revoked" in kinds:
        raise RevokedError.from_wire(f"{sum(f.event == 'revoked' for f in findings)} revoked folder(s) removed")
    if problems:
        raise NetworkError(f"the sweep could not ask the registry: {problems[0]}")


def keep_sweeping(sweep: Callable[[bool], object], follower: RevocationFollower, wake: threading.Event, *,
                  interval: float, on_problem: Callable[[str], None],
                  clock: Callable[[], float] = time.monotonic) -> None:
    """Sweep fully every ``interval`` seconds and, in between, check revocations whenever the follower moved
    its cursor (it sets ``wake``); a failed sweep is told and tried again within 30 s. Runs until Ctrl-C."""
    stop = threading.Event()
    threading.Thread(target=follower.run, args=(stop,), daemon=True, name="revocations").start()
    next_full = 0.0
    try:
        while True:
            try:
                if clock() >= next_full:
                    wake.clear()
                    sweep(True)
                    next_full = clock() + interval
                elif wake.is_set():
                    wake.clear()
                    sweep(False)
            except (RegistryError, OSError) as exc:
                on_problem(f"the sweep failed, retrying at the next: {' '.join(str(exc).split())}")
                next_full = clock() + min(interval, 30.0)
            wake.wait(max(0.0, next_full - clock()))
    finally:
        stop.set()
