"""The one place that builds settings, engine, clock, blob store, signer and job queue.

``serve``, ``worker``, the CLI and the tests all call :func:`bootstrap`; nothing is built at import
time. The embedded default (no database or blob store URL set) keeps everything under the data
directory and creates on first start what a fresh install needs: the schema, the ``default``
tenant, an ``admin`` principal whose token is written to ``DATA_DIR/admin-token`` (mode 0600), and
a signing key in ``DATA_DIR/keys/signing-key.pem``; trust root 1 is made from the signing key on first
use (:func:`registry.services.trust_roots.ensure_root`).
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from registry.clock import Clock, SystemClock
from registry.db.session import make_engine, make_session_factory
from registry.jobs import JobQueue
from registry.services.ports import ApprovalReaction, Ports
from registry.settings import Settings, check_secrets

if TYPE_CHECKING:
    from registry.console.sessions import SessionKey
    from registry.policy import PolicyEngine
    from registry.services.manifests import ReleaseCache
    from registry.services.receipts import ReportRateLimiter
    from registry.signing.keyring import KeyRing
    from registry.signing.keys import SigningKey
    from registry.signing.trust_root import LogTrust
    from registry.storage.base import BlobStore
    from registry.tlog.note import Ed25519Signer
    from registry.workload_identity import WorkloadVerifier


def load_settings(**overrides: object) -> Settings:
    return Settings(**overrides)  # type: ignore[arg-type]


@dataclass
class Container:
    """Everything a process needs, built once from settings."""

    settings: Settings
    engine: Engine
    session_factory: sessionmaker[Session]
    queue: JobQueue
    clock: Clock = field(default_factory=SystemClock)
    _blob_store: "BlobStore | None" = field(default=None, repr=False)

    @cached_property
    def blob_store(self) -> "BlobStore":
        if self._blob_store is not None:
            return self._blob_store
        from registry.storage import open_blob_store

        return open_blob_store(self.settings.resolved_blob_store_url(), self.settings)

    @cached_property
    def workload_verifier(self) -> "WorkloadVerifier | None":
        """The verifier of Kubernetes projected service-account tokens (None: no issuer is trusted)."""
        if not self.settings.workload_issuers:
            return None
        from registry.workload_identity import WorkloadVerifier

        return WorkloadVerifier(self.settings.workload_issuers,
                                refresh_interval=self.settings.workload_jwks_refresh_seconds)

    @cached_property
    def signing_key(self) -> "SigningKey":
        from registry.signing.keys import load_signing_key

        pem = self.settings.signing_key_pem.get_secret_value() if self.settings.signing_key_pem else None
        return load_signing_key(self.settings.signing_key_file, pem)

    @cached_property
    def log_key(self) -> "Ed25519Signer":
        """The verifiable audit log's signed-note key (ADR 0011): ``settings.log_key_file``, else
        ``<data_dir>/keys/log-key``, made once for the origin ``settings.log_origin`` (or one from
        ``public_url``). Its name is the log's origin."""
        from registry.statefile import create_once
        from registry.tlog.note import Ed25519Signer, parse_signer_key

        path = self.settings.log_key_file
        if path is None:
            path = ensure_data_dir(self.settings) / "keys" / "log-key"
            path.parent.mkdir(mode=0o700, exist_ok=True)
        fresh = Ed25519Signer.generate(self.settings.log_origin or default_log_origin(self.settings.public_url))
        return parse_signer_key(create_once(path, (fresh.skey + "\n").encode()).decode().strip())

    @cached_property
    def log_trust(self) -> "LogTrust":
        """What the trust root says of the verifiable log: the log key's verifier key (its name is the
        origin), the witnesses of ``settings.log_witnesses`` and the quorum ``settings.log_witness_quorum``.

        Raises:
            RootError: a witness key that is not a cosignature verifier key, a quorum above their number.
        """
        from registry.signing.trust_root import LogTrust, log_trust

        log = LogTrust(self.log_key.name, self.log_key.verifier().vkey,
                       tuple(w.verifier_key for w in self.settings.log_witnesses), self.settings.log_witness_quorum)
        return log_trust(log.as_dict())

    def collect_cosignatures(self) -> str | None:
        """Ask the log's witnesses to cosign its newest checkpoint now (a short timeout each); the checkpoint
        as served afterwards."""
        from registry.services.witnesses import collect_cosignatures

        return collect_cosignatures(self.session_factory, self.settings, timeout=2.0)

    @cached_property
    def keyring(self) -> "KeyRing":
        """The configured signing key and the keys rotations wrote to ``data_dir/keys/`` (see
        :mod:`registry.signing.keyring`); release manifests are signed with one the newest trust root lists."""
        from registry.signing.keyring import KeyRing

        return KeyRing(self.signing_key, self.settings.data_dir.resolve() / "keys")

    @cached_property
    def ports(self) -> Ports:
        """The clock, policy engine, blob store, signer and queue, as the one object services are passed, with
        the distribution channels' reactions to approval (:func:`approval_reactions`)."""
        return Ports(clock=self.clock, queue=self.queue, policy_engine=lambda: self.policy,
                     blob_store_of=lambda: self.blob_store, signer_of=lambda: self.signing_key,
                     on_approved=approval_reactions())

    @cached_property
    def release_cache(self) -> "ReleaseCache":
        """What never changes in this database's releases (per version, per trust root), kept per process."""
        from registry.services.manifests import ReleaseCache

        return ReleaseCache()

    @cached_property
    def receipt_limiter(self) -> "ReportRateLimiter":
        """Receipt reports per principal per minute (``receipts_rate_per_minute``), counted in this process."""
        from registry.services.receipts import ReportRateLimiter

        return ReportRateLimiter(self.settings.receipts_rate_per_minute)

    @cached_property
    def policy(self) -> "PolicyEngine":
        """The release policies (``settings.policy_dir``, else those shipped); a broken set denies."""
        from registry.policy import PolicyEngine, default_policy_dir

        return PolicyEngine.from_directory(self.settings.policy_dir or default_policy_dir())

    @cached_property
    def console_key(self) -> "SessionKey":
        """The web console's session key: ``settings.console_key``, else ``<data_dir>/console-key`` (made once)."""
        from registry.console.sessions import SessionKey

        if self.settings.console_key is not None:
            return SessionKey(bytes.fromhex(self.settings.console_key.get_secret_value().strip()))
        return SessionKey(bytes.fromhex(_secret_once(ensure_data_dir(self.settings) / "console-key")))

    @cached_property
    def oci_token_key(self) -> bytes:
        """The HMAC key of OCI pull tokens (``registry/services/oci_tokens.py``): derived from the console key, so
        every replica that shares that key accepts the tokens any of them issued."""
        return bytes.fromhex(self.console_key.mac("oci-pull-token", "signing key"))

    def open_source(self, uri: str, hf_endpoint: str | None, include: tuple[str, ...] = (),
                    exclude: tuple[str, ...] = ()):
        """Build an upstream source, with the hub endpoint and credentials from settings.

        The configured HF token goes only to the configured hub: an endpoint named in a submission
        is the submitter's choice, and the registry's credentials must not travel there.
        """
        from registry.sources import open_source, parse_source_uri
        from registry.sources.policy import same_endpoint
        from registry.storage import make_s3_client

        endpoint = hf_endpoint or self.settings.hf_endpoint
        kind, locator = parse_source_uri(uri)
        self.source_policy().check(kind, locator, endpoint)
        token = None
        if self.settings.hf_token and same_endpoint(endpoint, self.settings.hf_endpoint):
            token = self.settings.hf_token.get_secret_value()
        return open_source(
            uri, hf_endpoint=endpoint, hf_token=token,
            s3_client_factory=lambda: make_s3_client(self.settings), include=include, exclude=exclude,
        )

    def source_policy(self):
        """What submissions may read: configured hubs, directories and buckets, never our own state."""
        from urllib.parse import urlsplit

        from registry.sources.policy import SourcePolicy

        settings = self.settings
        store = urlsplit(settings.resolved_blob_store_url())
        forbidden_paths = [settings.data_dir]
        forbidden_buckets: list[str] = []
        if store.scheme == "file":
            forbidden_paths.append(Path(store.path))
        elif store.scheme == "s3":
            forbidden_buckets.append(store.netloc)
        if settings.signing_key_file is not None:
            forbidden_paths.append(settings.signing_key_file)
        if settings.log_key_file is not None:
            forbidden_paths.append(settings.log_key_file)
        return SourcePolicy(
            hf_endpoints=(settings.hf_endpoint, *settings.hf_allowed_endpoints),
            local_roots=tuple(settings.local_source_roots),
            s3_buckets=tuple(settings.s3_source_buckets),
            forbidden_paths=tuple(forbidden_paths),
            forbidden_buckets=tuple(forbidden_buckets),
        )

    def limits(self):
        from registry.services.versions import Limits

        return Limits(max_files=self.settings.max_files_per_version, max_file_size=self.settings.max_file_size,
                      max_total_size=self.settings.max_version_size)

    def dispose(self) -> None:
        self.engine.dispose()


