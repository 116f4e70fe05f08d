"""``modelreg admission``: the Kubernetes admission webhook that lets a pod start only on approved model digests.

The API server sends an ``AdmissionReview`` (``admission.k8s.io/v1``) to ``POST /validate`` or ``POST /mutate``
over TLS; the webhook finds the object's model references (:func:`registry.domain.admission_refs.references_of`),
asks the registry to decide them (``POST /v1/admission/reviews``, :mod:`registry.services.admission`), and answers
the review: the request's ``uid`` echoed, ``allowed``, a ``status.message`` naming each denied reference and its
rule, the warned ones as ``warnings``, and on ``/mutate`` an RFC 6902 ``JSONPatch`` replacing each allowed alias or
tag by its pinned form at the reference's JSON pointer.

The registry is not a single point of failure (ADR 0019). Each signed release the registry returns with an allowed
reference is verified as a node verifies one (:class:`registry.node.opener.ReleaseOpener`: the pinned trust root,
signature, expiry, serial, log proof) before the reference is kept in the :class:`VerifiedCache`, with its
release's expiry (under steady traffic a proof is renewed once a minute, not on every review:
:data:`REPROVE_AFTER`); revocations are followed from the event stream
(:class:`registry.node.revocations.RevocationFollower`) and drop what they name. While the registry is
unreachable (a network failure or a 5xx), a reference the cache holds for the namespace, not revoked and within
its release's expiry, is admitted with a warning saying so; anything else is denied. A release that does not
verify is never cached, and its reference is denied: the webhook never admits what it cannot prove.

The cache's file lies in the state directory, which another process may write; it is proven again at each
start, as a node proves a release it recorded (:func:`registry.node.opener.verify_recorded`): each entry keeps
the signed release that proved it (one copy per release), and an entry whose release is not signed by the pinned
root's release keys at its own issue time, or does not name the entry's model, alias or version, tenant and
expiry (:func:`proven_entry`), is dropped and logged, never used. A planted or edited entry adds no admission.

While the registry is reachable, a review whose every reference the registry decided allowed under
``--refresh-seconds`` ago (:data:`REFRESH_SECONDS`), still proven by the cache for that very version, is answered
from the proof without asking; its record is queued and reported in batches (:class:`AnsweredReporter`,
``POST /v1/admission/answered``). Denials, warnings and anything not decided within the period ask the registry.

``GET /healthz`` answers while the process runs; ``GET /readyz`` once its trust root is loaded (the registry need
not be reachable: the cache answers without it).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
import logging
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from registry import statefile
from registry.client.api import ManifestResponse, RegistryApi
from registry.client.errors import NetworkError
from registry.client.http import RemoteError
from registry.domain.admission import MODELREG, S3, target_of
from registry.domain.errors import InvalidInputError, RegistryError
from registry.domain.refs import parse_ref
from registry.node.cache import RevocationReport
from registry.node.opener import ReleaseOpener, utcnow, verify_recorded
from registry.node.trust import read_json_file
from registry.signing.release import Release
from registry.signing.trust_root import TrustRoot

log = logging.getLogger(__name__)

API_VERSION = "admission.k8s.io/v1"
MAX_REVIEW_BYTES = 4 << 20
"""The largest AdmissionReview read (an object and its old object, each at most etcd's 1.5 MiB)."""
MAX_CACHED = 65536
"""References kept in the verified cache; the oldest go first."""
MAX_RELEASES = 1024
"""Signed releases kept beside the cache's entries (each proves the entries naming it); the oldest entries go
first."""
MAX_REVOKED = 65536
"""Revoked versions kept (the newest by name)."""
MAX_CACHE_BYTES = 256 << 20
"""The largest cache file read: a larger one is not read, and the cache starts empty."""
CONNECTION_TIMEOUT = 15.0
"""Seconds a connection may stay silent (its handshake, its request) before it is closed."""
REGISTRY_TIMEOUT = 5.0
"""Seconds a review waits on the registry before the verified cache answers (the webhook's own timeout in the
ValidatingWebhookConfiguration is longer)."""
REPROVE_AFTER = 60.0
"""Seconds a reference's proof in the cache stands before a release that comes with it is verified again. The
registry signs a fresh release with every allowed reference; verifying and keeping each one (its signature, its
log proof, the serial and checkpoint written and fsynced, the cache rewritten) cost more than all the rest of a
review, and adds nothing while the proof held is of the same version and far from its expiry."""
REFRESH_SECONDS = 30.0
"""Seconds a reference the registry decided allowed is answered from the webhook's proof without asking the
registry again (``--refresh-seconds``; 0: every review asks). The staleness bound of ADR 0019: an alias moved or a
namespace's policy changed applies to such a reference within this period; a revocation as soon as the
follower reads it."""
MAX_PENDING = 10000
"""Reviews answered from the proof and not yet reported; with this many waiting (the registry not taking them),
every review asks the registry again."""
REPORT_BATCH = 256
"""Reviews reported in one ``POST /v1/admission/answered`` (the registry's ``MAX_ANSWERED``)."""
REPORT_EVERY = 0.2
"""Seconds the reporter waits for more answered reviews before sending what it holds."""
REPORT_BACKOFF = 5.0
"""The longest wait between reports the registry did not take."""
REPORT_TIMEOUT = 60.0
"""Seconds a report waits on the registry (it records the whole batch in one transaction)."""
UNPROVEN = "admission.unproven"
"""The rule of a reference denied because the registry is unreachable and the cache cannot prove it."""
UNVERIFIED = "admission.unverified"
"""The rule of a reference whose signed release did not verify."""


@dataclass(frozen=True)
class Cached:
    """A reference seen allowed in a namespace, proven by a verified release.

    Attributes:
        tenant, model, version: The version it resolved to (``model``: the name within the tenant).
        pinned: Its pinned form (None when it has none).
        expires_at: The verified release's expiry: past it, the cache proves nothing.
        release: The sha256 of the signed release envelope that proved it (kept beside the entries).
    """

    tenant: str
    model: str
    version: int
    pinned: str | None
    expires_at: dt.datetime
    release: str

    def as_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "model": self.model, "version": self.version, "pinned": self.pinned,
                "expires_at": self.expires_at.isoformat(), "release": self.release}

    @classmethod
    def from_json(cls, doc: Any) -> "Cached | None":
        try:
            expires = dt.datetime.fromisoformat(doc["expires_at"])
            if expires.tzinfo is None or type(doc["version"]) is not int or not isinstance(doc["release"], str):
                return None
            return cls(str(doc["tenant"]), str(doc["model"]), doc["version"],
                       doc["pinned"] if isinstance(doc.get("pinned"), str) else None, expires, doc["release"])
        except (KeyError, TypeError, ValueError):
            return None


