"""The one door through which a node accepts a release: :class:`ReleaseOpener`.

Every node program (``fetch``, ``cache warm``, ``serve-s3``) opens a release here and nowhere else
(``tests/unit/test_layering.py``). As python-tuf's ``Updater.refresh()`` checks its metadata, the opener
checks a manifest in one order, each step before any byte of the release is fetched:

1. the node's trust: its pinned root (:class:`NodePolicy`: a file, or root 1 by its sha256), walked
   through the roots this node accepted before, then forward through the registry's rotations (the
   manifest names the root that signed it: when ours is as new, no root is asked for), the final root's
   expiry checked;
2. the envelope: signed by a threshold of that root's release keys, not expired, a serial not lower than
   the last this node accepted for the model and ref, the model and ref asked for;
3. the paths: clean, relative, none reserved; the model-signing bundle is the one the release names;
4. when the root names a verifiable log: the release's events proven in a checkpoint signed by the log,
   cosigned by the root's witnesses and by the node's own (``--witness``, ``--witness-quorum``), and
   extending the checkpoint this node kept.

An adapter's release names its base (``adapter_of``); :meth:`ReleaseOpener.open_base` opens the base's
release through the same steps, with the same trust, and holds it against that name before either is used.

Opening persists nothing. The caller does its work (DEST assembled, the blobs cached, the release put in
front of S3 readers) and only then calls :meth:`OpenedRelease.accept`, which writes the roots walked, the
serial and the checkpoint: a root or serial is never kept for a release that was not used (tough's
CVE-2025-2888 persisted a root before its rollback check). A node without a state directory keeps
nothing: each open walks from the pin.

:func:`verify_recorded` is the other half: a release accepted earlier and recorded beside what it placed
(a fetched DEST's release file, re-checked by ``modelreg verify`` and ``cache sweep``) is checked for its
signature at its own issue time, its paths and its bundle; not its expiry or serial, which held when it
was accepted.

Example:
    >>> NodePolicy(trust_root_sha256="AB" * 32).trust_root_sha256 == "ab" * 32
    True
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from registry.client.api import ManifestResponse, RegistryApi
from registry.domain.errors import InvalidRefError, LogProofError
from registry.domain.refs import ModelRef
from registry.node.assemble import check_bundle_matches, check_reserved
from registry.node.log_proofs import WitnessPolicy, verify_release_log
from registry.node.trust import NodeTrust, check_trust_options, pinned_root
from registry.signing.release import Release, check_base_release, verify_release
from registry.signing.trust_root import TrustRoot


def ref_selector(ref: ModelRef) -> str:
    """The ``ref`` of the manifest request and of the release: an alias, or a version number as text.

    Example:
        >>> from registry.domain.refs import parse_ref
        >>> ref_selector(parse_ref("modelreg://acme/tiny@prod")), ref_selector(parse_ref("acme/tiny@3"))
        ('prod', '3')
    """
    if ref.alias is not None:
        return ref.alias
    if ref.version is not None:
        return str(ref.version)
    raise InvalidRefError(str(ref), "name an alias or a version: tenant/name@prod or tenant/name@3")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@dataclasses.dataclass(frozen=True)
class NodePolicy:
    """What this node requires of every release it accepts, built once from its options.

    Attributes:
        trust_root_file: The pinned root (``--trust-root``).
        trust_root_sha256: Root 1's sha256 (``--trust-root-sha256``), lower case; with a file, the file's.
        witnesses: The witnesses the node requires on its own (``--witness``, quorum), beside its root's.

    Raises:
        InvalidInputError: no trust root named, or a pin that is not a sha256.
    """

    trust_root_file: Path | None = None
    trust_root_sha256: str | None = None
    witnesses: WitnessPolicy | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "trust_root_sha256", check_trust_options(self.trust_root_file,
                                                                          self.trust_root_sha256))

    def pinned_root(self, fetch_bytes: Callable[[int], bytes | None] | None = None) -> TrustRoot:
        """The pinned root (:func:`registry.node.trust.pinned_root`; ``fetch_bytes``: root n's bytes)."""
        return pinned_root(self.trust_root_file, self.trust_root_sha256, fetch_bytes)


@dataclasses.dataclass
class OpenedRelease:
    """A release that passed every check, not yet accepted: its manifest answer and the trust it was
    checked with (roots walked, checkpoint proven), held until :meth:`accept`."""

    release: Release
    response: ManifestResponse
    trust: NodeTrust

    @property
    def transport(self) -> Mapping[str, str]:
        return self.response.transport

    @property
    def bundle(self) -> Mapping[str, Any]:
        return self.response.signature_bundle

    @property
    def envelope(self) -> Mapping[str, Any]:
        return self.response.envelope

    def accept(self) -> None:
        """The caller's work succeeded: persist the roots walked, the serial and the log checkpoint."""
        self.trust.accept(self.release.model, self.release.ref, self.release.serial)
        self.trust.commit()


class ReleaseOpener:
    """Opens releases for one node (module docstring).

    Args:
        api: The registry, with the node's token.
        policy: What the node requires (trust pin, its own witnesses).
        state_dir: Where accepted roots, serials and checkpoints are kept (the node cache's directory);
            None keeps nothing.
        clock: Now, for expiry.
    """

    def __init__(self, api: RegistryApi, policy: NodePolicy, *, state_dir: Path | None,
                 clock: Callable[[], dt.datetime] = utcnow) -> None:
        self.api, self.policy, self.state_dir, self.clock = api, policy, state_dir, clock

    def trust(self) -> NodeTrust:
        """The node's trust as kept: the pinned root walked through the roots accepted before.

        Raises:
            InvalidInputError, RootError: the pinned root cannot be read or is not the pinned one.
        """
        trust = NodeTrust.load(self.policy.pinned_root(self.api.trust_root_bytes), self.state_dir)
        trust.witness_policy = self.policy.witnesses
        return trust

    def open(self, ref: ModelRef, *, etag: str | None = None, wait: float | None = None) -> OpenedRelease | None:
        """Ask the registry for ``ref``'s release (a long poll with ``etag`` and ``wait``) and verify it.

        Returns:
            The opened release; None when the registry answered 304 (``etag`` is still current).

        Raises:
            RevokedError, NotApprovedError, ReleaseNotFoundError, NetworkError: from the registry.
            Anything :meth:`verify` raises.
        """
        trust = self.trust()  # the pinned root is read (or fetched and checked) before the manifest is asked for
        response = self.api.manifest(ref.tenant, ref.name, ref_selector(ref), etag=etag, wait=wait)
        return None if response is None else self.verify(ref, response, trust)

    def verify(self, ref: ModelRef, response: ManifestResponse, trust: NodeTrust | None = None) -> OpenedRelease:
        """Every check of the module docstring on a manifest answer already received (``trust``: the node's, as
        :meth:`trust` loaded it before the manifest was asked for; loaded now when not given).

        Raises:
            RootError: a rotation that does not chain, an expired root, a root that is not the pinned one.
            SignatureError, ReleaseExpiredError, ReleaseRollbackError, ReleaseMismatchError,
            InvalidPathError, BadManifestError: as named.
            LogProofError, MalformedNoteError, UnverifiedNoteError: not proven in the log as required.
        """
        trust = trust if trust is not None else self.trust()
        now = self.clock()
        hint = response.trust_root_version
        # The manifest says which root signed it: when ours is as new, the walk only checks our root's expiry.
        fetch = self.api.trust_root if hint is None or hint > trust.root.version else (lambda version: None)
        trust.refresh(fetch, now=now)
        release = verify_manifest(response.envelope, response.signature_bundle, ref=ref, trust=trust, now=now,
                                  log=response.log, consistency=self.api.log_consistency)
        return OpenedRelease(release, response, trust)


    def open_base(self, adapter: OpenedRelease) -> OpenedRelease:
        """The base an opened adapter's release names (``adapter_of``): its release asked for by the version
        number named, verified with the adapter's trust, and held against ``adapter_of``
        (:func:`registry.signing.release.check_base_release`) before anything is downloaded.

        Raises:
            ValueError: ``adapter`` is no adapter's release.
            AdapterBaseMismatchError: the base release is not the one the adapter's release names.
            RevokedError, NotApprovedError, ReleaseNotFoundError, NetworkError: the registry refused the base.
            Anything :meth:`verify` raises.
        """
        bound = adapter.release.adapter_of
        if bound is None:
            raise ValueError(f"{adapter.release.model}@{adapter.release.ref} is no adapter's release")
        response = self.api.manifest(bound.tenant, bound.name, str(bound.version))
        assert response is not None  # no ETag was sent, so no 304
        base = self.verify(ModelRef(bound.tenant, bound.name, version=bound.version), response, adapter.trust)
        check_base_release(adapter.release, base.release)
        return base


def verify_manifest(envelope: Mapping[str, Any], bundle: Mapping[str, Any], *, ref: ModelRef, trust: NodeTrust,
                    now: dt.datetime, log: Any = None,
                    consistency: Callable[[int, int], Any] | None = None) -> Release:
    """Steps 2 to 4 of the module docstring against ``trust`` (its root already walked forward).

    The proven checkpoint is handed to ``trust`` to keep; nothing is written.
    """
    selector = ref_selector(ref)
    release = verify_release(envelope, trust.root, now=now, model=ref.model, ref=selector,
                             min_serial=trust.serial(ref.model, selector))
    check_reserved(release.files, unit=release.components is not None)
    check_bundle_matches(bundle, release)
    _verify_logged(release, log, trust, consistency)
    return release


def _verify_logged(release: Release, log: Any, trust: NodeTrust,
                   consistency: Callable[[int, int], Any] | None) -> None:
    if trust.root.log is None:
        if trust.witness_policy is not None:
            raise LogProofError("missing", f"this node requires witnesses, but trust root {trust.root.version} "
                                           "names no verifiable log")
        return

    def no_proofs(first: int, second: int) -> Any:
        raise LogProofError("missing", "no registry to ask for a consistency proof")

    origin = trust.root.log.origin
    keep = verify_release_log(release, log, trust.root.log, kept=trust.log_checkpoint(origin),
                              consistency=consistency or no_proofs, node=trust.witness_policy)
    trust.accept_checkpoint(origin, keep)


def verify_recorded(envelope: Mapping[str, Any], bundle: Mapping[str, Any], root: TrustRoot, *, model: str,
                    ref: str, issued: dt.datetime) -> Release:
    """A release accepted earlier, as recorded: its signature by ``root`` at its own issue time (``issued``:
    its expiry is not the question), its paths, and ``bundle`` the one it names.

    Raises:
        SignatureError, ReleaseMismatchError, InvalidPathError, BadManifestError: as named.
    """
    release = verify_release(envelope, root, now=issued, model=model, ref=ref)
    check_reserved(release.files, unit=release.components is not None)
    check_bundle_matches(bundle, release)
    return release
