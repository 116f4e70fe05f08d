"""Serving nodes authenticated by their pod's Kubernetes projected service-account token, no copied secret.

A node sends the token the kubelet projects into its pod (audience ``modelreg``, about an hour, bound to
the pod). :class:`WorkloadVerifier` checks it with PyJWT against the issuers in
``settings.workload_issuers``: the signature (RS256 or ES256 only, with a key of the issuer's JWKS,
fetched by ``jwks_url`` or OIDC discovery, cached, and fetched again on an unknown ``kid`` at most once
per ``refresh_interval``), ``iss``, ``aud``, ``exp``, ``nbf`` and ``iat``. The ``kubernetes.io`` claims
name the namespace and service account; :func:`authenticate_workload` maps them through the
``node_bindings`` an administrator made (``modelreg node bind``) to a principal named
``sa:<namespace>/<service account>@<issuer>`` (the issuer URL without its scheme: EKS and GKE serve many
clusters' issuers from one host, told apart by the path) that holds only the binding's role in each bound
tenant: ``node`` (a serving node), or ``admission`` (the admission webhook, ``modelreg node bind --role
admission``; :data:`BINDING_ROLES`): one principal per (issuer, namespace, service account). Bindings are read
on every request: one removed refuses the next request.

The claims the kube-apiserver mints (``pkg/serviceaccount/claims.go``)::

    {"iss": "https://kubernetes.default.svc.cluster.local", "sub": "system:serviceaccount:NS:SA",
     "aud": ["modelreg"], "exp": ..., "iat": ..., "nbf": ..., "jti": "...",
     "kubernetes.io": {"namespace": "NS", "serviceaccount": {"name": "SA", "uid": "..."},
                       "pod": {"name": "...", "uid": "..."}, "node": {"name": "...", "uid": "..."}}}
"""

from __future__ import annotations

import ipaddress
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlsplit

import httpx
import jwt
from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from registry.auth import AuthenticatedPrincipal, Role, looks_like_jwt
from registry.db.models import NodeBinding, Principal, Tenant
from registry.domain.errors import InvalidInputError, ServiceUnavailableError, WorkloadTokenRejectedError
from registry.settings import WorkloadIssuer

