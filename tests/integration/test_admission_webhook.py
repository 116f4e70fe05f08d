"""The admission webhook end to end: a real ``modelreg admission`` process over TLS, asking the real API served by
uvicorn, sent AdmissionReviews shaped as the Kubernetes API server sends them.

The world is the OCI endpoint's (``tests/support/oci_world.py``): ``acme/llm`` 1 approved (``prod``), 2 approved
then revoked (``next``), 3 awaiting approval; ``other/secret`` 1 approved. The policy data maps namespaces:
``team-a`` (acme, enforce, ``s3://`` on serve-s3, ``hf://`` the Hub's), ``team-hf`` (acme, enforce, ``hf://``
through the registry), ``team-warn`` (acme, warn). One object per reference kind: an InferenceService's
``storageUri``, an LLMInferenceService's model URI and LoRA adapter, a LocalModelCache's source, a Pod's image
volume and its init container running ``modelreg fetch``.
"""

from __future__ import annotations

import json
import shutil
from contextlib import ExitStack

import httpx
import pytest

from registry.policy import default_policy_dir
from registry.services import revocations
from tests.support.admission_webhook import admission_review, patched, start_webhook
from tests.support.oci_world import build_world, served_copy
from tests.support.registry import drain, role_token
from tests.support.waiting import wait_until


def build_admission_world(container, tmp_path):
    """The OCI world with its approved versions' OCI manifests built (the jobs approval queued, run once)."""
    built = build_world(container, tmp_path)
    drain(container)
    return built


pytestmark = pytest.mark.seeded(builder=build_admission_world)

NAMESPACES = {
    "team-a": {"tenant": "acme", "mode": "enforce", "s3": "serve-s3"},
    "team-hf": {"tenant": "acme", "mode": "enforce", "hf": "registry"},
    "team-warn": {"tenant": "acme", "mode": "warn"},
}
HUB_URI = "hf://meta-llama/Llama-3.1-8B-Instruct"


def isvc(uri: str, name: str = "llm") -> dict:
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": name},
            "spec": {"predictor": {"model": {"modelFormat": {"name": "huggingface"}, "storageUri": uri}}}}


def llmisvc(uri: str, adapter: str) -> dict:
    return {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "LLMInferenceService", "metadata": {"name": "chat"},
            "spec": {"model": {"uri": uri, "name": "llm",
                               "lora": {"adapters": [{"name": "support", "uri": adapter}]}}}}


def local_model_cache(uri: str) -> dict:
    return {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "LocalModelCache", "metadata": {"name": "llm"},
            "spec": {"sourceModelUri": uri, "modelSize": "1Gi", "nodeGroups": ["gpu"]}}


def pod(volume_image: str, fetch_ref: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "server"}, "spec": {
        "initContainers": [{"name": "fetch", "image": "modelreg:latest",
                            "command": ["modelreg", "fetch"], "args": [fetch_ref, "/mnt/models"]}],
        "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.9.0",
                        "volumeMounts": [{"name": "weights", "mountPath": "/weights"}]}],
        "volumes": [{"name": "weights", "image": {"reference": volume_image, "pullPolicy": "IfNotPresent"}}]}}


@pytest.fixture
def refresh(request):
    """The webhook's ``--refresh-seconds`` (None: the default; a test parametrizes it indirectly)."""
    return getattr(request, "param", None)


@pytest.fixture
def stack(container, seeded, tmp_path, refresh):
    """The served world, its policy data mapping the namespaces, and the webhook (token: role admission)."""
    policies = tmp_path / "policies"
    shutil.copytree(default_policy_dir(), policies)
    data = json.loads((policies / "data.json").read_text())
    data["modelreg"]["config"]["admission"]["namespaces"] = NAMESPACES
    (policies / "data.json").write_text(json.dumps(data))
    container.settings.policy_dir = policies
    container.__dict__.pop("policy", None)
    token = role_token(container, "webhook", "acme", "admission")
    with ExitStack() as stack:
        world = stack.enter_context(served_copy(container, seeded))
        container.settings.public_url = world.url  # its host is the registry's /v2 host
        root = tmp_path / "root.json"
        root.write_text(httpx.get(f"{world.url}/v1/trust-root", timeout=30).text)
        hook = start_webhook(tmp_path / "hook", world.url, token, root, refresh_seconds=refresh)
        stack.callback(hook.stop)
        yield {"world": world, "hook": hook, "stack": stack, "token": token, "root": root, "tmp": tmp_path}


def _v2_digest(world, tag: str) -> str:
    pull = world.pull_token(world.node, "repository:acme/llm:pull")
    r = httpx.get(f"{world.url}/v2/acme/llm/manifests/{tag}", timeout=30, headers={
        "Authorization": f"Bearer {pull}", "Accept": "application/vnd.oci.image.manifest.v1+json"})
    assert r.status_code == 200, r.text
    return r.headers["Docker-Content-Digest"]


