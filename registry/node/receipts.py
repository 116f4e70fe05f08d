"""Receipts from a node program: tell the registry which releases it holds, best effort.

A :class:`ReceiptSender` keeps what its program holds now (a folder, a bucket prefix) and what it dropped
since its last report, and sends them to ``POST /v1/receipts`` as one snapshot of its scope. A report that
fails (the registry down, a refused token) is said once (a registry without the endpoint: not at all) and never
fails the program's real work: what it
had to say stays and goes with the next report. The node's name is ``MODELREG_NODE_NAME`` (the Kubernetes
downward API's ``spec.nodeName``), else the host's name.

Example:
    >>> receipts = ReceiptSender(None, "fetch", scope="/srv/llm", node="gpu-1")
    >>> receipts.hold("acme", "llm", 7, where="path", path="/srv/llm")
    >>> receipts.body()["places"]
    [{'model': 'acme/llm', 'version': 7, 'where': 'path', 'path': '/srv/llm', 'held': True}]
"""

from __future__ import annotations

import os
import re
import socket
import threading
from collections.abc import Callable
from typing import Any

from registry.client.api import RegistryApi
from registry.client.http import RemoteError
from registry.domain.errors import RegistryError

NODE_ENV = "MODELREG_NODE_NAME"
HEARTBEAT_SECONDS = 60.0
"""How often a long-running program reports even when nothing changed (so it is not shown stale)."""
MAX_PENDING_DROPS = 500
NO_RECEIPTS_STATUSES = frozenset({404, 405, 501})
"""Answers of a registry that has no ``POST /v1/receipts`` (older, or a stand-in): nothing is said of them."""
_NOT_NODE = re.compile(r"[^a-z0-9.-]+")


def node_name(environ: dict[str, str] | None = None) -> str:
    """This node's name: ``MODELREG_NODE_NAME``, else the host name, lower-cased to what the registry takes.

    Example:
        >>> node_name({"MODELREG_NODE_NAME": "GPU_Node.7"})
        'gpu-node.7'
    """
    raw = (environ if environ is not None else os.environ).get(NODE_ENV) or socket.gethostname()
    name = _NOT_NODE.sub("-", raw.strip().lower()).strip(".-")[:253].strip(".-")
    return name or "unknown"


class ReceiptSender:
    """What one node program holds, reported as a snapshot of its scope (module docstring)."""

    def __init__(self, api: RegistryApi | None, program: str, *, scope: str = "", node: str | None = None,
                 on_problem: Callable[[str], None] | None = None) -> None:
        self.api, self.program, self.scope = api, program, scope
        self.node = node or node_name()
        self.on_problem = on_problem or (lambda line: None)
        self._held: dict[tuple[str, str, int, str], dict[str, Any]] = {}
        self._dropped: dict[tuple[str, str, int, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._failing: str | None = None

    @staticmethod
    def _key(tenant: str, name: str, version: int, place: dict[str, Any]) -> tuple[str, str, int, str]:
        return tenant, name, version, repr(sorted(place.items()))

    def hold(self, tenant: str, name: str, version: int, **place: Any) -> None:
        """``tenant/name@version`` is held at ``place`` (``where="path", path=...`` or ``where="bucket"``...)."""
        key = self._key(tenant, name, version, place)
        with self._lock:
            self._dropped.pop(key, None)
            self._held[key] = {"model": f"{tenant}/{name}", "version": version, **place}

    def holds(self, tenant: str, name: str, version: int, **place: Any) -> bool:
        with self._lock:
            return self._key(tenant, name, version, place) in self._held

    def drop(self, tenant: str, name: str, version: int, **place: Any) -> None:
        """``tenant/name@version`` is no longer held at ``place``."""
        key = self._key(tenant, name, version, place)
        with self._lock:
            self._held.pop(key, None)
            if len(self._dropped) < MAX_PENDING_DROPS:
                self._dropped[key] = {"model": f"{tenant}/{name}", "version": version, **place}

    def drop_version(self, tenant: str, name: str, version: int) -> None:
        """Every place of ``tenant/name@version`` is dropped (it was revoked, or evicted everywhere)."""
        with self._lock:
            keys = [k for k in self._held if k[:3] == (tenant, name, version)]
        for key in keys:
            place = {k: v for k, v in self._held[key].items() if k not in ("model", "version")}
            self.drop(tenant, name, version, **place)

    def body(self, *, snapshot: bool = True) -> dict[str, Any]:
        with self._lock:
            held = [{**p, "held": True} for p in self._held.values()]
            dropped = [{**p, "held": False} for p in self._dropped.values()]
        return {"program": self.program, "node": self.node, "scope": self.scope, "snapshot": snapshot,
                "places": (held + dropped)[:500]}

    def report(self, *, snapshot: bool = True) -> bool:
        """Send what is held and dropped; True when the registry took it. Never raises."""
        body = self.body(snapshot=snapshot)
        sent_drops = {self._key(p["model"].split("/", 1)[0], p["model"].split("/", 1)[1], p["version"],
                                {k: v for k, v in p.items() if k not in ("model", "version", "held")})
                      for p in body["places"] if not p["held"]}
        try:
            if self.api is None:
                raise RegistryError("no registry to report to")
            answer = self.api.report_receipts(body)
        except RemoteError as exc:
            if exc.status in NO_RECEIPTS_STATUSES:
                # A registry (or stand-in) older than receipts: there is nobody to tell, and nothing wrong here.
                return False
            return self._failed(exc)
        except (RegistryError, OSError) as exc:
            return self._failed(exc)
        self._failing = None
        with self._lock:
            for key in sent_drops:
                self._dropped.pop(key, None)
        for rejected in answer.get("rejected", []) if isinstance(answer, dict) else []:
            self.on_problem(f"receipt refused: {rejected.get('detail')}")
        return True

    def _failed(self, exc: BaseException) -> bool:
        line = f"receipts not reported (sent again with the next report): {' '.join(str(exc).split())}"
        if line != self._failing:
            self.on_problem(line)
        self._failing = line
        return False

    def keep_reporting(self, stop: threading.Event, every: float = HEARTBEAT_SECONDS) -> threading.Thread:
        """Report every ``every`` seconds until ``stop`` is set (a daemon thread)."""
        def run() -> None:
            while not stop.wait(every):
                self.report()

        thread = threading.Thread(target=run, daemon=True, name=f"receipts {self.program}")
        thread.start()
        return thread
