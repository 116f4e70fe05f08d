"""Evals of a LoRA adapter on the base it is bound to (issue 34): what an eval record says it ran on, and the base
a run loads.

An adapter version (``registry/services/adapters.py``) is never evaluated alone. Each of its eval results names
the base it runs on (:func:`ran_on`: the base version, the digest of the base's ``weights`` component the binding
signed, and the adapter's own weights digest), written when the version enters ``evaluating``. Before the run,
:func:`base_for_run` holds the base to that: still a base (not revoked, failed, rejected, flagged or deleted), its
recorded weights the ones the result names; the ``run_eval`` job then copies the base's files out of the store,
hash-checked, beside the adapter's for the suites that load it (``registry.evals.runners.needs_base``). The
policies count an adapter's result only for the base it ran on (``policies/adapters.rego``, rule
``adapter.eval-base``), reading :func:`registry.services.loaders.statement_binding` and each result's ``ran_on``.

Usage (a sketch, not run as a doctest)::

    row.ran_on = ran_on(session, version)                 # when the pending result is written
    base, refused = base_for_run(session, version, row.ran_on)
    base.files, base.adapter.name                         # what the run copies out, the adapter's served name
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from registry.db.models import Version, VersionComponent
from registry.domain.states import VersionState
from registry.evals.runners import AdapterOnBase
from registry.services.loaders import version_ref

BASE_UNUSABLE = "base_unusable"
"""The reason of a result not run because its base is no base any more (revoked, failed, flagged...)."""
INTEGRITY = "integrity"
"""The reason of a result not run because the base's recorded weights are not those it names."""

_ENDED = {VersionState.FAILED.value: "failed", VersionState.REJECTED.value: "was rejected",
          VersionState.REVOKED.value: "was revoked"}


@dataclass(frozen=True)
class BaseForRun:
    """The base an adapter's eval runs on: the version (for its scan verdicts), its files and how the runner
    names the adapter and the base."""

    version: Version
    files: list[tuple[str, str]]
    adapter: AdapterOnBase


def _weights_digest(session: Session, version: Version) -> str | None:
    return session.scalar(select(VersionComponent.digest).where(VersionComponent.version_id == version.id,
                                                                VersionComponent.name == "weights"))


def ran_on(session: Session, version: Version) -> dict[str, Any] | None:
    """What an eval result of ``version`` runs on: None for a version that is no adapter; for an adapter
    ``{"base_model", "base_version", "base_weights_digest", "adapter_weights_digest"}`` (the digests hex, the
    base's weights digest the one its binding signed)."""
    binding = version.adapter_binding
    if binding is None:
        return None
    base = binding.base
    return {"base_model": f"{base.model.tenant.name}/{base.model.name}", "base_version": base.number,
            "base_weights_digest": binding.weights_digest,
            "adapter_weights_digest": _weights_digest(session, version)}


def base_for_run(session: Session, version: Version,
                 ran: dict[str, Any] | None) -> tuple[BaseForRun | None, tuple[str, str] | None]:
    """The base a result of ``version`` that names ``ran`` (:func:`ran_on`) runs on, or why it must not run.

    Returns:
        ``(None, None)`` for a version that is no adapter; ``(base, None)`` when the run may go ahead; else
        ``(None, (reason, error))``: ``base_unusable`` (the base was revoked, failed, rejected, flagged or
        deleted since the binding) or ``integrity`` (the result names other weights than the binding, or the
        base's recorded weights are not the bound ones).
    """
    binding = version.adapter_binding
    if binding is None:
        if ran is not None:
            return None, (INTEGRITY, "the result names a base, but the version is bound to none")
        return None, None
    base = binding.base
    ref = version_ref(base)
    if ran is None or ran.get("base_weights_digest") != binding.weights_digest:
        return None, (INTEGRITY, f"the result names other base weights than the binding to {ref} "
                                 f"(sha256:{binding.weights_digest})")
    if base.deleted_at is not None:
        return None, (BASE_UNUSABLE, f"not evaluated: its base {ref} was deleted by a retention rule")
    if base.state in _ENDED:
        return None, (BASE_UNUSABLE, f"not evaluated: its base {ref} {_ENDED[base.state]}")
    if base.flagged_at is not None:
        return None, (BASE_UNUSABLE, f"not evaluated: its base {ref} is flagged: {base.flag_reason}")
    recorded = _weights_digest(session, base)
    if recorded != binding.weights_digest:
        return None, (INTEGRITY, f"the base {ref} records weights sha256:{recorded}, not the bound "
                                 f"sha256:{binding.weights_digest}")
    files = [(f.path, f.sha256) for f in base.files]
    if any(digest is None for _, digest in files):
        return None, (BASE_UNUSABLE, f"not evaluated: the files of its base {ref} are not all stored")
    return BaseForRun(base, files, AdapterOnBase(version.model.name, ref)), None
