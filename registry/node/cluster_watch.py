"""``modelreg cluster watch``: the image volumes pods mounted, as their kubelets report them, told to the registry.

It lists, then watches, the pods of every namespace carrying a label (``modelreg.dev/admission=enabled`` by
default) through the Kubernetes API (the ``kubernetes`` client, in-cluster config or a kubeconfig), and reports
each image volume whose reference names this registry (its ``/v2`` hosts), with the digest the kubelet reports
for it (``registry/domain/image_volumes.py``: containerd's config digest, CRI-O's manifest digest) and the pod
that mounted it, to ``POST /v1/receipts`` as program ``cluster-watch``: a full snapshot after each list and every
``snapshot_seconds`` (so a drop it missed, a pod deleted while it was down or an event lost, is still told, and
its places never look stale), and between them what changes (``held``, or dropped when a pod goes) as watch
events arrive.

A snapshot says "these are all the places of this reporter", and a reporter is (identity, program, node,
scope); one report names at most :data:`MAX_PLACES_PER_REPORT` places. A bigger snapshot goes in
:data:`SNAPSHOT_PAGES` pages, each the snapshot of a scope of its own (``<selector>#<k>``; page 0 is the plain
``<selector>`` that a snapshot in one report uses): a place is on the page its key hashes to, so it stays on
its page from one snapshot to the next. A page drops only the places its own scope held. The registry moves a
place reported under another scope of the same identity to that scope, so nothing is dropped by one page and
held by another: the pages are sent from the last to page 0 (the changes between snapshots are reported under
page 0, and a cluster that grew past one report moves its places from page 0 to the others), and a snapshot
in one report is followed, the first time after a start or a paged one, by an empty snapshot of every other
page's scope, which drops what those scopes held and no page holds now.

The watch follows the API server's list/watch protocol: it resumes from the last ``resourceVersion`` seen (an
event's object, or a ``BOOKMARK``), re-lists on ``410 Gone`` (an ``ERROR`` event, or the answer to the watch
request itself) and on a change of the labelled namespaces (read again each time a watch window closes), and
reads a paged list (``limit`` and ``continue``) again from the start when its continue token expires.

Bounded: a watch event line over :data:`MAX_EVENT_BYTES` is skipped whole; reports carry at most
:data:`MAX_PLACES_PER_REPORT` places and :data:`MAX_REPORT_BYTES` bytes; a malformed event or pod is skipped
(and told once a minute), never raised. When the registry is down or rate-limits, what changed is kept (one
entry per place: never more than the cluster holds) and sent again with exponential backoff; when the API server
is, the watcher waits the same way and lists again. A model outside the tenants the watcher's identity may
report for is told once and left out (the registry refuses a whole report that names one).

Usage (a sketch, not run as a doctest)::

    watcher = ClusterWatch(PodSource(api_client), api.report_receipts, hosts=frozenset({"modelreg.example"}),
                           cluster="prod-eu")
    watcher.run()   # until watcher.stop()
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from registry.domain.errors import InvalidInputError, RegistryError
from registry.domain.image_volumes import mounted_image_volumes, pod_identity, repository_of
from registry.domain.receipts import parse_report

log = logging.getLogger("modelreg.cluster_watch")

PROGRAM = "cluster-watch"
DEFAULT_SELECTOR = "modelreg.dev/admission=enabled"
LIST_PAGE = 500
"""Pods asked for per list request (``limit``)."""
MAX_EVENT_BYTES = 8 << 20
"""The longest watch event line read (a pod is at most 1.5 MiB in etcd)."""
MAX_LIST_BYTES = 256 << 20
"""The largest list page read."""
MAX_PLACES_PER_REPORT = 500
MAX_REPORT_BYTES = 200 * 1024
"""Under the registry's 256 KiB per report."""
SNAPSHOT_PAGES = 32
"""The pages of a snapshot too big for one report (each page a report: about 16,000 places in all; a page over
the report's bounds is reported as changes, and told)."""
MAX_BACKOFF = 60.0
GONE = 410