def envelope_digest(envelope: Mapping[str, Any]) -> str:
    """The sha256 a signed release envelope is kept under (its canonical JSON)."""
    return hashlib.sha256(json.dumps(envelope, sort_keys=True).encode()).hexdigest()


class VerifiedCache:
    """What the webhook proved allowed, per namespace, reference kind and reference, and the revocations it has
    read; kept in ``<state_dir>/admission/cache.json`` (nothing is kept without a state directory).

    Each entry names the signed release that proved it; the releases are kept once each beside the entries. The
    file is the state directory's, which another process may write: :meth:`load` trusts no entry of it until its
    release verifies again against the node's trust root (:func:`proven_entry`); one that does not is dropped and
    logged. It is also the :class:`~registry.node.revocations.RevocationFollower`'s cache: ``state``/``set_state``
    keep the event cursor, :meth:`remove_revoked` drops a revoked version.
    """

    def __init__(self, state_dir: Path | None) -> None:
        self.path = Path(state_dir) / "admission" / "cache.json" if state_dir is not None else None
        self._lock = threading.Lock()
        self._entries: dict[str, Cached] = {}
        self._releases: dict[str, dict[str, Any]] = {}
        self._uses: dict[str, int] = {}
        self._revoked: set[tuple[str, str, int]] = set()
        self._state: dict[str, str] = {}

    def load(self, root: TrustRoot) -> int:
        """Read the kept file (bounded), keeping each entry whose release verifies against ``root`` and proves it
        (:func:`proven_entry`); the others are dropped and logged. The number of entries kept."""
        if self.path is None or not self.path.is_file():
            return 0
        try:
            doc = read_json_file(self.path, MAX_CACHE_BYTES, "the admission cache")
        except InvalidInputError as exc:
            log.warning("%s: starting with an empty cache", exc)
            return 0
        if not isinstance(doc, dict):
            log.warning("the admission cache %s is not an object: starting with an empty cache", self.path)
            return 0
        entries, releases = doc.get("entries"), doc.get("releases")
        entries = entries if isinstance(entries, dict) else {}
        releases = releases if isinstance(releases, dict) else {}
        if len(entries) > MAX_CACHED or len(releases) > MAX_RELEASES:
            log.warning("the admission cache %s holds over %d entries or %d releases: starting with an empty "
                        "cache", self.path, MAX_CACHED, MAX_RELEASES)
            entries, releases = {}, {}
        verified: dict[str, Release | str] = {}
        kept: dict[str, Cached] = {}
        for key, entry in entries.items():
            cached = Cached.from_json(entry)
            problem = "not an entry" if cached is None else None
            if cached is not None:
                release = verified.get(cached.release)
                if release is None:
                    release = verified[cached.release] = _recorded(releases.get(cached.release), cached.release,
                                                                   root)
                problem = release if isinstance(release, str) else proven_entry(key, cached, release)
            if problem is not None:
                log.warning("admission cache: dropped %r: %s", str(key)[:300].replace("\n", " "), problem)
                continue
            assert cached is not None
            kept[key] = cached
        revoked = doc.get("revoked") if isinstance(doc.get("revoked"), list) else []
        state = doc.get("state") if isinstance(doc.get("state"), dict) else {}
        with self._lock:
            for key, cached in kept.items():
                self._entries[key] = cached
                self._uses[cached.release] = self._uses.get(cached.release, 0) + 1
                self._releases[cached.release] = releases[cached.release]
            for item in revoked[:MAX_REVOKED]:
                if isinstance(item, list) and len(item) == 3 and type(item[2]) is int:
                    self._revoked.add((str(item[0]), str(item[1]), item[2]))
            self._state = {k: v for k, v in state.items() if isinstance(k, str) and isinstance(v, str)}
        log.info("admission cache: %d of %d entries proven by their signed releases", len(kept), len(entries))
        return len(kept)

    def _save(self) -> None:
        if self.path is None:
            return
        doc = {"entries": {k: v.as_json() for k, v in self._entries.items()}, "releases": self._releases,
               "revoked": sorted([list(r) for r in self._revoked])[-MAX_REVOKED:], "state": self._state}
        statefile.write_atomic(self.path, json.dumps(doc, sort_keys=True).encode(), make_parents=True)

    @staticmethod
    def key(namespace: str, kind: str, uri: str) -> str:
        return f"{namespace}\n{kind}\n{uri}"

    def _drop(self, key: str) -> None:
        cached = self._entries.pop(key)
        self._uses[cached.release] -= 1
        if not self._uses[cached.release]:
            del self._uses[cached.release], self._releases[cached.release]

    def put(self, namespace: str, kind: str, uri: str, cached: Cached, release: Mapping[str, Any]) -> None:
        """Keep ``uri`` (a reference of ``kind``) as proven allowed in ``namespace`` by ``release`` (``envelope``
        and ``signature_bundle``, kept under ``cached.release``), only after that release verified."""
        key = self.key(namespace, kind, uri)
        with self._lock:
            if (cached.tenant, cached.model, cached.version) in self._revoked or self._entries.get(key) == cached:
                return
            if key in self._entries:
                self._drop(key)
            while self._entries and (len(self._entries) >= MAX_CACHED or (
                    cached.release not in self._releases and len(self._releases) >= MAX_RELEASES)):
                self._drop(next(iter(self._entries)))
            self._entries[key] = cached
            self._uses[cached.release] = self._uses.get(cached.release, 0) + 1
            self._releases[cached.release] = {"envelope": release["envelope"],
                                              "signature_bundle": release["signature_bundle"]}
            self._save()

    def proven(self, namespace: str, kind: str, uri: str, now: dt.datetime) -> Cached | None:
        """The entry proving ``uri`` allowed in ``namespace`` now: held, not revoked, its release not expired."""
        with self._lock:
            cached = self._entries.get(self.key(namespace, kind, uri))
            if cached is None or (cached.tenant, cached.model, cached.version) in self._revoked:
                return None
            return cached if now < cached.expires_at else None

    def state(self, key: str) -> str | None:
        with self._lock:
            return self._state.get(key)

    def set_state(self, key: str, value: str) -> None:
        with self._lock:
            self._state[key] = value
            self._save()

    def remove_revoked(self, tenant: str, model: str, version: int) -> RevocationReport:
        """Record ``tenant/model@version`` as revoked and drop every reference resolved to it."""
        with self._lock:
            newly = (tenant, model, version) not in self._revoked
            self._revoked.add((tenant, model, version))
            held = [k for k, v in self._entries.items() if (v.tenant, v.model, v.version) == (tenant, model, version)]
            for key in held:
                self._drop(key)
            self._save()
        return RevocationReport(tenant, model, version, held=bool(held), newly_revoked=newly)