ALLOWED_ALGORITHMS = ("RS256", "ES256")  # asymmetric only: never none, never HS* (a public key is no secret)
MAX_JWKS_BYTES = 256 * 1024
MAX_KEYS_PER_ISSUER = 16
FETCH_TIMEOUT_SECONDS = 5.0
# Three base64url parts: the compact JWS form (the third may be empty: an alg none token, refused by name).
# Registry tokens start with mr_ and contain no dot.
_DNS_LABEL_RE = re.compile(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_DNS_SUBDOMAIN_RE = re.compile(r"\A[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
BINDING_ROLES = {"node": Role.NODE, "admission": Role.ADMISSION}
"""The roles a service account may be bound to (``node_bindings.role``); no other: a projected token never holds
a role that submits, approves or administers."""
PRINCIPAL_NAME_MAX = 128


def check_fetch_url(url: str, *, what: str) -> str:
    """An outbound URL the registry may fetch keys from: https, or http to a loopback address only; no
    credentials in it. Raises InvalidInputError."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.username is not None or parts.password is not None or not host:
        raise InvalidInputError(f"{what} {url!r}: a URL with a host and no credentials is needed", field=what)
    if parts.scheme == "https":
        return url
    if parts.scheme == "http" and _is_loopback(host):
        return url
    raise InvalidInputError(f"{what} {url!r}: use https (http only to a loopback address)", field=what)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def issuer_host(issuer: str) -> str:
    """The host (and port, when not the default) of an issuer URL, lower-case."""
    parts = urlsplit(issuer)
    host = (parts.hostname or "").lower()
    return f"{host}:{parts.port}" if parts.port else host


def issuer_label(issuer: str) -> str:
    """The issuer URL without its scheme and trailing slash, host lower-case, path as it is: the principal's
    suffix. Two issuers on one host (EKS ``oidc.eks.REGION.amazonaws.com/id/ID``, GKE
    ``container.googleapis.com/v1/projects/P/locations/L/clusters/C``) get two labels.

    Example:
        >>> issuer_label("https://oidc.eks.us-west-2.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE/")
        'oidc.eks.us-west-2.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE'
        >>> issuer_label("https://kubernetes.default.svc.cluster.local")
        'kubernetes.default.svc.cluster.local'
    """
    return issuer_host(issuer) + urlsplit(issuer).path.rstrip("/")


def principal_name(issuer: str, namespace: str, service_account: str) -> str:
    """``sa:<namespace>/<service account>@<issuer label>``: never a name an administrator can give (``:``)."""
    return f"sa:{namespace}/{service_account}@{issuer_label(issuer)}"


_PRINCIPAL_NAME_RE = re.compile(
    r"\Asa:[a-z0-9-]{1,63}/[a-z0-9.-]{1,253}@[a-z0-9.:\[\]-]{1,255}(/[A-Za-z0-9._~%!$&'()*+,;=:@-]*)*\Z")


def is_node_principal_name(name: str) -> bool:
    """Whether ``name`` has the form of a bound service account's principal (``sa:NS/SA@issuer``)."""
    return isinstance(name, str) and len(name) <= PRINCIPAL_NAME_MAX and _PRINCIPAL_NAME_RE.match(name) is not None


def validate_subject(issuer: str, namespace: str, service_account: str) -> None:
    """Raise InvalidInputError unless the namespace is a DNS label, the service account a DNS subdomain,
    and the principal name they make fits."""
    if not isinstance(namespace, str) or not _DNS_LABEL_RE.match(namespace):
        raise InvalidInputError(f"invalid namespace {namespace!r}: a DNS label (RFC 1123)", field="namespace")
    if not isinstance(service_account, str) or not _DNS_SUBDOMAIN_RE.match(service_account):
        raise InvalidInputError(f"invalid service account {service_account!r}: a DNS subdomain (RFC 1123)",
                                field="service_account")
    if len(principal_name(issuer, namespace, service_account)) > PRINCIPAL_NAME_MAX:
        raise InvalidInputError("namespace, service account and issuer together are too long",
                                field="service_account")


@dataclass(frozen=True, slots=True)
class WorkloadIdentity:
    """Who a verified token names."""

    issuer: str
    namespace: str
    service_account: str
    service_account_uid: str
    pod_name: str
    node_name: str

    @property
    def principal_name(self) -> str:
        return principal_name(self.issuer, self.namespace, self.service_account)


def _refused(reason: str, message: str, **details: Any) -> WorkloadTokenRejectedError:
    return WorkloadTokenRejectedError(f"service-account token refused: {message}", reason=reason, **details)


class JwksCache:
    """The signing keys of one issuer, by ``kid``; fetched again when a token names a kid it does not
    hold (or the keys are older than ``max_age``), at most once per ``refresh_interval`` seconds, so that
    a flood of made-up kids costs the issuer one fetch per interval."""

    def __init__(self, issuer: WorkloadIssuer, *, refresh_interval: float = 30.0, max_age: float = 3600.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.issuer = issuer
        self.refresh_interval = refresh_interval
        self.max_age = max_age
        self._monotonic = monotonic
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self._lock = threading.Lock()
        self.fetches = 0  # how many times the issuer's endpoints were asked (tests read it)

    def key(self, kid: str) -> jwt.PyJWK | None:
        with self._lock:
            now = self._monotonic()
            stale = self._fetched_at is None or now - self._fetched_at >= self.max_age
            if (kid not in self._keys or stale) and (
                    self._attempted_at is None or now - self._attempted_at >= self.refresh_interval):
                self._attempted_at = now
                try:
                    self._keys = self._fetch()
                    self._fetched_at = now
                except (httpx.HTTPError, ValueError, jwt.PyJWKError, jwt.PyJWKSetError, InvalidInputError) as exc:
                    if not self._keys:
                        raise ServiceUnavailableError(
                            f"cannot read the keys of issuer {self.issuer.issuer}: {exc}",
                            issuer=self.issuer.issuer) from None
                    # Keep the keys held: an issuer briefly down must not refuse every node.
            return self._keys.get(kid)

    def _fetch(self) -> dict[str, jwt.PyJWK]:
        self.fetches += 1
        verify: Any = str(self.issuer.ca_file) if self.issuer.ca_file else True
        with httpx.Client(timeout=FETCH_TIMEOUT_SECONDS, follow_redirects=False, verify=verify) as http:
            jwks_url = self.issuer.jwks_url
            if jwks_url is None:
                discovery = _get_json(http, check_fetch_url(
                    self.issuer.issuer.rstrip("/") + "/.well-known/openid-configuration", what="discovery URL"))
                if discovery.get("issuer") != self.issuer.issuer:
                    raise ValueError(f"the discovery document names issuer {discovery.get('issuer')!r}")
                jwks_url = discovery.get("jwks_uri")
                if not isinstance(jwks_url, str):
                    raise ValueError("the discovery document has no jwks_uri")
            document = _get_json(http, check_fetch_url(jwks_url, what="JWKS URL"))
        keys = document.get("keys")
        if not isinstance(keys, list):
            raise ValueError("the JWKS has no keys list")
        found: dict[str, jwt.PyJWK] = {}
        for entry in keys[:MAX_KEYS_PER_ISSUER]:
            if not isinstance(entry, dict) or not isinstance(entry.get("kid"), str) or entry.get("use", "sig") != "sig":
                continue
            if entry.get("kty") not in ("RSA", "EC"):
                continue  # an "oct" key would be a shared secret: never a verification key here
            try:
                key = jwt.PyJWK(entry)
            except (jwt.PyJWKError, jwt.InvalidKeyError):
                continue
            if key.algorithm_name in ALLOWED_ALGORITHMS:
                found[entry["kid"]] = key
        return found


def _get_json(http: httpx.Client, url: str) -> dict[str, Any]:
    with http.stream("GET", url, headers={"Accept": "application/json"}) as response:
        if response.status_code != 200:
            raise ValueError(f"{url} answered HTTP {response.status_code}")
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > MAX_JWKS_BYTES:
                raise ValueError(f"{url} answered more than {MAX_JWKS_BYTES} bytes")
    import json

    document = json.loads(bytes(body))
    if not isinstance(document, dict):
        raise ValueError(f"{url} answered no JSON object")
    return document


class WorkloadVerifier:
    """Verifies projected service-account tokens against the configured issuers (one key cache each)."""

    def __init__(self, issuers: list[WorkloadIssuer], *, refresh_interval: float = 30.0,
                 leeway_seconds: float = 30.0) -> None:
        for issuer in issuers:
            check_fetch_url(issuer.issuer, what="issuer")
            if issuer.jwks_url is not None:
                check_fetch_url(issuer.jwks_url, what="JWKS URL")
        self.caches = {i.issuer: JwksCache(i, refresh_interval=refresh_interval) for i in issuers}
        self.leeway = leeway_seconds

    def authenticate(self, session: Session, token: str) -> AuthenticatedPrincipal:
        """The node principal ``token`` stands for (:func:`authenticate_workload`)."""
        return authenticate_workload(session, self, token)

    def verify(self, token: str) -> WorkloadIdentity:
        """The identity a token names, once every check passed.

        Raises:
            WorkloadTokenRejectedError: the token fails a check (its ``reason`` says which).
            ServiceUnavailableError: the issuer's keys cannot be read and none are held.
        """
        if not looks_like_jwt(token):
            raise _refused("malformed", "not a JWT")
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.InvalidTokenError as exc:
            raise _refused("malformed", str(exc)) from None
        alg = header.get("alg")
        if alg not in ALLOWED_ALGORITHMS:
            raise _refused("algorithm", f"algorithm {alg!r} is not accepted (RS256 or ES256)", alg=str(alg))
        iss = unverified.get("iss")
        cache = self.caches.get(iss) if isinstance(iss, str) else None
        if cache is None:
            raise _refused("issuer", f"issuer {iss!r} is not trusted here", issuer=str(iss))
        kid = header.get("kid")
        key = cache.key(kid) if isinstance(kid, str) else None
        if key is None:
            raise _refused("unknown-key", f"no key {kid!r} in the keys of {iss}", kid=str(kid))
        if key.algorithm_name != alg:
            raise _refused("algorithm", f"key {kid!r} is for {key.algorithm_name}, not {alg}", alg=alg)
        try:
            claims = jwt.decode(
                token, key=key, algorithms=[alg], audience=cache.issuer.audience, issuer=cache.issuer.issuer,
                leeway=self.leeway, options={"require": ["iss", "sub", "aud", "exp", "iat", "nbf"]})
        except jwt.ExpiredSignatureError:
            raise _refused("expired", "the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise _refused("not-yet-valid", "the token is not valid yet (nbf or iat in the future)") from None
        except jwt.InvalidAudienceError:
            raise _refused("audience", f"the token is not for audience {cache.issuer.audience!r}") from None
        except jwt.InvalidIssuerError:
            raise _refused("issuer", "the token's issuer does not match") from None
        except jwt.InvalidSignatureError:
            raise _refused("signature", "the signature does not verify") from None
        except jwt.InvalidTokenError as exc:
            raise _refused("malformed", str(exc)) from None
        return _identity(cache.issuer.issuer, claims)


def _identity(issuer: str, claims: dict[str, Any]) -> WorkloadIdentity:
    k8s = claims.get("kubernetes.io")
    if not isinstance(k8s, dict):
        raise _refused("claims", "no kubernetes.io claim: not a service-account token")

    def name(obj: Any) -> str:
        value = obj.get("name") if isinstance(obj, dict) else None
        return value if isinstance(value, str) else ""

    namespace = k8s.get("namespace")
    account = k8s.get("serviceaccount")
    if not isinstance(namespace, str) or not name(account):
        raise _refused("claims", "the kubernetes.io claim names no namespace and service account")
    if claims.get("sub") != f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name(account)}":
        raise _refused("claims", "sub does not name the service account of the kubernetes.io claim")
    try:
        validate_subject(issuer, namespace, name(account))
    except InvalidInputError as exc:
        raise _refused("claims", exc.message) from None
    uid = account.get("uid") if isinstance(account, dict) else ""
    return WorkloadIdentity(issuer=issuer, namespace=namespace, service_account=name(account),
                            service_account_uid=uid if isinstance(uid, str) else "",
                            pod_name=name(k8s.get("pod")), node_name=name(k8s.get("node")))


def authenticate_workload(session: Session, verifier: WorkloadVerifier | None, token: str) -> AuthenticatedPrincipal:
    """The principal a projected token stands for: verified, then mapped through the bindings as they are now
    (nothing about the mapping is cached past this request), holding each binding's role in its tenant.

    Raises:
        WorkloadTokenRejectedError: no issuer is configured, the token fails a check, or no binding
            (or a disabled principal) for its service account.
    """
    if verifier is None or not verifier.caches:
        raise _refused("issuer", "this registry trusts no service-account token issuer")
    identity = verifier.verify(token)
    bindings = list(session.scalars(
        select(NodeBinding)
        .where(NodeBinding.issuer == identity.issuer, NodeBinding.namespace == identity.namespace,
               NodeBinding.service_account == identity.service_account)
        .options(joinedload(NodeBinding.tenant), joinedload(NodeBinding.principal))))
    if not bindings:
        raise _refused("unbound", f"service account {identity.namespace}/{identity.service_account} of "
                                  f"{identity.issuer} is bound to no tenant", namespace=identity.namespace,
                       service_account=identity.service_account)
    principal = bindings[0].principal
    if principal.disabled:
        raise _refused("disabled", f"principal {principal.name} is disabled", principal=principal.name)
    roles: dict[str, frozenset[tuple[Role, str]]] = {}
    for b in bindings:
        role = BINDING_ROLES.get(b.role)
        if role is not None:  # a role not known here grants nothing
            roles[b.tenant.name] = roles.get(b.tenant.name, frozenset()) | {(role, "")}
    return AuthenticatedPrincipal(id=principal.id, name=principal.name, is_admin=False, roles=roles)


def bound_node_principal(session: Session, principal: Principal) -> AuthenticatedPrincipal | None:
    """The node principal ``principal`` is with the node bindings it has now (the ``node`` role in each tenant
    it is bound to as a node; an ``admission`` binding gives none), as :func:`authenticate_workload` makes it;
    None when it is disabled or bound as a node to no tenant. For credentials exchanged for a service-account
    token (an OCI pull token), which name the principal only."""
    if principal.disabled:
        return None
    tenants = list(session.scalars(select(Tenant.name).join(NodeBinding, NodeBinding.tenant_id == Tenant.id)
                                   .where(NodeBinding.principal_id == principal.id, NodeBinding.role == "node")))
    if not tenants:
        return None
    return AuthenticatedPrincipal(id=principal.id, name=principal.name, is_admin=False,
                                  roles={t: frozenset({(Role.NODE, "")}) for t in tenants})