class WatchExpiredError(RegistryError):
    """The API server no longer holds the resourceVersion asked from (410 Gone): list again."""

    code = "watch-expired"


class KubeApiError(RegistryError):
    """The API server answered a list or watch with an error, or could not be reached."""

    code = "kube-api"


# --- the API server -------------------------------------------------------------------------------


class PodSource:
    """Pods and namespaces read raw from the API server through the ``kubernetes`` client (its configuration,
    authentication and TLS), JSON parsed here so that no field of a pod is dropped or refused by a model class."""

    def __init__(self, api_client: Any, *, request_timeout: float = 30.0) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.request_timeout = request_timeout

    def labelled_namespaces(self, selector: str) -> frozenset[str]:
        """The names of the namespaces ``selector`` (a label selector) picks."""
        doc = self._json(lambda: self.core.list_namespace(label_selector=selector, _preload_content=False,
                                                          _request_timeout=self.request_timeout))
        names = set()
        for item in _items(doc):
            meta = item.get("metadata") if isinstance(item, dict) else None
            name = meta.get("name") if isinstance(meta, dict) else None
            if isinstance(name, str):
                names.add(name)
        return frozenset(names)

    def list_pods(self) -> tuple[list[Any], str]:
        """Every pod (a page of :data:`LIST_PAGE` at a time) and the list's resourceVersion; a continue token
        that expired lists again from the start."""
        while True:
            pods: list[Any] = []
            token: str | None = None
            try:
                while True:
                    kwargs: dict[str, Any] = {"limit": LIST_PAGE}
                    if token:
                        kwargs["_continue"] = token
                    doc = self._json(lambda: self.core.list_pod_for_all_namespaces(
                        _preload_content=False, _request_timeout=self.request_timeout, **kwargs))
                    pods.extend(_items(doc))
                    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
                    token = meta.get("continue") or None
                    if not token:
                        version = meta.get("resourceVersion")
                        if not isinstance(version, str) or not version:
                            raise KubeApiError("the pod list carries no resourceVersion")
                        return pods, version
            except WatchExpiredError:
                log.info("the pod list's continue token expired: listing again")

    def watch_pods(self, resource_version: str, seconds: int) -> Iterator[dict[str, Any]]:
        """The watch events after ``resource_version`` for at most ``seconds`` (the server closes the stream),
        bookmarks asked for; each event a dict, malformed lines skipped.

        Raises:
            WatchExpiredError: 410 Gone (the answer, or an ERROR event saying so).
            KubeApiError: another error.
        """
        try:
            response = self.core.list_pod_for_all_namespaces(
                watch=True, resource_version=resource_version, allow_watch_bookmarks=True, timeout_seconds=seconds,
                _preload_content=False, _request_timeout=(self.request_timeout, seconds + self.request_timeout))
        except Exception as exc:  # noqa: BLE001  (the client raises ApiException, urllib3's and socket errors)
            raise _api_error(exc) from None
        try:
            for line in _lines(response.stream(64 * 1024)):
                try:
                    event = json.loads(line)
                except ValueError:
                    _tell("a watch event that is not JSON was skipped")
                    continue
                if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
                    _tell("a watch event that is no object was skipped")
                    continue
                if event.get("type") == "ERROR":
                    status = event["object"]
                    if status.get("code") == GONE:
                        raise WatchExpiredError(f"watch from {resource_version} expired: {status.get('message')}")
                    raise KubeApiError(f"the watch failed: {str(status.get('code'))[:8]} "
                                       f"{str(status.get('reason'))[:80]}: {str(status.get('message'))[:200]}")
                yield event
        except (WatchExpiredError, KubeApiError):
            raise
        except Exception as exc:  # noqa: BLE001  (a broken stream: urllib3's protocol and timeout errors)
            raise _api_error(exc) from None
        finally:
            response.close()
            response.release_conn()

    def _json(self, call: Callable[[], Any]) -> dict[str, Any]:
        try:
            response = call()
            data = response.read(MAX_LIST_BYTES + 1)
            response.release_conn()
        except Exception as exc:  # noqa: BLE001  (ApiException, urllib3's errors)
            raise _api_error(exc) from None
        if len(data) > MAX_LIST_BYTES:
            raise KubeApiError(f"a list answer is over {MAX_LIST_BYTES} bytes")
        try:
            doc = json.loads(data)
        except ValueError:
            raise KubeApiError("a list answer is not JSON") from None
        if not isinstance(doc, dict):
            raise KubeApiError("a list answer is not an object")
        return doc


