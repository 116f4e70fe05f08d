"""A Kubernetes service-account token issuer on loopback, for the workload identity tests.

It serves what a kube-apiserver serves for its issuer (``/.well-known/openid-configuration`` and
``/openid/v1/jwks``) from a threaded ``http.server``, with keys the test makes, and mints tokens shaped
as the kube-apiserver mints projected tokens (``pkg/serviceaccount/claims.go``): ``iss``, ``sub``
``system:serviceaccount:NS:SA``, ``aud`` (a list), ``exp``, ``iat``, ``nbf``, ``jti`` and the
``kubernetes.io`` claim with the namespace, the service account, the pod and the node; the header holds
``alg`` and a ``kid`` that is the base64url SHA-256 of the public key's DER, as the apiserver's is.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class IssuerKey:
    alg: str
    private: Any
    kid: str

    @classmethod
    def generate(cls, alg: str = "RS256") -> "IssuerKey":
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048) if alg == "RS256" \
            else ec.generate_private_key(ec.SECP256R1())
        der = private.public_key().public_bytes(serialization.Encoding.DER,
                                                serialization.PublicFormat.SubjectPublicKeyInfo)
        return cls(alg=alg, private=private, kid=_b64(hashlib.sha256(der).digest()))

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo)

    def jwk(self) -> dict[str, Any]:
        algorithm = jwt.algorithms.RSAAlgorithm if self.alg == "RS256" else jwt.algorithms.ECAlgorithm
        entry = json.loads(algorithm.to_jwk(self.private.public_key()))
        entry.update({"kid": self.kid, "use": "sig", "alg": self.alg})
        return entry


@dataclass
class KubeIssuer:
    """Start with ``with KubeIssuer() as issuer:``; ``issuer.url`` is its issuer URL.

    ``issuer.sibling("/id/B")`` is another issuer on the same host and port, told apart by its path (as
    EKS's and GKE's clusters' issuers share a host); it lives as long as the first.
    """

    keys: list[IssuerKey] = field(default_factory=lambda: [IssuerKey.generate()])
    published: list[IssuerKey] | None = None  # what the JWKS serves; default: keys
    hits: dict[str, int] = field(default_factory=dict)
    url: str = ""
    path: str = ""
    siblings: dict[str, "KubeIssuer"] = field(default_factory=dict)

    def sibling(self, path: str) -> "KubeIssuer":
        other = KubeIssuer(path=path)
        other.url = self.url.removesuffix(self.path) + path
        self.siblings[path] = other
        return other

    def __enter__(self) -> "KubeIssuer":
        first = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                issuer, path = first, self.path
                for prefix, other in first.siblings.items():
                    if path.startswith(prefix + "/"):
                        issuer, path = other, path[len(prefix):]
                if issuer is first and first.path:
                    path = path.removeprefix(first.path)
                issuer.hits[path] = issuer.hits.get(path, 0) + 1
                if path == "/.well-known/openid-configuration":
                    body = {"issuer": issuer.url, "jwks_uri": f"{issuer.url}/openid/v1/jwks",
                            "response_types_supported": ["id_token"], "subject_types_supported": ["public"],
                            "id_token_signing_alg_values_supported": ["ES256", "RS256"]}
                elif path == "/openid/v1/jwks":
                    body = {"keys": [k.jwk() for k in (issuer.published if issuer.published is not None
                                                       else issuer.keys)]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{self.path}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def jwks_fetches(self) -> int:
        return self.hits.get("/openid/v1/jwks", 0)

    def claims(self, namespace: str = "serving", service_account: str = "fetcher", *,
               audience: list[str] | None = None, expires_in: int = 3600, issued_at: int | None = None,
               issuer: str | None = None) -> dict[str, Any]:
        """The claims of a projected token of ``namespace/service_account`` (a pod, a node), as minted."""
        now = int(time.time()) if issued_at is None else issued_at
        return {
            "aud": audience if audience is not None else ["modelreg"],
            "exp": now + expires_in,
            "iat": now,
            "iss": issuer or self.url,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": {
                "namespace": namespace,
                "node": {"name": "gpu-node-7", "uid": str(uuid.uuid4())},
                "pod": {"name": f"{service_account}-6d8f9c7b5-x2k4q", "uid": str(uuid.uuid4())},
                "serviceaccount": {"name": service_account, "uid": str(uuid.uuid4())},
            },
            "nbf": now,
            "sub": f"system:serviceaccount:{namespace}:{service_account}",
        }

    def mint(self, namespace: str = "serving", service_account: str = "fetcher", *, key: IssuerKey | None = None,
             claims: dict[str, Any] | None = None, **claim_options: Any) -> str:
        key = key or self.keys[0]
        body = claims if claims is not None else self.claims(namespace, service_account, **claim_options)
        return jwt.encode(body, key.private, algorithm=key.alg, headers={"kid": key.kid})

    def mint_hs256_with_public_key(self, claims: dict[str, Any], key: IssuerKey | None = None) -> str:
        """The key-confusion attack: HS256, its HMAC keyed with the issuer's public key (PEM), the real kid.
        Made by hand: PyJWT refuses to use a public key as an HMAC secret."""
        key = key or self.keys[0]
        signing_input = (_b64(json.dumps({"alg": "HS256", "kid": key.kid, "typ": "JWT"}).encode()) + "."
                         + _b64(json.dumps(claims).encode()))
        mac = hmac.new(key.public_pem(), signing_input.encode(), hashlib.sha256).digest()
        return f"{signing_input}.{_b64(mac)}"

    def mint_unsigned(self, claims: dict[str, Any], key: IssuerKey | None = None) -> str:
        """``alg: none``, no signature (the empty third part), with the real kid."""
        key = key or self.keys[0]
        header = _b64(json.dumps({"alg": "none", "kid": key.kid}).encode())
        return f"{header}.{_b64(json.dumps(claims).encode())}."