def _recorded(kept: Any, digest: str, root: TrustRoot) -> Release | str:
    """The release kept under ``digest``, verified as a node verifies a release it recorded
    (:func:`registry.node.opener.verify_recorded`: signed by ``root``'s release keys at its own issue time, its
    paths, its bundle); or why it is not one."""
    if not isinstance(kept, dict) or not isinstance(kept.get("envelope"), dict) \
            or not isinstance(kept.get("signature_bundle"), dict):
        return "its signed release is not kept"
    envelope = kept["envelope"]
    if envelope_digest(envelope) != digest:
        return "its release is not the one it names"
    try:
        claimed = json.loads(base64.b64decode(envelope["payload"], validate=True))
        issued = dt.datetime.fromisoformat(claimed["issued_at"])
        model, ref = str(claimed["model"]), str(claimed["ref"])
        if issued.tzinfo is None:
            return "its release has no issue time"
        return verify_recorded(envelope, kept["signature_bundle"], root, model=model, ref=ref, issued=issued)
    except RegistryError as exc:
        return f"its release does not verify: {exc}"
    except (KeyError, TypeError, ValueError, binascii.Error):
        return "its release is not a release envelope"


def proven_entry(key: str, cached: Cached, release: Release) -> str | None:
    """Whether the verified ``release`` proves the kept entry ``key`` (namespace, kind, reference): the reference
    names the release's model, and its alias, or the version number the release is of; the entry claims the
    release's tenant, version and expiry; its pinned form names the same model (for ``modelreg://``, ``s3://`` and
    ``modelreg fetch``: exactly that version). None when it does, else why not.

    A ``/v2`` digest and an ``hf://`` commit are not in the release (the registry resolved them): an entry keeps
    what the registry answered for them, bound here only to the release's model.
    """
    namespace, _, rest = key.partition("\n")
    kind, _, uri = rest.partition("\n")
    if not namespace or not kind or not uri:
        return "not a namespace, kind and reference"
    target = target_of(uri, kind, ())
    if target.model is None or target.problem is not None:
        return "not a reference to a model of the registry"
    if (release.model, release.tenant) != (target.model, target.tenant) \
            or f"{cached.tenant}/{cached.model}" != release.model:
        return f"its release is of {release.model} for tenant {release.tenant}, not {target.model}"
    ref = target.selector if target.selector_kind == "alias" else str(cached.version)
    if release.ref != ref or (target.selector_kind == "version" and target.selector != ref):
        return f"its release is of {release.model}@{release.ref}, not @{target.selector}"
    if release.version != cached.version:
        return f"it claims version {cached.version}, its release is of version {release.version}"
    if release.expires_at != cached.expires_at:
        return f"it claims an expiry of {cached.expires_at.isoformat()}, its release {release.expires_at.isoformat()}"
    if cached.pinned is not None:
        pinned = target_of(cached.pinned, kind, ())
        if (pinned.scheme, pinned.model, pinned.host, pinned.image) != (target.scheme, target.model, target.host,
                                                                         False) or pinned.problem is not None \
                or pinned.selector_kind not in ("version", "commit", "digest"):
            return f"its pinned form {cached.pinned!r} does not pin {uri}"
        if target.scheme in (MODELREG, S3) and cached.pinned != target.pinned(number=cached.version, commit="",
                                                                               digest=None):
            return f"its pinned form {cached.pinned!r} is not version {cached.version}"
    return None