def _events(world, token: str) -> list[dict]:
    r = httpx.get(f"{world.url}/v1/events", params={"after": 0, "limit": 1000, "type": ["admission.decided",
                                                                                      "admission.denied"]},
                  headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["events"]


def test_each_reference_kind_of_an_approved_version_is_admitted_and_pinned_by_mutate(stack):
    world, hook = stack["world"], stack["hook"]
    host = world.host
    commit = httpx.get(f"{world.url}/hf/api/models/acme/llm/revision/1", timeout=30,
                       headers={"Authorization": f"Bearer {world.node}"}).json()["sha"]
    image_digest = _v2_digest(world, "1-image")
    cases = [
        ("team-a", isvc("modelreg://acme/llm@prod"),
         lambda o: o["spec"]["predictor"]["model"]["storageUri"], "modelreg://acme/llm@1"),
        ("team-hf", llmisvc("hf://acme/llm:prod", "modelreg://acme/llm@1"),
         lambda o: (o["spec"]["model"]["uri"], o["spec"]["model"]["lora"]["adapters"][0]["uri"]),
         (f"hf://acme/llm:{commit}", "modelreg://acme/llm@1")),
        ("team-a", local_model_cache("s3://acme/llm@prod/"),
         lambda o: o["spec"]["sourceModelUri"], "s3://acme/llm@1/"),
        ("team-a", pod(f"{host}/acme/llm:prod-image", "acme/llm@prod"),
         lambda o: (o["spec"]["volumes"][0]["image"]["reference"], o["spec"]["initContainers"][0]["args"][0]),
         (f"{host}/acme/llm@{image_digest}", "acme/llm@1")),
    ]
    for namespace, obj, read, pinned in cases:
        validated = hook.send(admission_review(obj, namespace))
        assert validated["allowed"] is True, (obj["kind"], validated)
        assert "patch" not in validated and "status" not in validated
        mutated = hook.send(admission_review(obj, namespace), mutate=True)
        assert mutated["allowed"] is True, mutated
        assert read(patched(obj, mutated)) == pinned, obj["kind"]
        # A pinned object is admitted as it is: nothing left to pin.
        again = hook.send(admission_review(patched(obj, mutated), namespace), mutate=True)
        assert again["allowed"] is True and "patch" not in again, again
    decided = [e for e in _events(world, stack["token"]) if e["type"] == "dev.modelreg.admission.decided"]
    assert {e["data"]["object"]["kind"] for e in decided} == {"InferenceService", "LLMInferenceService",
                                                              "LocalModelCache", "Pod"}
    assert all(e["data"]["outcome"] == "allowed" and e["data"]["tenant"] == "acme" for e in decided)
    first = next(e for e in decided if e["data"]["object"]["kind"] == "Pod")
    assert {(r["kind"], r["rule"], r["version"]) for r in first["data"]["references"]} == {
        ("image-volume", "admission.approved", 1), ("init-fetch", "admission.approved", 1)}


DENIED = [
    ("team-a", isvc("modelreg://acme/llm@2"), "modelreg://acme/llm@2", "admission.revoked"),
    ("team-a", isvc("modelreg://acme/llm@next"), "modelreg://acme/llm@next", "admission.revoked"),
    ("team-a", isvc("modelreg://acme/llm@3"), "modelreg://acme/llm@3", "admission.not-approved"),
    ("team-a", isvc("modelreg://other/secret@1"), "modelreg://other/secret@1", "admission.tenant"),
    ("team-a", isvc(HUB_URI), HUB_URI, "admission.elsewhere"),
    ("team-hf", llmisvc("hf://acme/llm:1", "hf://acme/llm:2"), "hf://acme/llm:2", "admission.revoked"),
    ("team-a", local_model_cache("s3://acme/llm@3/"), "s3://acme/llm@3/", "admission.not-approved"),
    ("team-a", pod("docker.io/acme/llm:1", "acme/llm@1"), "docker.io/acme/llm:1", "admission.elsewhere"),
    ("team-a", pod("{host}/acme/llm:1", "acme/llm@2"), "acme/llm@2", "admission.revoked"),
    ("team-a", pod("{host}/other/secret:1", "acme/llm@1"), "{host}/other/secret:1", "admission.tenant"),
    ("team-x", isvc("modelreg://acme/llm@1"), "modelreg://acme/llm@1", "admission.no-tenant"),
]
"""Revoked (by number, by an alias on it, through /hf, as an init container's fetch), unapproved, another
tenant's, the Hub's, another registry's, and a namespace of no tenant: each denied naming its rule."""


def test_denied_references_are_named_with_their_rule(stack):
    world, hook = stack["world"], stack["hook"]
    for namespace, obj, uri, rule in DENIED:
        obj = json.loads(json.dumps(obj).replace("{host}", world.host))
        uri = uri.replace("{host}", world.host)
        for mutate in (False, True):
            answer = hook.send(admission_review(obj, namespace), mutate=mutate)
            assert answer["allowed"] is False, (uri, answer)
            assert "patch" not in answer
            message = answer["status"]["message"]
            assert uri in message and f"(rule {rule})" in message, message
        denied = [e for e in _events(world, stack["token"]) if e["type"] == "dev.modelreg.admission.denied"]
        if namespace == "team-x":  # a namespace of no tenant: in the audit log only, on no tenant's stream
            assert all(e["data"]["namespace"] != "team-x" for e in denied)
            continue
        assert denied and any(r["uri"] == uri and r["rule"] == rule and r["outcome"] == "denied"
                              for r in denied[-1]["data"]["references"]), denied


def test_warn_mode_admits_with_a_warning_naming_the_reference_and_rule(stack):
    hook = stack["hook"]
    answer = hook.send(admission_review(isvc(HUB_URI), "team-warn"))
    assert answer["allowed"] is True
    assert any(HUB_URI in w and "admission.elsewhere" in w for w in answer["warnings"]), answer
    revoked = hook.send(admission_review(isvc("modelreg://acme/llm@2"), "team-warn"))
    assert revoked["allowed"] is True and any("admission.revoked" in w for w in revoked["warnings"]), revoked


def test_registry_down_admits_a_known_approved_digest_from_the_verified_cache_and_denies_the_unknown(stack):
    world, hook = stack["world"], stack["hook"]
    known = pod(f"{world.host}/acme/llm@{_v2_digest(world, '1-image')}", "acme/llm@1")
    assert hook.send(admission_review(known, "team-a"))["allowed"] is True
    stack["stack"].close()  # the registry stops (and the webhook with it: restarted below on its state)
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{world.url}/healthz", timeout=2)
    hook = start_webhook(stack["tmp"] / "hook", world.url, stack["token"], stack["root"])
    try:
        answer = hook.send(admission_review(known, "team-a"))
        assert answer["allowed"] is True, answer
        assert len(answer["warnings"]) == 2 and all("registry unreachable" in w and "verified cache" in w
                                                    for w in answer["warnings"]), answer
        # Seen allowed in team-a only: another namespace proves nothing; nor does an alias never seen.
        for namespace, obj in (("team-warn", known), ("team-a", isvc("modelreg://acme/llm@prod"))):
            denied = hook.send(admission_review(obj, namespace))
            assert denied["allowed"] is False and "admission.unproven" in denied["status"]["message"], denied
    finally:
        hook.stop()


def test_a_revocation_read_from_the_stream_drops_the_cached_version(stack, container):
    world, hook = stack["world"], stack["hook"]
    obj = isvc("modelreg://acme/llm@1")
    assert hook.send(admission_review(obj, "team-a"))["allowed"] is True
    with container.session_factory() as session:
        revocations.revoke(session, world.admin, "acme", "llm", 1, "leaked weights", clock=container.clock)
    wait_until(lambda: "revoked acme/llm@1" in hook.output(), "the webhook reads the revocation",
               process=hook.process)
    stack["stack"].close()
    hook = start_webhook(stack["tmp"] / "hook", world.url, stack["token"], stack["root"])
    try:
        answer = hook.send(admission_review(obj, "team-a"))
        assert answer["allowed"] is False and "admission.unproven" in answer["status"]["message"], answer
    finally:
        hook.stop()


def test_a_release_that_does_not_verify_is_denied_and_never_cached(stack, tmp_path):
    import datetime as dt

    from registry.signing.keys import SigningKey
    from registry.signing.trust_root import root_document, sign_root

    world = stack["world"]
    key = SigningKey.generate()
    foreign = tmp_path / "foreign-root.json"
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=30)
    foreign.write_text(json.dumps(sign_root(root_document(1, [key.public_key], 1, later), [key])))
    hook = start_webhook(tmp_path / "foreign", world.url, stack["token"], foreign)
    try:
        obj = isvc("modelreg://acme/llm@1")
        answer = hook.send(admission_review(obj, "team-a"))
        assert answer["allowed"] is False and "admission.unverified" in answer["status"]["message"], answer
        stack["stack"].close()
        hook.stop()
        hook = start_webhook(tmp_path / "foreign", world.url, stack["token"], foreign)
        again = hook.send(admission_review(obj, "team-a"))
        assert again["allowed"] is False and "admission.unproven" in again["status"]["message"], again
    finally:
        hook.stop()