def approval_reactions() -> tuple[ApprovalReaction, ...]:
    """What the distribution channels do when a version becomes approved (``Ports.on_approved``), in order.

    A channel that prepares anything before its first download registers its reaction here; the others
    (release manifests, ``/hf``) serve straight from the version and register nothing.
    """
    from registry.services import oci_builds

    # OCI: the raw artifact stored now where it needs no reads, the rest built by a job queued now.
    return (oci_builds.on_approved,)


def bootstrap(settings: Settings | None = None, *, migrate: bool = False,
              clock: Clock | None = None) -> Container:
    """Build the container; with ``migrate`` bring the schema to head first.

    Args:
        clock: the time source of the queue's leases and of the services (tests pass a ManualClock).

    Raises:
        InsecureSecretError: a presign secret or console key anyone could know (:func:`check_secrets`).
    """
    settings = settings or load_settings()
    check_secrets(settings)
    clock = clock or SystemClock()
    engine = make_engine(settings.resolved_database_url())
    if migrate:
        from registry.db import migrate as migrations

        migrations.upgrade(engine)
    session_factory = make_session_factory(engine)
    queue = JobQueue(
        session_factory,
        lease=dt.timedelta(seconds=settings.job_lease_seconds),
        backoff_base=dt.timedelta(seconds=settings.job_backoff_base_seconds),
        backoff_max=dt.timedelta(seconds=settings.job_backoff_max_seconds),
        clock=clock,
        max_attempts=settings.job_max_attempts,
    )
    return Container(settings=settings, engine=engine, session_factory=session_factory, queue=queue, clock=clock)