def references_of(obj: Mapping[str, Any]) -> list[Any]:
    """:func:`registry.domain.admission_refs.references_of` (imported on first use)."""
    from registry.domain.admission_refs import references_of as found

    return found(obj)


class Webhook:
    """Answers AdmissionReviews (module docstring).

    Args:
        api: The registry, with the webhook's token (role ``admission``); a short timeout.
        opener: The node's door for releases (its trust pin and state directory).
        cache: The verified cache.
        clock: Now, for the cache's expiry.
        refresh_seconds: :data:`REFRESH_SECONDS`.
        report_api: The registry for the reporter (default ``api``): a longer timeout than a review's, since the
            registry records a whole batch in one transaction.
    """

    def __init__(self, api: RegistryApi, opener: ReleaseOpener, cache: VerifiedCache, *,
                 clock: Callable[[], dt.datetime] = utcnow, refresh_seconds: float = REFRESH_SECONDS,
                 report_api: RegistryApi | None = None) -> None:
        self.api, self.opener, self.cache, self.clock = api, opener, cache, clock
        self._verified: dict[str, Release] = {}
        self._proved_at: dict[str, dt.datetime] = {}
        """When each cache key's proof was last verified by this process (:data:`REPROVE_AFTER`)."""
        self.refresh = dt.timedelta(seconds=refresh_seconds)
        self._decided: dict[str, tuple[dt.datetime, int, str | None]] = {}
        """Per cache key, when the registry last decided it allowed as approved, to which version and pinned
        form (answered from the proof for :attr:`refresh` after)."""
        self._reachable = True
        self.reporter = AnsweredReporter(report_api or api, on_unreachable=self._unreachable)
        self._trust_lock = threading.Lock()

    def answer(self, review: Any, *, mutate: bool) -> dict[str, Any]:
        """The AdmissionReview answered for ``review`` (as the API server sent it).

        Raises:
            InvalidInputError: not an ``admission.k8s.io/v1`` AdmissionReview with a request and its uid.
        """
        request = _request_of(review)
        uid = request["uid"]
        obj = request.get("object")
        namespace = request.get("namespace") or ""
        if request.get("operation") == "DELETE" or not isinstance(obj, dict):
            return _response(uid, True)
        try:
            refs = references_of(obj)
        except InvalidInputError as exc:
            return _response(uid, False, message=f"the object cannot be read for model references: {exc}")
        if not refs:
            return _response(uid, True)
        kind = request.get("kind") if isinstance(request.get("kind"), dict) else {}
        reviewed = {"kind": str(kind.get("kind", "")), "namespace": namespace,
                    "name": str(request.get("name") or obj.get("metadata", {}).get("name") or ""),
                    "uid": uid, "operation": str(request.get("operation", ""))}
        answered = self._from_proof(uid, reviewed, refs, mutate)
        if answered is not None:
            return answered
        body = {"object": reviewed, "references": [self._asked(namespace, r) for r in refs]}
        try:
            decided = self.api.admission_review(body)
        except NetworkError as exc:
            self._reachable = False
            return self._offline(uid, namespace, refs, mutate, f"{exc}")
        except RemoteError as exc:
            if exc.status >= 500:
                self._reachable = False
                return self._offline(uid, namespace, refs, mutate, f"the registry answered {exc.status}")
            return _response(uid, False, message=f"the registry refused the review: {exc}")
        if not self._reachable:
            self._reachable = True
            self.reporter.wake()  # what waits is sent now, not after the reporter's backoff
        return self._online(uid, namespace, decided, mutate)

    def _unreachable(self) -> None:
        self._reachable = False

    def _from_proof(self, uid: str, reviewed: dict[str, str], refs: list[Any], mutate: bool
                    ) -> dict[str, Any] | None:
        """The review answered allowed from the webhook's proof, its record queued for the registry (ADR 0019);
        None when the registry must decide it: the registry was unreachable at the last ask or the last report
        (then it is asked, and the cache answers with its warning), the reporter's queue is full, or a
        reference was not decided allowed as approved under :attr:`refresh` ago, or its proof no longer stands
        for that very version (revoked per the followed stream, its release expired)."""
        if not self.refresh or not self._reachable or self.reporter.full():
            return None
        now = self.clock()
        namespace, patch, reported = reviewed["namespace"], [], []
        for ref in refs:
            key = VerifiedCache.key(namespace, ref.kind, ref.uri)
            decided = self._decided.get(key)
            if decided is None or not now - self.refresh <= decided[0] <= now:
                return None
            cached = self.cache.proven(namespace, ref.kind, ref.uri, now)
            if cached is None or (cached.version, cached.pinned) != decided[1:]:
                return None
            reported.append({"uri": ref.uri, "path": ref.path, "kind": ref.kind, "version": cached.version,
                             "pinned": cached.pinned})
            if mutate and cached.pinned and cached.pinned != ref.uri:
                patch.append({"op": "replace", "path": ref.path, "value": cached.pinned})
        if not self.reporter.add({"object": reviewed, "references": reported, "decided_at": now.isoformat()}):
            return None
        return _response(uid, True, patch=patch if mutate else None)

    def _asked(self, namespace: str, ref: Any) -> dict[str, Any]:
        """A reference as the registry is asked to decide it, with the version whose proof is held (the registry
        then signs no release for it: :data:`REPROVE_AFTER`)."""
        asked = {"uri": ref.uri, "path": ref.path, "kind": ref.kind}
        held = self._held(namespace, ref.kind, ref.uri)
        if held is not None:
            asked["held"] = held.version
        return asked

    def _online(self, uid: str, namespace: str, decided: Any, mutate: bool) -> dict[str, Any]:
        denied, warnings, patch = [], [], []
        for ref in decided.get("references", []) if isinstance(decided, dict) else []:
            outcome, message = ref.get("outcome"), str(ref.get("message", ""))
            if outcome == "allowed" and ref.get("release") is not None:
                problem = self._prove(namespace, ref)
                if problem is not None:
                    denied.append(f"{ref.get('uri')} at {ref.get('path')}: its signed release does not verify: "
                                  f"{problem} (rule {UNVERIFIED})")
                    continue
            if outcome == "denied":
                denied.append(message)
            elif outcome == "warned":
                warnings.append(message)
            elif outcome != "allowed":
                denied.append(f"{ref.get('uri')}: the registry gave no decision (rule {UNPROVEN})")
                continue
            pinned = ref.get("pinned")
            if mutate and outcome == "allowed" and isinstance(pinned, str) and pinned != ref.get("uri"):
                patch.append({"op": "replace", "path": ref["path"], "value": pinned})
        if not denied and not warnings:
            self._remember(namespace, decided)
        return _response(uid, not denied, message="; ".join(denied) or None, warnings=warnings,
                         patch=patch if mutate and not denied else None)

    def _remember(self, namespace: str, decided: Mapping[str, Any]) -> None:
        """Keep when the registry decided each reference of an allowed review allowed as approved, for
        :meth:`_from_proof`."""
        now = self.clock()
        for ref in decided.get("references", []):
            if ref.get("outcome") != "allowed" or ref.get("rule") != "admission.approved" \
                    or type(ref.get("version")) is not int:
                continue
            if len(self._decided) >= MAX_CACHED:
                self._decided.clear()
            pinned = ref.get("pinned") if isinstance(ref.get("pinned"), str) else None
            self._decided[VerifiedCache.key(namespace, str(ref.get("kind")), str(ref.get("uri")))] = (
                now, ref["version"], pinned)

    def _prove(self, namespace: str, ref: Mapping[str, Any]) -> str | None:
        """Verify the release the registry returned with an allowed reference and cache it; the problem, or None."""
        try:
            model_ref = parse_ref(str(ref.get("release_ref")))
            if self._still_proven(namespace, ref, model_ref.tenant, model_ref.name):
                return None
            response = ManifestResponse.from_json({**ref["release"], "transport": {}}, None)
            digest = envelope_digest(response.envelope)
            release = self._verified.get(digest)
            if release is None:
                with self._trust_lock:
                    opened = self.opener.verify(model_ref, response)
                    opened.accept()
                release = opened.release
                if len(self._verified) >= MAX_CACHED:
                    self._verified.clear()
                self._verified[digest] = release
            if type(ref.get("version")) is not int:
                return "the decision names no version"
            cached = Cached(model_ref.tenant, model_ref.name, ref["version"], ref.get("pinned"), release.expires_at,
                            digest)
            key = self.cache.key(namespace, str(ref["kind"]), str(ref["uri"]))
            problem = proven_entry(key, cached, release)  # what a restart will ask of the entry, asked now
            if problem is not None:
                return problem
            self.cache.put(namespace, str(ref["kind"]), str(ref["uri"]), cached,
                           {"envelope": response.envelope, "signature_bundle": response.signature_bundle})
            if len(self._proved_at) >= MAX_CACHED:
                self._proved_at.clear()
            self._proved_at[key] = self.clock()
        except (RegistryError, KeyError, TypeError, ValueError) as exc:
            return str(exc) or type(exc).__name__
        return None

    def _still_proven(self, namespace: str, ref: Mapping[str, Any], tenant: str, model: str) -> bool:
        """Whether the proof held for ``ref`` in ``namespace`` (:meth:`_held`) is of the very version and pinned
        form the registry decided now."""
        cached = self._held(namespace, str(ref.get("kind")), str(ref.get("uri")))
        return cached is not None and (cached.tenant, cached.model, cached.version, cached.pinned) == (
            tenant, model, ref.get("version"), ref.get("pinned"))

    def _held(self, namespace: str, kind: str, uri: str) -> Cached | None:
        """The cache's proof of ``uri`` in ``namespace`` when this process verified it under :data:`REPROVE_AFTER`
        seconds ago and it stands, unrevoked, for at least as long again; else None."""
        now = self.clock()
        proved_at = self._proved_at.get(VerifiedCache.key(namespace, kind, uri))
        if proved_at is None or not now - dt.timedelta(seconds=REPROVE_AFTER) <= proved_at <= now:
            return None
        return self.cache.proven(namespace, kind, uri, now + dt.timedelta(seconds=REPROVE_AFTER))

    def _offline(self, uid: str, namespace: str, refs: list[Any], mutate: bool, why: str) -> dict[str, Any]:
        now = self.clock()
        denied, warnings, patch = [], [], []
        for ref in refs:
            cached = self.cache.proven(namespace, ref.kind, ref.uri, now)
            if cached is None:
                denied.append(f"{ref.uri} at {ref.path}: the registry is unreachable ({why}) and the verified cache "
                              f"cannot prove it approved (rule {UNPROVEN})")
                continue
            warnings.append(f"registry unreachable: {ref.uri} admitted from the verified cache "
                            f"({cached.tenant}/{cached.model}@{cached.version}, release valid until "
                            f"{cached.expires_at:%Y-%m-%dT%H:%M:%SZ})")
            if mutate and cached.pinned and cached.pinned != ref.uri:
                patch.append({"op": "replace", "path": ref.path, "value": cached.pinned})
        return _response(uid, not denied, message="; ".join(denied) or None, warnings=warnings,
                         patch=patch if mutate and not denied else None)