def test_only_the_admission_role_may_ask_for_reviews(stack, container):
    world = stack["world"]
    body = {"object": {"kind": "Pod", "namespace": "team-a", "name": "p", "uid": "u", "operation": "CREATE"},
            "references": [{"uri": "modelreg://acme/llm@1", "path": "/spec/x", "kind": "init-fetch"}]}
    for role in ("node", "auditor", "submitter"):
        token = role_token(container, f"not-webhook-{role}", "acme", role)
        r = httpx.post(f"{world.url}/v1/admission/reviews", json=body,
                       headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert r.status_code == 403, r.text
        assert r.json()["type"].endswith("permission-denied")
    too_many = {**body, "references": body["references"] * 65}
    r = httpx.post(f"{world.url}/v1/admission/reviews", json=too_many,
                   headers={"Authorization": f"Bearer {stack['token']}"}, timeout=30)
    assert r.status_code == 422, r.text
    ok = httpx.post(f"{world.url}/v1/admission/reviews", json=body,
                    headers={"Authorization": f"Bearer {stack['token']}"}, timeout=30)
    assert ok.status_code == 200 and ok.json()["references"][0]["outcome"] == "allowed", ok.text


def _state_files(root) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(root.rglob("*"))
            if p.is_file()}


def _issuances(container) -> int:
    from sqlalchemy import func, select

    from registry.db.models import ReleaseIssuance

    with container.session_factory() as session:
        return session.scalar(select(func.count()).select_from(ReleaseIssuance))


