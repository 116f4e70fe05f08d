"""A realistic history for the provenance questions, made through the HTTP API as its people would make it.

Two tenants. In ``acme``: ``sam`` submits ``acme/llm`` from a Hub repository (``org/llm``) four times (a tag,
then ``main`` as it moves), ``sec`` (security) and ``mia`` (ml) approve versions 1 to 3, and only ``sec``
version 4; ``acme/nc`` has a non-commercial license, so ``lex`` approves it in the legal capacity. ``mia``
points ``prod`` at 1, then at 2 with version 3 as a canary for tenant ``beta``, then rolls it back (to 1);
``sec`` revokes version 3; ``staging`` points at 2 with 1 as a canary for ``beta``. Nodes fetch manifests between the
moves: ``node-1`` through ``prod``, ``node-2`` through ``prod`` for ``beta`` (so it last got the canary, version 3,
revoked since), ``node-3`` version 2 by its number. In ``globex``: ``gsub`` submits ``globex/llm`` from the same tag as
``acme/llm@1`` (the same blobs, in another tenant), ``gsec`` and ``gml`` approve it, ``gml`` promotes it and ``gnode``
fetches it; and ``globex/solo``, whose weights no ``acme`` version holds. ``aud-acme`` and ``aud-globex`` audit one
tenant each.

:func:`build` takes any ``httpx.Client`` on the API (a ``TestClient`` in-process, or one on a ``modelreg
serve`` process) and ``settle``, which runs background jobs where nobody else does (``drain``); what it
did and when is kept on the returned :class:`ProvenanceWorld` for the tests to hold answers to.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx

from tests.support.hf_upstream import HfUpstream
from tests.support.tiny_model import tiny_model_files

SETTLED = {"awaiting_approval", "approved", "failed", "rejected", "revoked"}
PEOPLE = {  # name -> (tenant, role, capacity)
    "sam": ("acme", "submitter", ""), "sec": ("acme", "approver", "security"), "mia": ("acme", "approver", "ml"),
    "lex": ("acme", "approver", "legal"), "aud-acme": ("acme", "auditor", ""),
    "node-1": ("acme", "node", ""), "node-2": ("acme", "node", ""), "node-3": ("acme", "node", ""),
    "gsub": ("globex", "submitter", ""), "gsec": ("globex", "approver", "security"),
    "gml": ("globex", "approver", "ml"), "aud-globex": ("globex", "auditor", ""), "gnode": ("globex", "node", ""),
}


def hub_repos(hub: HfUpstream) -> dict[str, str]:
    """The upstream repositories the world submits from; return the commits by name."""
    shas = {}
    hub.add_repo("org/llm", card_data={"license": "mit"})
    shas["v1.0"] = hub.commit("org/llm", tiny_model_files(41))
    hub.tag("org/llm", "v1.0", shas["v1.0"])
    shas["main-2"] = hub.commit("org/llm", tiny_model_files(42))
    hub.add_repo("org/nc", card_data={"license": "cc-by-nc-4.0"})
    shas["nc"] = hub.commit("org/nc", tiny_model_files(44))
    hub.add_repo("org/gx", card_data={"license": "apache-2.0"})
    shas["gx"] = hub.commit("org/gx", tiny_model_files(45))
    return shas


@dataclass
class ProvenanceWorld:
    client: httpx.Client
    hub: HfUpstream
    tokens: dict[str, str] = field(default_factory=dict)
    shas: dict[str, str] = field(default_factory=dict)
    times: dict[str, str] = field(default_factory=dict)
    """ISO times taken between the steps: ``prod-1`` (prod -> 1), ``prod-2`` (prod -> 2, canary 3),
    ``rollback`` (prod -> 1 again), ``revoked`` (3 revoked)."""
    shared_digest: str = ""
    """A blob of ``acme/llm@1`` and ``globex/llm@1``."""
    globex_only_digest: str = ""
    """A blob of ``globex/solo@1`` alone."""

    def auth(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def call(self, who: str, method: str, path: str, **kwargs: Any) -> Any:
        r = self.client.request(method, path, headers=self.auth(who), **kwargs)
        assert r.status_code < 300, f"{method} {path} as {who}: {r.status_code} {r.text[:300]}"
        return r.json() if r.content else None

    def ask(self, who: str, path: str, **params: Any) -> httpx.Response:
        """A provenance question as ``who``: the raw answer."""
        return self.client.get(f"/v1/provenance/{path}", headers=self.auth(who), params=params)

    def version(self, model: str, number: int) -> dict[str, Any]:
        return self.call("admin", "GET", f"/v1/models/{model}/versions/{number}")


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


def build(client: httpx.Client, admin_token: str, hub: HfUpstream, shas: dict[str, str],
          settle: Callable[[], None] = lambda: None) -> ProvenanceWorld:
    """Make the history described in the module's docstring; ``hub`` holds :func:`hub_repos`."""
    w = ProvenanceWorld(client, hub, tokens={"admin": admin_token}, shas=dict(shas))
    # beta holds nobody: acme serves canaries for it.
    for tenant in ("acme", "globex", "beta"):
        w.call("admin", "POST", "/v1/tenants", json={"name": tenant})
    for name, (tenant, role, capacity) in PEOPLE.items():
        w.call("admin", "POST", "/v1/principals", json={"name": name})
        w.call("admin", "POST", f"/v1/principals/{name}/roles",
               json={"tenant": tenant, "role": role, "capacity": capacity})
        w.tokens[name] = w.call("admin", "POST", f"/v1/principals/{name}/tokens", json={})["token"]

    def submit(who: str, model: str, repo: str, revision: str) -> int:
        body = {"source": f"hf://{repo}", "revision": revision, "hf_endpoint": hub.url}
        number = w.call(who, "POST", f"/v1/models/{model}/versions", json=body)["version"]
        deadline = time.monotonic() + 300
        while (state := w.version(model, number)["state"]) not in SETTLED:
            assert time.monotonic() < deadline, f"{model}@{number} stuck in {state}"
            settle()
            time.sleep(0.02)
        assert state == "awaiting_approval", (model, number, state)
        return number

    def approve(model: str, number: int, *people: tuple[str, str]) -> None:
        for who, capacity in people:
            w.call(who, "POST", f"/v1/models/{model}/versions/{number}/approvals",
                   json={"decision": "approve", "capacity": capacity, "comment": f"{capacity} ok"})

    def fetch(who: str, model: str, ref: str, **params: str) -> int:
        r = w.client.get(f"/v1/models/{model}/manifest", headers=w.auth(who), params={"ref": ref, **params})
        assert r.status_code == 200, r.text
        return _release_version(r.json())

    assert submit("sam", "acme/llm", "org/llm", "v1.0") == 1
    assert submit("sam", "acme/llm", "org/llm", "main") == 2
    w.shas["main-3"] = hub.commit("org/llm", {**tiny_model_files(43), "NOTICE": b"acme notice\n"})
    assert submit("sam", "acme/llm", "org/llm", "main") == 3
    w.shas["main-4"] = hub.commit("org/llm", tiny_model_files(46))
    assert submit("sam", "acme/llm", "org/llm", "main") == 4
    assert submit("sam", "acme/nc", "org/nc", "main") == 1
    assert submit("gsub", "globex/llm", "org/llm", "v1.0") == 1
    assert submit("gsub", "globex/solo", "org/gx", "main") == 1
    for number in (1, 2, 3):
        approve("acme/llm", number, ("sec", "security"), ("mia", "ml"))
    approve("acme/llm", 4, ("sec", "security"))
    approve("acme/nc", 1, ("sec", "security"), ("mia", "ml"), ("lex", "legal"))
    approve("globex/llm", 1, ("gsec", "security"), ("gml", "ml"))

    w.times["before"] = _now()
    w.call("mia", "PUT", "/v1/models/acme/llm/aliases/prod", json={"version": 1, "comment": "first release"})
    w.times["prod-1"] = _now()
    assert fetch("node-1", "acme/llm", "prod") == 1
    assert fetch("node-2", "acme/llm", "prod", for_tenant="beta") == 1
    w.call("mia", "PUT", "/v1/models/acme/llm/aliases/prod",
           json={"version": 2, "canary": {"version": 3, "tenants": ["beta"]}, "comment": "v2, v3 to beta"})
    w.times["prod-2"] = _now()
    assert fetch("node-1", "acme/llm", "prod") == 2
    assert fetch("node-2", "acme/llm", "prod", for_tenant="beta") == 3
    assert fetch("node-2", "acme/llm", "prod", for_tenant="beta") == 3
    assert fetch("node-3", "acme/llm", "2") == 2
    w.call("mia", "POST", "/v1/models/acme/llm/aliases/prod/rollback", json={"comment": "v2 regressed"})
    w.times["rollback"] = _now()
    assert fetch("node-1", "acme/llm", "prod") == 1
    w.call("sec", "POST", "/v1/models/acme/llm/versions/3/revoke", json={"reason": "unsafe tokenizer"})
    w.times["revoked"] = _now()
    w.call("mia", "PUT", "/v1/models/acme/llm/aliases/staging",
           json={"version": 2, "canary": {"version": 1, "tenants": ["beta"]}})
    w.call("gml", "PUT", "/v1/models/globex/llm/aliases/prod", json={"version": 1})
    assert fetch("gnode", "globex/llm", "prod") == 1

    acme = {f["sha256"] for f in w.version("acme/llm", 1)["files"]}
    globex = {f["path"]: f["sha256"] for f in w.version("globex/llm", 1)["files"]}
    w.shared_digest = next(d for p, d in sorted(globex.items()) if p.endswith(".safetensors"))
    assert w.shared_digest in acme
    solo = {f["path"]: f["sha256"] for f in w.version("globex/solo", 1)["files"]}
    every_acme = set()
    for model, numbers in (("acme/llm", (1, 2, 3, 4)), ("acme/nc", (1,))):
        for n in numbers:
            every_acme |= {f["sha256"] for f in w.version(model, n)["files"]}
    w.globex_only_digest = next(d for p, d in sorted(solo.items())
                                if d not in every_acme and p.endswith(".safetensors"))
    return w


def _release_version(body: dict[str, Any]) -> int:
    """The version a release manifest names (read, not verified: the manifest tests verify)."""
    return json.loads(base64.b64decode(body["envelope"]["payload"]))["version"]