@dataclass(frozen=True, slots=True)
class FirstStart:
    admin_token_file: Path | None
    created_admin: bool


def prepare_embedded(settings: Settings) -> None:
    """Create the data directory, a signing key and the key file setting for the embedded default."""
    data_dir = ensure_data_dir(settings)
    if settings.signing_key_file is None and settings.signing_key_pem is None:
        key_file = data_dir / "keys" / "signing-key.pem"
        from registry.signing.keys import ensure_key_file

        key_file.parent.mkdir(mode=0o700, exist_ok=True)
        ensure_key_file(key_file)
        settings.signing_key_file = key_file
    from pydantic import SecretStr

    if settings.presign_secret is None:
        settings.presign_secret = SecretStr(_secret_once(data_dir / "presign-secret"))
    if settings.console_key is None:
        settings.console_key = SecretStr(_secret_once(data_dir / "console-key"))


def ensure_data_dir(settings: Settings) -> Path:
    """Create the data directory (mode 0700: it holds the database, keys and tokens) if it is missing.

    An existing directory keeps its mode: it is the operator's.
    """
    data_dir = settings.data_dir.resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        data_dir.mkdir(mode=0o700)
    except FileExistsError:
        return data_dir
    # mkdir's mode passes through the umask; say it once more so no umask can widen it.
    os.chmod(data_dir, 0o700)
    return data_dir


def ensure_initial_admin(container: Container) -> FirstStart:
    """On an empty registry: create tenant ``default`` and principal ``admin`` with a token file."""
    from registry import audit
    from registry.auth import issue_token
    from registry.db.models import Principal, Tenant

    token_file = container.settings.data_dir.resolve() / "admin-token"
    with container.session_factory() as session:
        if session.scalar(select(Principal).limit(1)) is not None:
            return FirstStart(admin_token_file=token_file if token_file.exists() else None, created_admin=False)
        try:
            if session.scalar(select(Tenant).where(Tenant.name == "default")) is None:
                session.add(Tenant(name="default"))
            admin = Principal(name="admin", is_admin=True)
            session.add(admin)
            # The insert waits for a replica that inserted first, and fails here once that one commits.
            session.flush()
            issued = issue_token(session, admin, description="initial admin token", expires_in=None)
            audit.append(session, actor="system", action="principal.created", subject="principal/admin",
                         details={"is_admin": True, "token_prefix": issued.prefix})
            session.commit()
        except IntegrityError:
            # Another replica starting at the same time created the first admin: its token is the one.
            return FirstStart(admin_token_file=None, created_admin=False)
    # Written once the admin is committed: a replica that lost the race never touches the winner's file.
    from registry.statefile import write_atomic

    write_atomic(token_file, (issued.token + "\n").encode())
    return FirstStart(admin_token_file=token_file, created_admin=True)


def ensure_trust_root(container: Container) -> int:
    """Publish trust root 1 from the signing key if there is no root yet, and a next root when the newest
    does not name the verifiable log as configured (its key, witnesses, quorum); return the newest version.
    A replica that loses the race to publish reads the winner's."""
    from registry.services.trust_roots import RotationConflictError, newest, publish_log

    with container.session_factory() as session:
        try:
            root = publish_log(session, container.keyring, container.log_trust, clock=container.clock,
                               expires_in=dt.timedelta(days=container.settings.trust_root_expiry_days))
        except RotationConflictError:
            root = newest(session)
    return root.version


def default_log_origin(public_url: str | None) -> str:
    """``<host>[/path]/log`` of the public URL (tlog-tiles: the log's prefix without its scheme), else
    ``modelreg.local/log``.

    Example:
        >>> default_log_origin("https://models.example.com/"), default_log_origin(None)
        ('models.example.com/log', 'modelreg.local/log')
    """
    from urllib.parse import urlsplit

    if not public_url:
        return "modelreg.local/log"
    parts = urlsplit(public_url)
    return f"{parts.netloc}{parts.path.rstrip('/')}/log"


def _secret_once(path: Path) -> str:
    """A random hex secret kept in ``path``: made by the first process to start, read by all the others."""
    from registry.statefile import create_once

    return create_once(path, (os.urandom(32).hex() + "\n").encode()).decode().strip()