def _items(doc: dict[str, Any]) -> list[Any]:
    items = doc.get("items")
    return items if isinstance(items, list) else []


def _api_error(exc: Exception) -> RegistryError:
    status = getattr(exc, "status", None)
    if status == GONE:
        return WatchExpiredError(f"the API server answered 410 Gone: {getattr(exc, 'reason', '')}")
    return KubeApiError(f"the Kubernetes API failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")


def _lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Newline-separated lines of a byte stream, any line over :data:`MAX_EVENT_BYTES` skipped whole."""
    buffer = bytearray()
    skipping = False
    for chunk in chunks:
        while chunk:
            end = chunk.find(b"\n")
            part, chunk = (chunk, b"") if end < 0 else (chunk[:end], chunk[end + 1:])
            if not skipping:
                buffer += part
                if len(buffer) > MAX_EVENT_BYTES:
                    _tell(f"a watch event over {MAX_EVENT_BYTES} bytes was skipped")
                    buffer.clear()
                    skipping = True
            if end >= 0:
                if not skipping and buffer.strip():
                    yield bytes(buffer)
                buffer.clear()
                skipping = False
    if buffer.strip() and not skipping:
        yield bytes(buffer)


_told: dict[str, float] = {}


def _tell(message: str) -> None:
    """Log ``message`` at most once a minute (a hostile stream must not flood the log)."""
    now = time.monotonic()
    if now - _told.get(message, -120.0) >= 60.0:
        _told[message] = now
        log.warning(message)


# --- what the cluster holds -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodPlace:
    """One image volume of one pod, as the registry's receipts name it."""

    model: str
    digest: str
    namespace: str
    pod: str
    uid: str
    volume: str
    node: str

    def body(self, held: bool) -> dict[str, Any]:
        return {"model": self.model, "image_digest": self.digest, "where": "pod", "namespace": self.namespace,
                "pod": self.pod, "uid": self.uid, "volume": self.volume, "pod_node": self.node, "held": held}

    def page(self, pages: int) -> int:
        """The snapshot page this place is on, of ``pages``: the same one every time."""
        key = f"{self.namespace}/{self.pod}/{self.uid}/{self.volume}".encode()
        return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") % pages


