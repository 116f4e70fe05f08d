"""Settings, read from the environment (prefix ``MODELREG_``) by :func:`registry.bootstrap.load_settings`.

Nothing here is built at import time: ``Settings()`` is called once, by bootstrap, which refuses secrets
anyone could know (:func:`check_secrets`: a presign secret or console key under 32 bytes, or published here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from registry.domain.errors import InvalidInputError


class WorkloadIssuer(BaseModel):
    """A trusted issuer of Kubernetes projected service-account tokens (a cluster's kube-apiserver).

    Keys come from ``jwks_url``, else from the ``jwks_uri`` of ``<issuer>/.well-known/openid-configuration``.
    """

    issuer: str = Field(description="The tokens' `iss`, exactly (e.g. https://kubernetes.default.svc.cluster.local).")
    audience: str = Field("modelreg", description="The `aud` a token must carry for this registry.")
    jwks_url: str | None = Field(None, description="The issuer's JWKS; default: OIDC discovery under the issuer.")
    ca_file: Path | None = Field(None, description="CA bundle for the JWKS/discovery endpoints (a cluster's CA).")


class LogWitness(BaseModel):
    """A witness of the verifiable log (C2SP tlog-witness): its cosignature verifier key and, when the
    registry submits checkpoints to it, the base URL of its ``add-checkpoint`` endpoint."""

    verifier_key: str = Field(description="The witness's verifier key, <name>+<hex id>+<base64(0x04 || key)>.")
    url: str | None = Field(None, description="Base URL the registry POSTs <url>/add-checkpoint to; none: "
                                                "the witness pulls and its cosignatures arrive another way.")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MODELREG_", extra="ignore")

    data_dir: Path = Field(Path(".modelreg"), description="Where the embedded default keeps its state.")
    database_url: str | None = Field(None, description="SQLAlchemy URL; default sqlite in data_dir.")
    blob_store_url: str | None = Field(
        None, description="file:///abs/dir or s3://bucket/prefix; default file://<data_dir>/blobs."
    )
    s3_endpoint_url: str | None = None
    s3_region: str = "us-east-1"
    s3_access_key_id: str | None = None
    s3_secret_access_key: SecretStr | None = None
    multipart_part_size: int = Field(64 * 1024 * 1024, ge=5 * 1024 * 1024)
    presign_secret: SecretStr | None = Field(None, description="HMAC key for local presigned URLs.")
    console_key: SecretStr | None = Field(
        None, description="HMAC key of web console sessions (hex, 32+ bytes); default <data_dir>/console-key. "
                          "Set the same on every API replica.")

    oidc_issuer: str | None = Field(
        None, description="OpenID provider's issuer URL; with oidc_client_id, the console offers single sign-on.")
    oidc_client_id: str | None = Field(None, description="The console's client id at the provider.")
    oidc_client_secret: SecretStr | None = Field(None,
                                                 description="The console's client secret (none: a public client).")
    oidc_cli_client_id: str | None = Field(
        None, description="The public client `modelreg login` uses (loopback redirect, PKCE); none: no CLI login.")
    oidc_provider_name: str = Field("your identity provider", description="Shown on the sign-in button.")
    oidc_scopes: list[str] = Field(default_factory=lambda: ["openid", "profile", "groups"])
    oidc_groups_claim: str = Field("groups", description="The ID token claim listing the user's groups.")
    oidc_username_claim: str = Field("preferred_username", description="The claim naming the principal.")
    oidc_principal_prefix: str = Field("", description="Put before the claim's value to make the principal's name.")
    oidc_group_roles: dict[str, Any] = Field(
        default_factory=dict, description='Group -> grant(s), e.g. {"security-approvers": {"tenant": "acme", '
                                          '"role": "approver", "capacity": "security"}}.')
    oidc_adopt_existing_principals: bool = Field(
        False, description="Let a provider user take over a principal of the same name made with a token.")
    oidc_leeway_seconds: int = Field(60, ge=0, le=600, description="Clock skew allowed on an ID token's exp and iat.")
    oidc_cli_token_minutes: int = Field(60, ge=5, le=24 * 60, description="Lifetime of a `modelreg login` token.")

    host: str = "127.0.0.1"
    port: int = 8080
    public_url: str | None = Field(None, description="Base URL clients use to reach the API.")
    workers: int = Field(2, ge=0, description="Worker threads started by `modelreg serve`.")

    signing_key_file: Path | None = Field(None, description="PEM of the ECDSA P-256 signing key.")
    signing_key_pem: SecretStr | None = Field(None, description="The signing key PEM itself.")
    trust_root_expiry_days: int = Field(
        365, ge=1, le=3650, description="Lifetime of a trust root made by this registry (root 1, and each rotation).")

    release_alias_ttl_seconds: int = Field(
        300, ge=10, le=86400 * 7, description="Lifetime of a release manifest of a moving alias (prod, canary).")
    release_version_ttl_seconds: int = Field(
        86400, ge=10, le=86400 * 30, description="Lifetime of a release manifest of a version number.")
    release_url_ttl_seconds: int = Field(
        3600, ge=60, le=7 * 86400, description="Lifetime of the presigned blob URLs beside a release manifest.")
    event_poll_seconds: float = Field(
        0.25, gt=0, le=60, description=(
            "SQLite: how often each API process reads the audit log for new events, waking the long-polls "
            "(?wait=) they concern; one query per interval per process, whatever the number of waiters."))
    event_safety_poll_seconds: float = Field(
        5.0, gt=0, le=300, description=(
            "PostgreSQL: how often each API process reads the audit log beside LISTEN/NOTIFY, in case a "
            "notification is lost."))

    workload_issuers: list[WorkloadIssuer] = Field(
        default_factory=list, description="Trusted issuers of Kubernetes projected service-account tokens "
                                          "(JSON: [{issuer, audience, jwks_url?, ca_file?}]); none: nodes use tokens.")
    workload_jwks_refresh_seconds: float = Field(
        30.0, ge=0.05, le=3600, description="An issuer's keys are fetched again (on a token of an unknown kid) at "
                                            "most this often: a flood of made-up kids costs one fetch.")

    hf_endpoint: str = "https://huggingface.co"
    hf_token: SecretStr | None = None
    hf_allowed_endpoints: list[str] = Field(
        default_factory=list, description="Hub endpoints a submission may name besides hf_endpoint.")
    oci_token_seconds: int = Field(
        300, ge=10, le=3600, description="How long an OCI pull token from /v2/token is valid (seconds).")
    oci_blob_redirect: bool = Field(
        False, description="With an S3 blob store, answer a /v2 blob GET with a 307 to a presigned URL of the object "
                           "(after the same authorization) instead of streaming it through the API; HEAD and the "
                           "generated config blob are still answered by the API. Ignored with a local store.")
    oci_blob_redirect_seconds: int = Field(
        300, ge=10, le=3600, description="Lifetime of the presigned URL a /v2 blob redirect sends the client to.")
    hf_tree_page_size: int = Field(
        1000, ge=1, le=10_000, description="Entries per page of the /hf tree listing (the Hub uses 1000).")
    local_source_roots: list[Path] = Field(
        default_factory=list, description="Server directories under which directory sources are allowed.")
    s3_source_buckets: list[str] = Field(
        default_factory=list, description="Buckets allowed as s3:// sources (read with the S3 settings).")

    max_files_per_version: int = 10_000
    max_file_size: int = 1024**4
    max_version_size: int = 4 * 1024**4

    audit_checkpoint_every_events: int = Field(
        1000, ge=1, description="Workers sign an audit checkpoint after this many new events...")
    audit_checkpoint_every_seconds: float = Field(
        3600.0, gt=0, description="...or this long after the last checkpoint, when there are new events.")

    log_checkpoint_interval: float = Field(
        10.0, gt=0, description="Workers sign a checkpoint of the verifiable audit log (/log/checkpoint) at most "
                                "this often (seconds), when it grew.")
    log_release_catch_up_events: int = Field(
        10_000, ge=0, description="A manifest request integrates at most this many audit events into the log "
                                  "itself to prove its release; when the log is further behind (a tree being built "
                                  "after an upgrade) it answers 503 with Retry-After until the workers catch up.")
    log_key_file: Path | None = Field(
        None, description="The verifiable log's Ed25519 key (one line, Go's PRIVATE+KEY+<origin>+<id>+<base64>); "
                          "default <data_dir>/keys/log-key, made on first use.")
    log_origin: str | None = Field(
        None, description="The checkpoint origin a new log key is made for; default <public_url host/path>/log, "
                          "else modelreg.local/log. The log keeps the origin of its first checkpoint.")

    log_witnesses: list[LogWitness] = Field(
        default_factory=list, description="The log's witnesses (JSON list of {verifier_key, url}); they are "
                                          "named in the trust root, and new checkpoints are submitted to them.")
    log_witness_quorum: int = Field(
        0, ge=0, description="How many of log_witnesses must cosign a checkpoint for nodes to accept it "
                             "(named in the trust root); 0: none required.")

    policy_dir: Path | None = Field(
        None, description="Directory of *.rego policies and data.json; default the policies shipped with modelreg.")

    log_format: Literal["text", "json"] = Field(
        "text", description="How `serve` and `worker` log: text lines, or one JSON object a line (with request ids).")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    metrics_public: bool = Field(
        True,
        description="Serve /metrics without a token (scraped on an internal network); false: administrators only.")
    metrics_cache_seconds: float = Field(
        5.0, ge=0, le=300, description="How long a process reuses the database series of /metrics between scrapes.")

    eval_allow_unisolated: bool = Field(
        False, description="Run evals where the kernel refuses the runner its namespaces (recorded as unisolated); "
                           "otherwise such an eval fails.")
    eval_read_only_paths: list[Path] = Field(
        default_factory=list, description="More paths every eval runner sees, read-only (a tool's install, a cache).")
    eval_work_dir: Path | None = Field(
        None, description="Where evals copy the model, one locked directory per run, swept of killed runs by every "
                          "worker start and `modelreg gc`; default $TMPDIR/modelreg-evals-<uid>. The workers and gc "
                          "of one machine must name the same directory.")

    egress_allow: list[str] = Field(
        default_factory=list,
        description="Hosts, addresses or CIDR networks that webhook URLs may name although they are private, "
                    "loopback or link-local (registry/net/egress.py); JSON list, e.g. [\"10.1.2.0/24\"].")
    webhook_retry_for_seconds: float = Field(
        86400.0, gt=0, description="How long a webhook retries one failing event before it is paused.")
    webhook_backoff_base_seconds: float = Field(
        5.0, gt=0, description="First retry delay of a failing webhook; it doubles per attempt, with jitter.")
    webhook_backoff_max_seconds: float = Field(1800.0, gt=0, description="The longest delay between two retries.")
    webhook_connect_timeout_seconds: float = Field(5.0, gt=0, le=60)
    webhook_timeout_seconds: float = Field(
        10.0, gt=0, le=120, description="The longest one delivery may take, connect to last byte read.")
    webhook_max_response_bytes: int = Field(65536, ge=0, le=1 << 20, description="Bytes of an answer read.")
    webhook_poll_seconds: float = Field(
        1.0, gt=0, le=60, description="How often workers look for webhooks with events to deliver.")
    webhook_delivery_threads: int = Field(
        4, ge=1, le=64, description="Threads per worker process that deliver webhooks (only webhooks).")

    receipts_stale_after_seconds: float = Field(
        900.0, gt=0, description="A place whose node program has not reported for this long is shown stale.")
    receipts_rate_per_minute: int = Field(
        120, ge=1, le=100_000, description="Receipt reports one principal may send per minute (per API process).")

    job_lease_seconds: float = 60.0
    job_max_attempts: int = Field(5, ge=1, description="Attempts of a job before it is dead.")
    job_backoff_base_seconds: float = 2.0
    job_backoff_max_seconds: float = 300.0

    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'registry.db').resolve()}"

    def resolved_blob_store_url(self) -> str:
        return self.blob_store_url or (self.data_dir / "blobs").resolve().as_uri()


MIN_SECRET_BYTES = 32
"""The fewest bytes of the presign secret and the console key (HMAC-SHA256 keys)."""
PUBLISHED_SECRETS = frozenset({
    "change-me",  # deploy/kubernetes/config.yaml's placeholder
    # The console key docker-compose.yml shipped until issue 30: anyone who read the repository knows it.
    "3f1c0a9e7b2d4c6f8a1e3b5d7f9c2a4e6b8d0f1a3c5e7a9b2d4f6a8c0e2b4d6f",
})
"""Values published in this repository as examples: a deployment that kept one has no secret."""


class InsecureSecretError(InvalidInputError):
    """A presign secret or console key that is too short, not hex (the console key), or published."""

    code = "insecure-secret"


def check_secrets(settings: Settings) -> None:
    """Refuse a presign secret or console key that anyone could know or guess.

    Args:
        settings: the process's settings (an unset secret is made at first start, and passes).

    Raises:
        InsecureSecretError: a value published in this repository, a presign secret under
            :data:`MIN_SECRET_BYTES` bytes, or a console key that is not hex of that many bytes.
    """
    checks = (("presign_secret", "MODELREG_PRESIGN_SECRET", settings.presign_secret),
              ("console_key", "MODELREG_CONSOLE_KEY", settings.console_key))
    for field, variable, value in checks:
        if value is None:
            continue
        text = value.get_secret_value().strip()
        if text.lower() in PUBLISHED_SECRETS:
            raise InsecureSecretError(f"{variable} is an example published in the modelreg repository: make one "
                                      "with `openssl rand -hex 32` (or leave it unset to have one made in the "
                                      "data directory)", field=field)
        if field == "console_key":
            try:
                size = len(bytes.fromhex(text))
            except ValueError:
                raise InsecureSecretError(f"{variable} is not hex: make one with `openssl rand -hex 32`",
                                          field=field) from None
        else:
            size = len(text.encode())
        if size < MIN_SECRET_BYTES:
            raise InsecureSecretError(f"{variable} has {size} bytes, fewer than {MIN_SECRET_BYTES}: make one with "
                                      "`openssl rand -hex 32`", field=field)