@pytest.mark.parametrize("refresh", [0], indirect=True)  # every review asks the registry
def test_a_reference_proven_a_moment_ago_is_neither_signed_nor_verified_and_written_again(stack, container):
    hook = stack["hook"]
    obj = isvc("modelreg://acme/llm@prod")
    issued = _issuances(container)
    assert hook.send(admission_review(obj, "team-a"))["allowed"] is True
    assert _issuances(container) == issued + 1
    state = stack["tmp"] / "hook" / "state"
    before = _state_files(state)
    assert "admission/cache.json" in before and "trust/serials.json" in before, sorted(before)
    # The webhook says it holds version 1's release: the registry signs none, the webhook writes nothing.
    answer = hook.send(admission_review(obj, "team-a"), mutate=True)
    assert answer["allowed"] is True
    assert patched(obj, answer)["spec"]["predictor"]["model"]["storageUri"] == "modelreg://acme/llm@1"
    assert _issuances(container) == issued + 1
    assert _state_files(state) == before


def test_a_held_version_spares_the_release_only_when_the_decision_resolves_to_it(stack):
    world = stack["world"]

    def review(uri: str, held: int) -> dict:
        body = {"object": {"kind": "InferenceService", "namespace": "team-a", "name": "llm", "uid": "u",
                           "operation": "CREATE"},
                "references": [{"uri": uri, "path": "/spec/predictor/model/storageUri", "kind": "storage-uri",
                                "held": held}]}
        r = httpx.post(f"{world.url}/v1/admission/reviews", json=body,
                       headers={"Authorization": f"Bearer {stack['token']}"}, timeout=30)
        assert r.status_code == 200, r.text
        return r.json()["references"][0]

    spared = review("modelreg://acme/llm@prod", 1)
    assert (spared["outcome"], spared["version"], spared["pinned"], spared["release"]) == (
        "allowed", 1, "modelreg://acme/llm@1", None), spared
    other = review("modelreg://acme/llm@prod", 3)
    assert other["outcome"] == "allowed" and other["version"] == 1 and other["release"]["envelope"], other
    # Holding a release decides nothing: a revoked or unapproved version is denied as ever.
    for uri, held, rule in (("modelreg://acme/llm@2", 2, "admission.revoked"),
                            ("modelreg://acme/llm@3", 3, "admission.not-approved")):
        denied = review(uri, held)
        assert (denied["outcome"], denied["rule"], denied["release"]) == ("denied", rule, None), denied


@pytest.mark.parametrize("refresh", [0], indirect=True)  # every review asks the registry
def test_an_alias_moved_to_another_version_is_proven_again_and_pinned_from_the_cache_to_it(stack, container):
    from registry.domain.aliases import make_target
    from registry.services import aliases
    from tests.support.releases import approve_standin

    world, hook = stack["world"], stack["hook"]
    obj = isvc("modelreg://acme/llm@prod")
    assert hook.send(admission_review(obj, "team-a"))["allowed"] is True
    approve_standin(container, "acme", "llm", 3)
    with container.session_factory() as session:
        aliases.promote(session, world.admin, "acme", "llm", "prod", make_target(3), policy=container.policy,
                        clock=container.clock)
    assert hook.send(admission_review(obj, "team-a"))["allowed"] is True
    stack["stack"].close()
    hook = start_webhook(stack["tmp"] / "hook", world.url, stack["token"], stack["root"])
    try:
        answer = hook.send(admission_review(obj, "team-a"), mutate=True)
        assert answer["allowed"] is True and "registry unreachable" in answer["warnings"][0], answer
        assert patched(obj, answer)["spec"]["predictor"]["model"]["storageUri"] == "modelreg://acme/llm@3"
    finally:
        hook.stop()