class Inventory:
    """The places the watched pods hold now, and what the registry has not been told of them yet.

    ``changed`` maps a place to whether it is held (True) or was dropped (False); a place changed twice before
    a report keeps its last state, so what waits is never more than one entry per place ever held. A snapshot
    owed (after a list) replaces the deltas: it says everything."""

    def __init__(self, hosts: frozenset[str] | None, cluster: str) -> None:
        self.hosts = hosts
        self.cluster = cluster
        self.places: dict[str, tuple[PodPlace, ...]] = {}
        self.changed: dict[PodPlace, bool] = {}
        self.snapshot_owed = False
        self.listed = False
        """Whether a list filled it (before one, a snapshot of it would drop everything)."""
        self.refused: set[str] = set()
        self.lock = threading.Condition()

    def places_of(self, pod: Any) -> tuple[PodPlace, ...]:
        held = mounted_image_volumes(pod)
        if held is None or held.node is None:
            return ()
        out = []
        for v in held.volumes:
            model = repository_of(v.reference, self.hosts)
            if model is None or model in self.refused:
                continue
            place = PodPlace(model, v.digest, held.namespace, held.name, held.uid, v.volume, held.node)
            if _acceptable(place, self.cluster):
                out.append(place)
            else:
                _tell(f"an image volume the registry would refuse was left out: {held.namespace}/{held.name}")
        return tuple(out)

    def replace(self, pods: list[Any], namespaces: frozenset[str]) -> None:
        """A fresh list: every pod of the watched namespaces; a snapshot is owed."""
        places: dict[str, tuple[PodPlace, ...]] = {}
        for pod in pods:
            identity = pod_identity(pod)
            if identity is None or identity[0] not in namespaces:
                continue
            found = self.places_of(pod)
            if found:
                places[identity[2]] = found
        with self.lock:
            for uid, old in self.places.items():
                for place in set(old) - set(places.get(uid, ())):
                    self.changed[place] = False
            for found in places.values():
                for place in found:
                    self.changed[place] = True
            self.places = places
            self.snapshot_owed = self.listed = True
            self.lock.notify_all()

    def update(self, uid: str, pod: Any | None) -> None:
        """A watch event for pod ``uid``: its places now (``pod`` None: it is gone)."""
        now = self.places_of(pod) if pod is not None else ()
        with self.lock:
            before = self.places.get(uid, ())
            if set(before) == set(now):
                return
            for place in set(before) - set(now):
                self.changed[place] = False
            for place in set(now) - set(before):
                self.changed[place] = True
            if now:
                self.places[uid] = now
            else:
                self.places.pop(uid, None)
            self.lock.notify_all()

    def held(self) -> list[PodPlace]:
        return [p for found in self.places.values() for p in found if p.model not in self.refused]

    def refuse(self, model: str) -> None:
        """The registry refuses reports about ``model`` from this identity: leave it out from now on."""
        with self.lock:
            self.refused.add(model)
            for place in [p for p in self.changed if p.model == model]:
                del self.changed[place]


def _acceptable(place: PodPlace, cluster: str) -> bool:
    try:
        parse_report({"program": PROGRAM, "node": cluster, "places": [place.body(True)]})
    except InvalidInputError:
        return False
    return True


# --- the watcher and its reporter -------------------------------------------------------------------


