"""A real ``modelreg admission`` process over TLS in front of a served registry, and AdmissionReview documents
shaped as the Kubernetes API server sends them (``admission.k8s.io/v1``).

:func:`tls_pair` writes a self-signed certificate for 127.0.0.1; :func:`start_webhook` starts the webhook with it
and waits on ``/readyz``; :func:`admission_review` wraps an object in the request the API server would send.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.server import MODELREG, free_port, stop_process
from tests.support.waiting import wait_until

RESOURCES = {
    "Pod": ("", "v1", "pods"),
    "InferenceService": ("serving.kserve.io", "v1beta1", "inferenceservices"),
    "LLMInferenceService": ("serving.kserve.io", "v1alpha1", "llminferenceservices"),
    "LocalModelCache": ("serving.kserve.io", "v1alpha1", "localmodelcaches"),
}


def tls_pair(directory: Path) -> tuple[Path, Path]:
    """A self-signed P-256 certificate for 127.0.0.1 and its key, as PEM files in ``directory``."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "modelreg-admission.test")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@dataclass
class Webhook:
    url: str
    process: subprocess.Popen
    cert: Path
    log: Path

    def send(self, review: dict[str, Any], *, mutate: bool = False) -> dict[str, Any]:
        """POST the review as the API server does; the AdmissionReview answered (its ``response``)."""
        r = httpx.post(f"{self.url}/{'mutate' if mutate else 'validate'}", json=review, verify=str(self.cert),
                       timeout=30)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview", answer
        assert answer["response"]["uid"] == review["request"]["uid"]
        return answer["response"]

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        stop_process(self.process)


def start_webhook(tmp: Path, registry_url: str, token: str, trust_root: Path, *,
                  refresh_seconds: float | None = None) -> Webhook:
    """``modelreg admission`` on a free loopback port, ready (``/readyz`` 200 over TLS); ``refresh_seconds``: its
    ``--refresh-seconds`` (None: the default)."""
    cert, key = tls_pair(tmp / "tls")
    token_file = tmp / "token"
    token_file.write_text(token)
    port = free_port()
    log = tmp / f"admission-{port}.log"
    process = subprocess.Popen(
        [MODELREG, "admission", "--listen", f"127.0.0.1:{port}", "--tls-cert", str(cert), "--tls-key", str(key),
         "--registry", registry_url, "--token-file", str(token_file), "--trust-root", str(trust_root),
         "--state-dir", str(tmp / "state"),
         *(["--refresh-seconds", str(refresh_seconds)] if refresh_seconds is not None else [])],
        stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    hook = Webhook(f"https://127.0.0.1:{port}", process, cert, log)

    def ready() -> bool:
        try:
            return httpx.get(f"{hook.url}/readyz", verify=str(cert), timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, f"modelreg admission ready ({log})", process=process)
    except AssertionError:
        hook.stop()
        raise AssertionError(f"modelreg admission did not start: {log.read_text()[-2000:]}") from None
    return hook


def admission_review(obj: dict[str, Any], namespace: str, *, operation: str = "CREATE") -> dict[str, Any]:
    """``obj`` as the API server sends it to a webhook: an AdmissionReview request with its uid, kind, resource,
    names, operation, user and options."""
    group, version, resource = RESOURCES[obj["kind"]]
    gvk = {"group": group, "version": version, "kind": obj["kind"]}
    gvr = {"group": group, "version": version, "resource": resource}
    obj = {**obj, "metadata": {"namespace": namespace, **obj.get("metadata", {})}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": obj["metadata"].get("name", ""), "namespace": namespace, "operation": operation,
        "userInfo": {"username": "alice", "uid": "u-1", "groups": ["system:authenticated"]},
        "object": obj, "oldObject": None, "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}


def patched(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with the response's JSONPatch applied (``replace`` operations, as the webhook writes them)."""
    assert response.get("patchType") == "JSONPatch", response
    result = json.loads(json.dumps(obj))
    for op in json.loads(base64.b64decode(response["patch"])):
        assert op["op"] == "replace", op
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = result
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        last = parts[-1]
        if isinstance(node, list):
            node[int(last)] = op["value"]
        else:
            assert last in node, op
            node[last] = op["value"]
    return result
