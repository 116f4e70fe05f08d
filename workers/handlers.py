"""The job kinds modelreg runs, each a thin call into one service function with the container's ports.

A dead job fails its version through the lifecycle's one path (``lifecycle.fail_version``)."""

from __future__ import annotations

from registry.bootstrap import Container
from registry.domain.errors import RegistryError, UnstorableDataError, UpstreamError
from registry.evals.sandbox import Isolation
from registry.jobs import JobKind
from registry.services import chunks, evals, lifecycle, mirroring, oci_builds, oci_referrers, scans
from workers.handler_registry import Handler, HandlerRegistry, Payload


def _mirror_file(c: Container, payload: Payload) -> None:
    mirroring.mirror_file(c.session_factory, int(payload["file_id"]), open_source=c.open_source, ports=c.ports)


def _mirror_file_dead(c: Container, payload: Payload, error: str, _cause: BaseException | None) -> None:
    mirroring.fail_version_of_file(c.session_factory, int(payload["file_id"]), _last_line(error))


def _resolve_version(c: Container, payload: Payload) -> None:
    mirroring.resolve_version(c.session_factory, int(payload["version_id"]), open_source=c.open_source,
                              limits=c.limits(), ports=c.ports)


def _resolve_version_dead(c: Container, payload: Payload, error: str, cause: BaseException | None) -> None:
    lifecycle.fail_version(c.session_factory, int(payload["version_id"]), _version_failure(
        cause, UpstreamError(f"resolving the upstream revision failed after retries: {_last_line(error)}")))


def _seal_version(c: Container, payload: Payload) -> None:
    mirroring.seal_version(c.session_factory, int(payload["version_id"]), ports=c.ports,
                           registry_url=c.settings.public_url)


def _seal_version_dead(c: Container, payload: Payload, error: str, cause: BaseException | None) -> None:
    lifecycle.fail_version(c.session_factory, int(payload["version_id"]),
                           _version_failure(cause, RegistryError(f"sealing failed: {_last_line(error)}")))


def _scan_blob(c: Container, payload: Payload) -> None:
    scans.scan_blob(c.session_factory, payload["digest"], payload["path"], ports=c.ports)


def _scan_blob_dead(c: Container, payload: Payload, error: str, _cause: BaseException | None) -> None:
    scans.fail_scanning_versions_of(c.session_factory, payload["digest"], payload["path"], _last_line(error))


def _run_eval(c: Container, payload: Payload) -> None:
    isolation = Isolation(allow_unisolated=c.settings.eval_allow_unisolated,
                          read_only_paths=tuple(str(p) for p in c.settings.eval_read_only_paths))
    evals.run_eval(c.session_factory, int(payload["result_id"]), ports=c.ports, isolation=isolation,
                   work_root=c.settings.eval_work_dir)


def _run_eval_dead(c: Container, payload: Payload, error: str, _cause: BaseException | None) -> None:
    evals.fail_eval(c.session_factory, int(payload["result_id"]), _last_line(error), ports=c.ports)


def _build_oci_artifacts(c: Container, payload: Payload) -> None:
    oci_builds.build_artifacts(c.session_factory, int(payload["version_id"]), blob_store=c.blob_store, clock=c.clock)
    oci_referrers.record_version(c.session_factory, int(payload["version_id"]), blob_store=c.blob_store,
                                 clock=c.clock, signer=oci_referrers.signer_of(c.keyring.primary))
def _record_chunks(c: Container, payload: Payload) -> None:
    chunks.record_blob_chunks(c.session_factory, payload["digest"], ports=c.ports)


def _version_failure(cause: BaseException | None, otherwise: RegistryError) -> RegistryError:
    """Why the version of a dead job fails: a value the database refused says so itself."""
    return cause if isinstance(cause, UnstorableDataError) else otherwise


def _last_line(error: str) -> str:
    lines = [line for line in error.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else "unknown error"


def build_handlers() -> HandlerRegistry:
    return HandlerRegistry([
        Handler(JobKind.RESOLVE_VERSION.value, _resolve_version, _resolve_version_dead),
        Handler(JobKind.MIRROR_FILE.value, _mirror_file, _mirror_file_dead),
        Handler(JobKind.SEAL_VERSION.value, _seal_version, _seal_version_dead),
        Handler(JobKind.SCAN_BLOB.value, _scan_blob, _scan_blob_dead),
        Handler(JobKind.RUN_EVAL.value, _run_eval, _run_eval_dead),
        # A dead build leaves the version approved: its image tag says why it is not served.
        Handler(JobKind.BUILD_OCI_ARTIFACTS.value, _build_oci_artifacts),
        Handler(JobKind.RECORD_CHUNKS.value, _record_chunks),
        WEBHOOK_HANDLER,
        Handler(JobKind.INTEGRATE_AUDIT_LOG.value, _integrate_audit_log),
    ])


# Webhook deliveries (registry/services/webhooks.py); the job re-checks everything it reads.
def _deliver_webhook(c: Container, payload: Payload) -> None:
    from registry.services import webhooks

    webhooks.deliver(c.session_factory, int(payload["subscription_id"]),
                     config=webhooks.DeliveryConfig.from_settings(c.settings), clock=c.clock)


WEBHOOK_HANDLER = Handler(JobKind.DELIVER_WEBHOOK.value, _deliver_webhook)


# The verifiable audit log (registry/services/tlog.py): integrate what committed, sign when due, then
# submit the newest checkpoint to the witnesses that have not cosigned it (bounded; never fails the job).
def _integrate_audit_log(c: Container, _payload: Payload) -> None:
    from registry.services import tlog, witnesses

    tlog.integrate_audit_log(c.session_factory)
    tlog.sign_checkpoint_if_due(c.session_factory, c.log_key, interval=c.settings.log_checkpoint_interval,
                                now=c.clock.now())
    if c.settings.log_witnesses:
        witnesses.submit_checkpoint(c.session_factory, c.settings.log_witnesses, now=c.clock.now())