class ClusterWatch:
    """Lists and watches pods (:class:`PodSource`), keeps the :class:`Inventory`, and reports it (``report``: one
    ``POST /v1/receipts`` body in, its answer out) from a thread of its own."""

    def __init__(self, source: Any, report: Callable[[dict[str, Any]], dict[str, Any]], *,
                 hosts: frozenset[str] | None, cluster: str, selector: str = DEFAULT_SELECTOR,
                 watch_seconds: int = 300, snapshot_seconds: float = 300.0, min_interval: float = 0.2) -> None:
        self.source = source
        self.report = report
        self.selector = selector
        self.cluster = cluster
        self.watch_seconds = watch_seconds
        self.snapshot_seconds = snapshot_seconds
        self.min_interval = min_interval
        self.inventory = Inventory(hosts, cluster)
        self._pages_used: int | None = None
        """The pages of the last snapshot sent (None: none yet by this process)."""
        self._snapshot_at = time.monotonic()
        self._stop = threading.Event()
        self.namespaces: frozenset[str] = frozenset()

    def stop(self) -> None:
        self._stop.set()
        with self.inventory.lock:
            self.inventory.lock.notify_all()

    def run(self) -> None:
        """Watch and report until :meth:`stop`."""
        reporter = threading.Thread(target=self._report_loop, name="cluster-watch-reporter", daemon=True)
        reporter.start()
        try:
            self._watch_loop()
        finally:
            self.stop()
            reporter.join(timeout=10)

    # The watch side.

    def _watch_loop(self) -> None:
        backoff = Backoff()
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    self.namespaces = self.source.labelled_namespaces(self.selector)
                    pods, version = self.source.list_pods()
                    self.inventory.replace(pods, self.namespaces)
                    log.info("listed %d pods in %d labelled namespaces at resourceVersion %s", len(pods),
                             len(self.namespaces), version)
                version = self._watch(version)
                if self.source.labelled_namespaces(self.selector) != self.namespaces:
                    log.info("the labelled namespaces changed: listing again")
                    version = None
                backoff.reset()
            except WatchExpiredError as exc:
                log.info("%s: listing again", exc)
                version = None
            except KubeApiError as exc:
                delay = backoff.next()
                log.warning("%s (again in %.0f s)", exc, delay)
                self._stop.wait(delay)

    def _watch(self, version: str) -> str:
        """Follow one watch window from ``version``; the resourceVersion to resume from."""
        for event in self.source.watch_pods(version, self.watch_seconds):
            if self._stop.is_set():
                break
            kind, obj = event.get("type"), event["object"]
            meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
            seen = meta.get("resourceVersion")
            if isinstance(seen, str) and seen:
                version = seen
            if kind == "BOOKMARK":
                continue
            identity = pod_identity(obj)
            if kind not in ("ADDED", "MODIFIED", "DELETED") or identity is None:
                _tell(f"a watch event of type {str(kind)[:20]!r} without a pod was skipped")
                continue
            namespace, _, uid = identity
            gone = kind == "DELETED" or namespace not in self.namespaces
            self.inventory.update(uid, None if gone else obj)
        return version

    # The reporting side.

    def _report_loop(self) -> None:
        backoff = Backoff()
        inventory = self.inventory
        while True:
            with inventory.lock:
                while not self._stop.is_set() and not (inventory.changed or inventory.snapshot_owed):
                    due = self._snapshot_at + self.snapshot_seconds - time.monotonic()
                    if due <= 0 and inventory.listed:
                        inventory.snapshot_owed = True
                        break
                    inventory.lock.wait(timeout=min(1.0, max(0.01, due)) if inventory.listed else 1.0)
                if self._stop.is_set():
                    return
            # Let a burst of events gather into one report.
            self._stop.wait(self.min_interval)
            try:
                self._send_owed()
                backoff.reset()
            except RegistryError as exc:
                delay = backoff.next()
                log.warning("reporting to the registry failed: %s (again in %.0f s)", exc, delay)
                self._stop.wait(delay)

    def _send_owed(self) -> None:
        inventory = self.inventory
        with inventory.lock:
            held = inventory.held()
            # The drops known ride along with a snapshot: they drop the admission webhook's record of the pod too.
            held_now = set(held)
            drops = {p: False for p, h in inventory.changed.items() if not h and p not in held_now}
            snapshot = inventory.snapshot_owed
            sent = {**drops, **{p: True for p in held}} if snapshot else dict(inventory.changed)
            inventory.snapshot_owed = False
            inventory.changed.clear()
        try:
            if snapshot:
                self._send_snapshot(list(sent.items()))
            else:
                for batch in _batches(list(sent.items()), self.cluster):
                    self._post(batch, snapshot=False)
        except BaseException:
            # Not told: owed again (a change made since wins over what was being sent).
            with inventory.lock:
                inventory.snapshot_owed = inventory.snapshot_owed or snapshot
                for place, held in sent.items():
                    inventory.changed.setdefault(place, held)
            raise

    def _scope(self, page: int) -> str:
        return self.selector if page == 0 else f"{self.selector}#{page}"

    def _send_snapshot(self, items: list[tuple[PodPlace, bool]]) -> None:
        """Everything held (and the drops known), as one report or in :data:`SNAPSHOT_PAGES` pages (the module
        docstring says why in this order)."""
        pages = 1 if _fits(items, self.cluster) else SNAPSHOT_PAGES
        by_page: list[list[tuple[PodPlace, bool]]] = [[] for _ in range(pages)]
        for item in items:
            by_page[item[0].page(pages)].append(item)
        for page in reversed(range(pages)):
            if _fits(by_page[page], self.cluster):
                self._post(by_page[page], snapshot=True, scope=self._scope(page))
                continue
            _tell(f"over {MAX_PLACES_PER_REPORT} places on one of {pages} snapshot pages: that page is reported as "
                  f"changes, not as a snapshot")
            for batch in _batches(by_page[page], self.cluster):
                self._post(batch, snapshot=False, scope=self._scope(page))
        if pages == 1 and self._pages_used != 1:
            for page in range(1, SNAPSHOT_PAGES):
                self._post([], snapshot=True, scope=self._scope(page))
        self._pages_used = pages
        self._snapshot_at = time.monotonic()

    def _post(self, places: list[tuple[PodPlace, bool]], *, snapshot: bool, scope: str | None = None) -> None:
        body = {"program": PROGRAM, "node": self.cluster, "scope": scope or self.selector, "snapshot": snapshot,
                "places": [p.body(held) for p, held in places]}
        try:
            answer = self.report(body)
        except RegistryError as exc:
            status = getattr(exc, "status", None)
            if status == 403:
                self._find_refused(places)
                places = [(p, h) for p, h in places if p.model not in self.inventory.refused]
                body["places"] = [p.body(held) for p, held in places]
                answer = self.report(body)
            elif status in (400, 413, 422):
                # A report the registry will never take: told, not sent again (the places were checked first,
                # so this is a registry newer or older than this watcher).
                log.error("the registry refused a report for good: %s", exc)
                return
            else:
                raise
        for rejected in (answer or {}).get("rejected", [])[:20]:
            index = rejected.get("index") if isinstance(rejected, dict) else None
            if isinstance(index, int) and 0 <= index < len(places):
                _tell(f"the registry knows no version of {places[index][0].model} with digest "
                      f"{places[index][0].digest}")

    def _find_refused(self, places: list[tuple[PodPlace, bool]]) -> None:
        """Ask about each model alone: those refused are left out from now on."""
        for model in sorted({p.model for p, _ in places}):
            place, held = next((p, h) for p, h in places if p.model == model)
            try:
                self.report({"program": PROGRAM, "node": self.cluster, "scope": self.selector, "snapshot": False,
                             "places": [place.body(held)]})
            except RegistryError as exc:
                if getattr(exc, "status", None) != 403:
                    raise
                log.error("this identity may not report %s: its image volumes are left out (%s)", model, exc)
                self.inventory.refuse(model)