def _request_of(review: Any) -> dict[str, Any]:
    if not isinstance(review, dict) or (review.get("apiVersion"), review.get("kind")) != (API_VERSION,
                                                                                          "AdmissionReview"):
        raise InvalidInputError(f"not an {API_VERSION} AdmissionReview")
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str) or not request["uid"]:
        raise InvalidInputError("the AdmissionReview has no request with a uid")
    if len(request["uid"]) > 128:
        raise InvalidInputError("the request's uid is over 128 characters")
    return request


class AnsweredReporter:
    """Reports the reviews the webhook answered from its proof to the registry, in batches
    (``POST /v1/admission/answered``), from its own thread (:meth:`run`).

    The queue is bounded (:data:`MAX_PENDING`): :meth:`add` refuses when it is full, and the webhook then asks
    the registry for the review instead, so no answered review goes unreported for want of room. A batch the
    registry does not take (unreachable, a 5xx) is kept and sent again, backing off; one it refuses (4xx) is
    logged and dropped, as are the reviews it names as refused.

    Args:
        api: The registry (the webhook's token).
        on_unreachable: Called when a report finds the registry unreachable or answering 5xx (the webhook then
            stops answering from its proof until a review it asks is answered).
    """

    def __init__(self, api: RegistryApi, *, on_unreachable: Callable[[], None] = lambda: None) -> None:
        self.api, self.on_unreachable = api, on_unreachable
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._more = threading.Event()
        self._woken = False

    def wake(self) -> None:
        """Send what waits now (the registry answers again)."""
        self._woken = True
        self._more.set()

    def full(self) -> bool:
        return len(self._pending) >= MAX_PENDING

    def add(self, answered: dict[str, Any]) -> bool:
        """Queue one answered review; False when the queue is full."""
        with self._lock:
            if len(self._pending) >= MAX_PENDING:
                return False
            self._pending.append(answered)
            if len(self._pending) >= REPORT_BATCH:
                self._more.set()
        return True

    def run(self, stop: threading.Event) -> None:
        """Send what is queued until ``stop`` is set (then once more)."""
        backoff = REPORT_EVERY
        while not stop.is_set():
            self._more.wait(backoff)
            self._more.clear()
            if self._woken:
                self._woken, backoff = False, REPORT_EVERY
            backoff = REPORT_EVERY if self.flush() else min(backoff * 2, REPORT_BACKOFF)
        self.flush()

    def flush(self) -> bool:
        """Send every queued review in batches; False when the registry did not take one (it is kept)."""
        while True:
            with self._lock:
                batch = self._pending[:REPORT_BATCH]
            if not batch:
                return True
            try:
                result = self.api.admission_answered({"reviews": batch})
            except NetworkError as exc:
                self.on_unreachable()
                log.warning("answered reviews not reported (%d waiting): %s", len(self._pending), exc)
                return False
            except RemoteError as exc:
                if exc.status >= 500:
                    self.on_unreachable()
                    log.warning("answered reviews not reported (%d waiting): %s", len(self._pending), exc)
                    return False
                log.error("the registry refused %d answered reviews: %s", len(batch), exc)
                result = {}
            for refused in result.get("refused", []) if isinstance(result, dict) else []:
                log.error("the registry refused an answered review: %s", str(refused)[:500])
            with self._lock:
                del self._pending[:len(batch)]