def test_the_webhook_answers_on_connections_without_nagles_delay(tmp_path):
    """The API server reuses its connections to a webhook: on a reused connection with Nagle's algorithm on, every
    answer's body waits for the client's delayed ACK of its headers (40 ms a review, measured by
    bench/admission.py). The webhook's own server, as ``modelreg admission`` builds it, sets TCP_NODELAY on each
    connection it accepts."""
    import http.client
    import socket
    import ssl
    import threading

    from registry.node.admission import AdmissionServer
    from tests.support.admission_webhook import tls_pair

    cert, key = tls_pair(tmp_path / "tls")
    server = AdmissionServer(("127.0.0.1", 0), None, tls_cert=cert, tls_key=key)  # type: ignore[arg-type]
    seen: list[int] = []

    class Recording(server.RequestHandlerClass):  # type: ignore[name-defined,misc]
        def setup(self) -> None:
            super().setup()
            seen.append(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    server.RequestHandlerClass = Recording
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        conn = http.client.HTTPSConnection("127.0.0.1", server.server_address[1], timeout=10,
                                           context=ssl.create_default_context(cafile=str(cert)))
        for _ in range(2):
            conn.request("GET", "/healthz")
            assert conn.getresponse().read() == b'{"status": "ok"}'
        conn.close()
    finally:
        server.shutdown()
        server.server_close()
    assert seen and all(seen), seen


def _tampered_state(source, target, edit) -> None:
    """A copy of the webhook state directory ``source`` at ``target``, its cache file passed through ``edit`` (the
    parsed document, changed in place; or bytes written instead)."""
    shutil.copytree(source, target)
    path = target / "admission" / "cache.json"
    doc = json.loads(path.read_text())
    written = edit(doc)
    path.write_bytes(written if isinstance(written, bytes) else json.dumps(doc).encode())


def _entry_key(doc: dict, uri: str) -> str:
    return next(k for k in doc["entries"] if k.endswith(f"\n{uri}"))


def test_a_cache_file_edited_or_planted_in_the_state_directory_proves_nothing(stack, tmp_path):
    """The cache file of a real run admits while the registry is down; the same file with an entry's version or
    expiry edited, an entry's release re-signed by a foreign key, an entry planted on a genuine release of another
    version, or garbage: each such entry is dropped at start and its reference denied (``admission.unproven``),
    the genuine entries still admitted."""
    import base64
    import datetime as dt

    from registry.node.admission import envelope_digest
    from registry.signing.keys import SigningKey
    from registry.signing.release import sign_release

    world, hook = stack["world"], stack["hook"]
    known = pod(f"{world.host}/acme/llm@{_v2_digest(world, '1-image')}", "acme/llm@1")
    by_number, by_alias, unapproved = (isvc("modelreg://acme/llm@1"), isvc("modelreg://acme/llm@prod"),
                                       isvc("modelreg://acme/llm@3"))
    for obj in (known, by_number, by_alias):
        assert hook.send(admission_review(obj, "team-a"))["allowed"] is True
    stack["stack"].close()  # the registry stops, and the webhook with it
    state = stack["tmp"] / "hook" / "state"

    def edit_version_and_expiry(doc):
        doc["entries"][_entry_key(doc, "modelreg://acme/llm@1")]["version"] = 2
        entry = doc["entries"][_entry_key(doc, "modelreg://acme/llm@prod")]
        entry["expires_at"] = (dt.datetime.fromisoformat(entry["expires_at"]) + dt.timedelta(days=365)).isoformat()

    foreign = SigningKey.generate()

    def foreign_key(doc):
        # The @1 entry's release re-signed, payload unchanged, by a key the pinned root does not name; and an
        # entry planted for the unapproved @3 on a release of version 3 signed by that key.
        entry = doc["entries"][_entry_key(doc, "modelreg://acme/llm@1")]
        kept = doc["releases"][entry["release"]]
        payload = json.loads(base64.b64decode(kept["envelope"]["payload"]))
        for claimed, key in ((payload, _entry_key(doc, "modelreg://acme/llm@1")),
                             ({**payload, "ref": "3", "version": 3}, "team-a\nstorage-uri\nmodelreg://acme/llm@3")):
            envelope = sign_release(claimed, [foreign])
            digest = envelope_digest(envelope)
            doc["releases"][digest] = {**kept, "envelope": envelope}
            doc["entries"][key] = {**entry, "version": claimed["version"], "pinned": "modelreg://acme/llm@3"
                                   if claimed["version"] == 3 else entry["pinned"], "release": digest}

    def planted_on_a_genuine_release(doc):
        # The genuine release of version 1 claimed for @3: signed, but not of what the entry names.
        entry = doc["entries"][_entry_key(doc, "modelreg://acme/llm@1")]
        doc["entries"]["team-a\nstorage-uri\nmodelreg://acme/llm@3"] = {**entry, "pinned": None}
        del doc["entries"][_entry_key(doc, "modelreg://acme/llm@prod")]
        doc["entries"]["team-a\nstorage-uri\nmodelreg://acme/llm@prod"] = {**entry, "pinned": None}

    def garbage_entries(doc):
        entry = doc["entries"][_entry_key(doc, "modelreg://acme/llm@1")]
        doc["releases"][entry["release"]] = {"envelope": "garbage", "signature_bundle": []}
        doc["entries"]["team-a\nstorage-uri\nmodelreg://acme/llm@3"] = "garbage"
        doc["entries"]["garbage"] = {**entry}
        doc["releases"]["0" * 64] = None

    variants = [
        ("genuine", lambda doc: None, [known, by_number, by_alias], []),
        ("edited", edit_version_and_expiry, [known], [by_number, by_alias]),
        ("foreign", foreign_key, [known, by_alias], [by_number, unapproved]),
        ("planted", planted_on_a_genuine_release, [known, by_number], [unapproved, by_alias]),
        ("garbage", garbage_entries, [known, by_alias], [by_number, unapproved]),
        ("not-json", lambda doc: b"\x00{not json", [], [known, by_number]),
    ]
    for name, edit, admitted, denied in variants:
        _tampered_state(state, tmp_path / name / "state", edit)
        hook = start_webhook(tmp_path / name, world.url, stack["token"], stack["root"])
        try:
            for obj in admitted:
                answer = hook.send(admission_review(obj, "team-a"))
                assert answer["allowed"] is True and all("verified cache" in w for w in answer["warnings"]), \
                    (name, answer)
            for obj in denied:
                answer = hook.send(admission_review(obj, "team-a"))
                assert answer["allowed"] is False, (name, obj, answer)
                assert "admission.unproven" in answer["status"]["message"], (name, answer)
        finally:
            hook.stop()
        if denied and name != "not-json":
            assert "admission cache: dropped" in hook.output(), (name, hook.output()[-2000:])


def test_the_webhook_authenticates_by_its_projected_service_account_token(stack, container):
    """A service account bound to ``admission`` (``modelreg node bind --role admission``) runs the webhook on its
    projected token, which answers; the same service account bound only as ``node`` is refused reviews (403),
    and unbound its token is refused (401)."""
    import subprocess

    from registry.auth import issue_token
    from registry.db.models import Principal
    from registry.services import node_bindings
    from registry.settings import WorkloadIssuer
    from tests.support.kube_issuer import KubeIssuer
    from tests.support.server import MODELREG

    world = stack["world"]
    body = {"object": {"kind": "Pod", "namespace": "team-a", "name": "p", "uid": "u", "operation": "CREATE"},
            "references": [{"uri": "modelreg://acme/llm@1", "path": "/spec/x", "kind": "init-fetch"}]}
    subject = {"namespace": "modelreg", "service_account": "modelreg-admission", "tenant": "acme"}
    with KubeIssuer() as issuer:
        container.settings.workload_issuers = [WorkloadIssuer(issuer=issuer.url, audience="modelreg")]
        container.__dict__.pop("workload_verifier", None)
        with container.session_factory() as session:
            admin_token = issue_token(session, session.get(Principal, world.admin.id)).token
            session.commit()
        bound = subprocess.run(
            [MODELREG, "node", "bind", "--issuer", issuer.url, "--namespace", "modelreg", "--service-account",
             "modelreg-admission", "--tenant", "acme", "--role", "admission", "--url", world.url, "--token",
             admin_token, "--json"], capture_output=True, text=True, timeout=60)
        assert bound.returncode == 0, bound.stderr
        assert json.loads(bound.stdout)["role"] == "admission"
        token = issuer.mint("modelreg", "modelreg-admission")

        def review() -> httpx.Response:
            return httpx.post(f"{world.url}/v1/admission/reviews", json=body, timeout=30,
                              headers={"Authorization": f"Bearer {token}"})

        assert review().status_code == 200
        # The admission role only: no release of the tenant for this service account, as for any reviewer.
        fetched = httpx.get(f"{world.url}/v1/models/acme/llm/manifest", params={"ref": "prod"}, timeout=30,
                            headers={"Authorization": f"Bearer {token}"})
        assert fetched.status_code == 403, fetched.text[:300]
        hook = start_webhook(stack["tmp"] / "sa-hook", world.url, token, stack["root"])
        try:
            answer = hook.send(admission_review(isvc("modelreg://acme/llm@1"), "team-a"))
            assert answer["allowed"] is True and "warnings" not in answer, answer
        finally:
            hook.stop()
        # The other role of the same service account: re-binding refuses (unbind first), then node only.
        again = subprocess.run(
            [MODELREG, "node", "bind", "--issuer", issuer.url, "--namespace", "modelreg", "--service-account",
             "modelreg-admission", "--tenant", "acme", "--url", world.url, "--token", admin_token],
            capture_output=True, text=True, timeout=60)
        assert again.returncode != 0 and "unbind it first" in again.stderr, (again.stdout, again.stderr)
        with container.session_factory() as session:
            node_bindings.unbind(session, world.admin, issuer=issuer.url, **subject)
        with container.session_factory() as session:
            node_bindings.bind(session, world.admin, issuer=issuer.url, trusted=container.settings.workload_issuers,
                               **subject)
        refused = review()
        assert refused.status_code == 403 and refused.json()["type"].endswith("permission-denied"), refused.text[:300]
        with container.session_factory() as session:
            node_bindings.unbind(session, world.admin, issuer=issuer.url, **subject)
        unbound = review()
        assert unbound.status_code == 401 and unbound.json()["reason"] == "unbound", unbound.text[:300]


def _records_of(world, token: str, review: dict) -> list[dict]:
    """The audit events (data) the registry holds for ``review`` (by its uid)."""
    uid = review["request"]["uid"]
    return [e["data"] for e in _events(world, token) if e["data"]["object"]["uid"] == uid]


def test_a_reference_decided_a_moment_ago_is_answered_from_the_proof_and_its_record_arrives(stack):
    """Within the refresh period the webhook answers without asking the registry (no decision call: a decided
    review always has an unmarked record); the review's record still arrives, marked as answered from the
    webhook's proof, reported in a batch."""
    world, hook, token = stack["world"], stack["hook"], stack["token"]
    image = f"{world.host}/acme/llm@{_v2_digest(world, '1-image')}"
    for obj, read, pinned in (
            (isvc("modelreg://acme/llm@prod"), lambda o: o["spec"]["predictor"]["model"]["storageUri"],
             "modelreg://acme/llm@1"),
            (pod(image, "acme/llm@prod"), lambda o: o["spec"]["initContainers"][0]["args"][0], "acme/llm@1")):
        first = admission_review(obj, "team-a")
        assert hook.send(first)["allowed"] is True
        [asked] = _records_of(world, token, first)
        assert "answered" not in asked, asked
        second = admission_review(obj, "team-a")
        answer = hook.send(second, mutate=True)
        assert answer["allowed"] is True and "warnings" not in answer, answer
        assert read(patched(obj, answer)) == pinned
        records = wait_until(lambda: _records_of(world, token, second), "the answered review's record arrives")
        assert len(records) == 1, records
        [record] = records
        assert record["answered"]["by"] == "webhook-proof" and record["outcome"] == "allowed", record
        assert record["tenant"] == "acme" and {(r["rule"], r["version"]) for r in record["references"]} == {
            ("admission.approved", 1)}, record


def test_a_revocation_read_from_the_stream_sends_the_next_review_to_the_registry(stack, container):
    world, hook = stack["world"], stack["hook"]
    obj = isvc("modelreg://acme/llm@1")
    for _ in range(2):  # decided, then answered from the proof
        assert hook.send(admission_review(obj, "team-a"))["allowed"] is True
    with container.session_factory() as session:
        revocations.revoke(session, world.admin, "acme", "llm", 1, "leaked weights", clock=container.clock)
    wait_until(lambda: "revoked acme/llm@1" in hook.output(), "the webhook reads the revocation",
               process=hook.process)
    answer = hook.send(admission_review(obj, "team-a"))
    assert answer["allowed"] is False and "(rule admission.revoked)" in answer["status"]["message"], answer


def _promote_prod_to_3(world, container) -> None:
    from registry.domain.aliases import make_target
    from registry.services import aliases
    from tests.support.releases import approve_standin

    approve_standin(container, "acme", "llm", 3)
    with container.session_factory() as session:
        aliases.promote(session, world.admin, "acme", "llm", "prod", make_target(3), policy=container.policy,
                        clock=container.clock)


def _pinned_uri(obj: dict, answer: dict) -> str:
    return patched(obj, answer)["spec"]["predictor"]["model"]["storageUri"]


@pytest.mark.parametrize("refresh", [300], indirect=True)  # the longest period
def test_within_the_refresh_period_an_alias_moved_is_still_pinned_to_the_version_last_decided(stack, container):
    """The staleness bound: within the period the webhook answers from its proof, so an alias moved meanwhile
    is still pinned to the version the registry last decided, and the answered review's record arrives."""
    world, hook, token = stack["world"], stack["hook"], stack["token"]
    obj = isvc("modelreg://acme/llm@prod")
    assert _pinned_uri(obj, hook.send(admission_review(obj, "team-a"), mutate=True)) == "modelreg://acme/llm@1"
    _promote_prod_to_3(world, container)
    stale = admission_review(obj, "team-a")
    answer = hook.send(stale, mutate=True)
    assert _pinned_uri(obj, answer) == "modelreg://acme/llm@1", answer
    [record] = wait_until(lambda: _records_of(world, token, stale), "the answered review's record arrives")
    assert record["answered"]["by"] == "webhook-proof", record


@pytest.mark.parametrize("refresh", [2], indirect=True)
def test_after_the_refresh_period_the_registry_decides_again_and_an_alias_move_applies(stack, container):
    """Once the period has passed the registry decides again and pins the version the alias names now."""
    import time

    world, hook, token = stack["world"], stack["hook"], stack["token"]
    obj = isvc("modelreg://acme/llm@prod")
    decided_at = time.monotonic()
    assert _pinned_uri(obj, hook.send(admission_review(obj, "team-a"), mutate=True)) == "modelreg://acme/llm@1"
    _promote_prod_to_3(world, container)

    def asked_again() -> dict | None:
        review = admission_review(obj, "team-a")
        answer = hook.send(review, mutate=True)
        return review if _pinned_uri(obj, answer) == "modelreg://acme/llm@3" else None

    review = wait_until(asked_again, "the registry decides the alias again", interval=0.5)
    assert time.monotonic() - decided_at >= 2
    [record] = _records_of(world, token, review)
    assert "answered" not in record and record["references"][0]["version"] == 3, record


def test_answered_reviews_are_recorded_only_when_the_registry_can_confirm_them(stack):
    """``POST /v1/admission/answered``: the admission role only; a review naming another tenant's model, a
    version that does not exist, or a revoked-by-policy namespace is refused and not recorded; too many at once
    is refused whole."""
    import datetime as dt
    import uuid

    world, token = stack["world"], stack["token"]

    def answered(uri: str, version: int, namespace: str = "team-a") -> dict:
        return {"object": {"kind": "InferenceService", "namespace": namespace, "name": "llm",
                           "uid": str(uuid.uuid4()), "operation": "CREATE"},
                "references": [{"uri": uri, "path": "/spec/predictor/model/storageUri", "kind": "storage-uri",
                                "version": version, "pinned": None}],
                "decided_at": dt.datetime.now(dt.timezone.utc).isoformat()}

    def report(reviews: list[dict], bearer: str = token) -> httpx.Response:
        return httpx.post(f"{world.url}/v1/admission/answered", json={"reviews": reviews}, timeout=30,
                          headers={"Authorization": f"Bearer {bearer}"})

    good = answered("modelreg://acme/llm@1", 1)
    refused = [answered("modelreg://other/secret@1", 1), answered("modelreg://acme/llm@prod", 99),
               answered("modelreg://acme/llm@1", 1, namespace="team-x"), answered(HUB_URI, 1)]
    assert report([good]).status_code == 200
    another = answered("modelreg://acme/llm@1", 1)
    r = report([*refused, another])
    assert r.status_code == 200, r.text
    assert r.json()["recorded"] == 1 and [x["index"] for x in r.json()["refused"]] == [0, 1, 2, 3], r.json()
    assert "admission.tenant" in r.json()["refused"][0]["reason"], r.json()
    uids = {e["data"]["object"]["uid"] for e in _events(world, token)}
    assert {good["object"]["uid"], another["object"]["uid"]} <= uids and not uids & {x["object"]["uid"]
                                                                                     for x in refused}
    node = report([good], world.node)
    assert node.status_code == 403 and node.json()["type"].endswith("permission-denied"), node.text[:300]
    assert report([good] * 257).status_code == 422
    # A time is an RFC 3339 string with its offset (pydantic alone would read 0 as the epoch); no NUL in text;
    # versions are JSON integers.
    for bad in ({"decided_at": 0}, {"decided_at": "2026-12-07T00:00:00"},
                {"object": {**good["object"], "kind": "Pod\x00"}},
                {"references": [{**good["references"][0], "version": "1"}]}):
        r = report([{**good, **bad}])
        assert r.status_code == 422, (bad, r.text[:300])


def test_a_report_sent_again_records_nothing_new(stack):
    """The webhook sends a batch again when its report timed out, though the registry may have recorded it: a
    review whose request uid was recorded already is only counted (``already_recorded``), the same uid twice in
    one report is recorded once, and a Pod's place is recorded once."""
    import datetime as dt
    import uuid

    from sqlalchemy import func, select

    from registry.db.models import Receipt

    world, token = stack["world"], stack["token"]
    at = dt.datetime.now(dt.timezone.utc).isoformat()
    pod_name = f"p-{uuid.uuid4().hex[:8]}"
    pod_review = {"object": {"kind": "Pod", "namespace": "team-a", "name": pod_name, "uid": str(uuid.uuid4()),
                             "operation": "CREATE"},
                  "references": [{"uri": "acme/llm@1", "path": "/spec/initContainers/0/args/0", "kind": "init-fetch",
                                  "version": 1, "pinned": None}], "decided_at": at}
    isvc_review = {"object": {"kind": "InferenceService", "namespace": "team-a", "name": "llm",
                              "uid": str(uuid.uuid4()), "operation": "CREATE"},
                   "references": [{"uri": "modelreg://acme/llm@1", "path": "/spec/predictor/model/storageUri",
                                   "kind": "storage-uri", "version": 1, "pinned": None}], "decided_at": at}
    batch = {"reviews": [pod_review, isvc_review, isvc_review]}

    def report() -> dict:
        r = httpx.post(f"{world.url}/v1/admission/answered", json=batch, timeout=30,
                       headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        return r.json()

    assert report() == {"recorded": 2, "refused": [], "already_recorded": 1}
    assert report() == {"recorded": 0, "refused": [], "already_recorded": 3}
    uids = [e["data"]["object"]["uid"] for e in _events(world, token)]
    assert uids.count(pod_review["object"]["uid"]) == 1 and uids.count(isvc_review["object"]["uid"]) == 1
    with world.container.session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Receipt).where(Receipt.pod == pod_name,
                                                                             Receipt.dropped_at.is_(None))) == 1