def _fits(items: list[tuple[PodPlace, bool]], cluster: str) -> bool:
    """Whether ``items`` go in one report."""
    return len(items) <= MAX_PLACES_PER_REPORT and len(list(_batches(items, cluster))) <= 1


def _batches(items: list[tuple[PodPlace, bool]], cluster: str) -> Iterator[list[tuple[PodPlace, bool]]]:
    """``items`` in reports of at most :data:`MAX_PLACES_PER_REPORT` places and :data:`MAX_REPORT_BYTES` bytes."""
    batch: list[tuple[PodPlace, bool]] = []
    size = 200 + len(cluster)
    for item in items:
        grows = len(json.dumps(item[0].body(item[1]))) + 2
        if batch and (len(batch) == MAX_PLACES_PER_REPORT or size + grows > MAX_REPORT_BYTES):
            yield batch
            batch, size = [], 200 + len(cluster)
        batch.append(item)
        size += grows
    if batch:
        yield batch


class Backoff:
    """1, 2, 4 ... :data:`MAX_BACKOFF` seconds between tries, from 1 again after a success."""

    def __init__(self, first: float = 1.0) -> None:
        self.first = first
        self.delay = first

    def next(self) -> float:
        delay, self.delay = self.delay, min(self.delay * 2, MAX_BACKOFF)
        return delay

    def reset(self) -> None:
        self.delay = self.first