def _response(uid: str, allowed: bool, *, message: str | None = None, warnings: list[str] | None = None,
              patch: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": message or "denied"}
    if warnings:
        response["warnings"] = warnings
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


class _Handler(BaseHTTPRequestHandler):
    server: "AdmissionServer"
    protocol_version = "HTTP/1.1"
    # The API server reuses its connections; with Nagle's algorithm on, an answer's body (its second write, after
    # the headers) waits for the client's delayed ACK of the headers: 40 ms on every review of a reused
    # connection (bench/admission.py measured it on the floor server).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        if self.path == "/healthz":
            self._send(200, {"status": "ok"})
        elif self.path == "/readyz":
            ready = self.server.ready.is_set()
            self._send(200 if ready else 503, {"status": "ready" if ready else "starting"})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        if self.path.split("?")[0] not in ("/validate", "/mutate"):
            self._send(404, {"error": "not found"})
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._send(411, {"error": "a Content-Length is required"})
            return
        if not 0 < length <= MAX_REVIEW_BYTES:
            self.close_connection = True
            self._send(413, {"error": f"an AdmissionReview is 1 to {MAX_REVIEW_BYTES} bytes"})
            return
        try:
            review = json.loads(self.rfile.read(length))
            answer = self.server.webhook.answer(review, mutate=self.path.startswith("/mutate"))
        except (ValueError, InvalidInputError) as exc:
            self._send(400, {"error": str(exc)[:300]})
            return
        except Exception:  # noqa: BLE001 (fail closed, and say nothing of why)
            log.exception("admission review failed")
            uid = review.get("request", {}).get("uid") if isinstance(review, dict) else None
            if not isinstance(uid, str):
                self._send(500, {"error": "internal error"})
                return
            answer = _response(uid, False, message="the admission webhook failed; denied")
        self._send(200, answer)

    def _send(self, status: int, doc: Any) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class AdmissionServer(ThreadingHTTPServer):
    """The webhook's HTTPS server (``ready`` is set once the trust root is loaded)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], webhook: Webhook, *, tls_cert: Path, tls_key: Path) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.load_cert_chain(str(tls_cert), str(tls_key))  # before listening: a bad pair fails the start
        super().__init__(address, _Handler)
        self.webhook = webhook
        self.ready = threading.Event()

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The handshake runs in the request's thread, bounded: a slow client never holds the accepting loop.
        request.settimeout(CONNECTION_TIMEOUT)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.info("TLS handshake with %s failed: %s", client_address, exc)
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            tls.close()


def serve(webhook: Webhook, server: AdmissionServer, follower: Any, *, stop: threading.Event,
          say: Callable[[str], None]) -> None:
    """Load the trust root, follow revocations in a thread, and answer reviews until ``stop`` is set.

    Raises:
        RootError, InvalidInputError: the pinned trust root cannot be loaded (the process must not start).
    """
    trust = webhook.opener.trust()
    webhook.cache.load(trust.root)  # before the first review: what the kept file holds is proven again, or dropped
    server.ready.set()
    follower_thread = threading.Thread(target=follower.run, args=(stop,), name="revocations", daemon=True)
    follower_thread.start()
    reporter_thread = threading.Thread(target=webhook.reporter.run, args=(stop,), name="answered", daemon=True)
    reporter_thread.start()
    server_thread = threading.Thread(target=server.serve_forever, name="admission", daemon=True)
    server_thread.start()
    host, port = server.server_address[:2]
    say(f"admission webhook listening on https://{host}:{port} (POST /validate, /mutate)")
    stop.wait()
    # The follower may be in a long poll: it is a daemon thread, and ends with the process.
    server.shutdown()
    server.server_close()
    reporter_thread.join(REGISTRY_TIMEOUT * 2)  # what was answered is reported before the process ends


def parse_listen(text: str) -> tuple[str, int]:
    """``host:port`` (``0.0.0.0:8443``, ``[::]:8443``).

    Raises:
        InvalidInputError: anything else.
    """
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535 or not host:
        raise InvalidInputError(f"--listen {text!r} is not host:port")
    return host.strip("[]"), int(port)
